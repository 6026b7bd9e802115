package archtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocLinks: every relative link in README.md and docs/*.md points to a
// file that exists (and to a heading that exists, for #anchors into
// markdown), and README.md stays a front page.
func TestDocLinks(t *testing.T) {
	files, err := DocFiles(root(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found only %v", files)
	}
	for _, line := range CheckDocs(root(t), files) {
		t.Error(line)
	}
}

func TestCheckDocsCatchesBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/a.md", "# A page\n\n## `fleet up`: the fleet\n\n## Twice\n\n## Twice\n\nSee [the README](../README.md#front), [b](b.md) and ![pic](img/x.png).\n")
	write("docs/img/x.png", "")
	write("README.md", strings.Join([]string{
		"# Front",
		"[ok](docs/a.md#fleet-up-the-fleet) [ok too](docs/a.md#twice-1) [self](#front) [web](https://example.com/x.md)",
		"[gone](docs/missing.md) ![gone picture](docs/img/y.png) [bad anchor](docs/a.md#nope) [bad self](#back)",
		"`[in code](docs/nothing.md)`",
		"```",
		"[in a block](docs/nothing.md)",
		"```",
		"[outside](../etc/passwd)",
	}, "\n")+"\n")
	got := strings.Join(CheckDocs(dir, []string{"README.md", "docs/a.md"}), "\n")
	for _, want := range []string{
		"README.md:3: link docs/missing.md: no such file docs/missing.md",
		"README.md:3: link docs/img/y.png: no such file docs/img/y.png",
		"README.md:3: link docs/a.md#nope: docs/a.md has no heading #nope",
		"README.md:3: link #back: README.md has no heading #back",
		"README.md:8: link ../etc/passwd: points outside the module",
		"docs/a.md:9: link b.md: no such file docs/b.md",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n") + 1; n != 6 {
		t.Errorf("%d problems, want 6:\n%s", n, got)
	}

	write("README.md", strings.Repeat("line\n", MaxReadmeLines+1))
	if got := CheckDocs(dir, []string{"README.md"}); len(got) != 1 || !strings.Contains(got[0], "321 lines, more than 320") {
		t.Errorf("a long README: %q", got)
	}
	write("README.md", strings.Repeat("line\n", MaxReadmeLines))
	if got := CheckDocs(dir, []string{"README.md"}); len(got) != 0 {
		t.Errorf("a README of %d lines: %q", MaxReadmeLines, got)
	}
}
