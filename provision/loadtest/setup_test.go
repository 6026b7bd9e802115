package loadtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTokenFiles(t *testing.T) {
	pub, sub, remove, err := TokenFiles("PUB", "SUB")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(pub)
	if filepath.Dir(sub) != dir {
		t.Errorf("%s and %s: want one directory", pub, sub)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("directory %s: %v %v, want mode 0700", dir, st, err)
	}
	for f, want := range map[string]string{pub: "PUB\n", sub: "SUB\n"} {
		data, err := os.ReadFile(f)
		st, serr := os.Stat(f)
		if err != nil || serr != nil || string(data) != want || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %q %v %v, want %q mode 0600", f, data, err, serr, want)
		}
	}
	remove()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("after remove: %v", err)
	}
}

func TestGeneratorNote(t *testing.T) {
	if got := GeneratorNote("h", 8, false); got != "the load generator runs on this machine (h, 8 cores) and its CPU limits the steps" {
		t.Errorf("got %q", got)
	}
	if got := GeneratorNote("h", 2, true); !strings.Contains(got, "(h, 2 cores) and shares its CPU with the lab boxes") {
		t.Errorf("got %q", got)
	}
}
