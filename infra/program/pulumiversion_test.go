package program

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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

// TestPulumiVersionInOnePlace: no file names the Pulumi CLI's version but
// tools/pulumi/go.mod (and PulumiVersion, held to it above); a version
// written into docs or scripts goes stale at the next bump. The module's
// own go.mod and go.sum (and go.stock.mod/sum, the same without the
// quic-go replace) name the Go SDK's and libraries' versions, which
// are not the CLI's.
func TestPulumiVersionInOnePlace(t *testing.T) {
	root := filepath.Join("..", "..")
	version := regexp.MustCompile(`(?i)pulumi.{0,60}\bv?3\.\d{2,3}\.\d+`)
	skip := map[string]bool{"go.mod": true, "go.sum": true, "go.stock.mod": true, "go.stock.sum": true, "tools/pulumi/go.mod": true, "tools/pulumi/go.sum": true, "infra/program/stack.go": true}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "node_modules" || d.Name() == "testdata" || rel == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		// Links (bin/pulumi-resource-relayfleet -> fleet, maybe dangling)
		// and other non-regular files are not sources.
		// The Go language host's copy: its files are the release's own,
		// and its README and UPSTREAM name the copy's tag, which
		// scripts/pulumi-language-go.sh holds to tools/pulumi/go.mod.
		if strings.HasPrefix(rel, "third_party/pulumi-language-go/") {
			return nil
		}
		if skip[rel] || strings.HasSuffix(rel, "_test.go") || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil || info.Size() > 1<<20 {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := version.FindString(line); m != "" {
				t.Errorf("%s:%d names a Pulumi version (%q): say tools/pulumi/go.mod instead", rel, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
