package provision

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/cli"
)

// TestRelayBinary: a relay build is an ELF file, named or beside the
// running binary; anything else is refused in one line naming it.
func TestRelayBinary(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	elf := write("relay", "\x7fELF\x02\x01\x01rest of the build")
	script := write("script", "#!/bin/sh\n")
	short := write("short", "\x7fE")
	noExec := write("noexec", "\x7fELF\x02\x01\x01rest of the build")
	if err := os.Chmod(noExec, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		want       string // the path returned, or the error's text
		is         error
		ok         bool
	}{
		{"an ELF file", elf, elf, nil, true},
		{"a script", script, script + " is not a Linux executable", nil, false},
		{"shorter than the magic", short, short + " is not a Linux executable", nil, false},
		{"a directory", dir, dir + " is not an executable", nil, false},
		{"no execute bit", noExec, noExec + " is not an executable", nil, false},
		{"missing", filepath.Join(dir, "nope"), "stat " + filepath.Join(dir, "nope") + ": no such file or directory", fs.ErrNotExist, false},
		// go test's binary has no relay beside it.
		{"none beside the running binary", "", "no relay beside ", ErrNoRelay, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RelayBinary(tc.path)
			switch {
			case (err == nil) != tc.ok:
				t.Errorf("RelayBinary(%q) = %q, %v", tc.path, got, err)
			case err == nil && got != tc.want:
				t.Errorf("RelayBinary(%q) = %q, want %q", tc.path, got, tc.want)
			case err != nil && !strings.HasPrefix(err.Error(), tc.want):
				t.Errorf("RelayBinary(%q): %v, want %q", tc.path, err, tc.want)
			case err != nil && tc.is != nil && !errors.Is(err, tc.is):
				t.Errorf("RelayBinary(%q): %v is not %v", tc.path, err, tc.is)
			}
		})
	}
	t.Run("relative", func(t *testing.T) {
		t.Chdir(dir)
		if got, err := RelayBinary("relay"); err != nil || got != elf {
			t.Errorf("RelayBinary(relay) in its directory = %q, %v; want %q", got, err, elf)
		}
	})
}

// TestFindRelayNamesTheFlag: a command's relay build is refused as bad
// usage, in one line naming --relay-binary; ReadRelay reads a good one.
func TestFindRelayNamesTheFlag(t *testing.T) {
	dir := t.TempDir()
	elf := filepath.Join(dir, "relay")
	if err := os.WriteFile(elf, []byte("\x7fELF\x02\x01\x01rest"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, want string }{
		{"not a build", script, "flag --relay-binary: " + script + " is not a Linux executable"},
		{"none beside", "", "flag --relay-binary: no relay beside "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FindRelay(tc.path)
			var ue *cli.UsageError
			if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("FindRelay(%q): %v; want a usage error %q", tc.path, err, tc.want)
			}
		})
	}
	if _, err := FindRelay(""); err == nil || !strings.HasSuffix(err.Error(), "; build it with make build or give --relay-binary") {
		t.Errorf("FindRelay(\"\"): %v; want it to say how to get one", err)
	}
	path, data, err := ReadRelay(elf)
	if err != nil || path != elf || string(data) != "\x7fELF\x02\x01\x01rest" {
		t.Errorf("ReadRelay(%q) = %q, %q, %v", elf, path, data, err)
	}
}
