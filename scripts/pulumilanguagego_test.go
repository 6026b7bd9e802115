package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPulumiLanguageGoCopyIsTheRelease: third_party/pulumi-language-go is
// exactly the files its SHA256SUMS lists (recorded from the pulumi/pulumi
// release its UPSTREAM names), and tools/pulumi/go.mod builds it at that tag
// (scripts/pulumi-language-go.sh --check). With RELAYFLEET_PULUMI_GIT set to a
// pulumi/pulumi git directory, the list is also rebuilt from the release
// itself (--verify).
func TestPulumiLanguageGoCopyIsTheRelease(t *testing.T) {
	args := []string{"--check"}
	if g := os.Getenv("RELAYFLEET_PULUMI_GIT"); g != "" {
		args = []string{"--verify", g}
	}
	out, err := exec.Command("./pulumi-language-go.sh", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("third_party/pulumi-language-go is not the release its UPSTREAM names (refresh it: third_party/pulumi-language-go/README.md): %v\n%s", err, out)
	}
	up, err := os.ReadFile("../third_party/pulumi-language-go/UPSTREAM")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../third_party/pulumi-language-go/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(up)), "\n") {
		if tag, ok := strings.CutPrefix(l, "tag "); ok && !strings.Contains(string(readme), tag) {
			t.Errorf("third_party/pulumi-language-go/README.md does not name the tag %s", tag)
		}
	}
}

// TestPulumiLanguageGoCheckCatches: the check fails, naming the file, when a
// byte of the copy changes, a file is added or one is removed.
func TestPulumiLanguageGoCheckCatches(t *testing.T) {
	cases := map[string]struct {
		change func(t *testing.T, copyDir string)
		want   string
	}{
		"changed": {func(t *testing.T, d string) { appendTo(t, filepath.Join(d, "main.go"), "\n") }, "main.go: differs from the release"},
		"added":   {func(t *testing.T, d string) { writeFile(t, filepath.Join(d, "extra.go"), "package main\n") }, "extra.go: in the copy, not in SHA256SUMS"},
		"removed": {func(t *testing.T, d string) { removeFile(t, filepath.Join(d, "goversion", "version.go")) }, "goversion/version.go: in SHA256SUMS, missing from the copy"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			copyTree(t, "pulumi-language-go.sh", filepath.Join(root, "scripts", "pulumi-language-go.sh"))
			copyTree(t, "../third_party/pulumi-language-go", filepath.Join(root, "third_party", "pulumi-language-go"))
			copyTree(t, "../tools/pulumi/go.mod", filepath.Join(root, "tools", "pulumi", "go.mod"))
			if out, err := exec.Command(filepath.Join(root, "scripts", "pulumi-language-go.sh")).CombinedOutput(); err != nil {
				t.Fatalf("the unchanged copy fails the check: %v\n%s", err, out)
			}
			c.change(t, filepath.Join(root, "third_party", "pulumi-language-go"))
			out, err := exec.Command(filepath.Join(root, "scripts", "pulumi-language-go.sh")).CombinedOutput()
			if err == nil || !strings.Contains(string(out), c.want) {
				t.Fatalf("check after the change: err %v, output %q; want a failure naming %q", err, out, c.want)
			}
		})
	}
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-R", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp %s: %v\n%s", src, err, out)
	}
}

func appendTo(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func removeFile(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}
