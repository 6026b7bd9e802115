package program

import (
	"os"
	"regexp"
	"testing"
)

// TestPulumiVersionIsToolsGoMod: the Pulumi CLI's version has one source,
// tools/pulumi/go.mod, which make pulumi builds (the Makefile reads it from
// there); PulumiVersion, where Go code finds the cached build, must match.
func TestPulumiVersionIsToolsGoMod(t *testing.T) {
	b, err := os.ReadFile("../../tools/pulumi/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/pulumi/pulumi/pkg/v3 (v\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("tools/pulumi/go.mod requires no github.com/pulumi/pulumi/pkg/v3")
	}
	if string(m[1]) != PulumiVersion {
		t.Errorf("PulumiVersion = %s, tools/pulumi/go.mod builds %s: change the constant", PulumiVersion, m[1])
	}
}
