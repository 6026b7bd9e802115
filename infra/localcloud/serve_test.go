package localcloud

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "token")
	tok, created, err := TokenFile(path)
	if err != nil || !created || len(tok) != 64 {
		t.Fatalf("new: %q %v %v", tok, created, err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode: %v %v", st, err)
	}
	again, created, err := TokenFile(path)
	if err != nil || created || again != tok {
		t.Errorf("read back: %q %v %v", again, created, err)
	}
	for _, tc := range []struct {
		content string
		mode    os.FileMode
		want    string
	}{
		{"abc\n", 0o640, "mode 0640 lets others read it"},
		{"\n", 0o600, "want one token on one line"},
		{"a b\n", 0o600, "want one token on one line"},
	} {
		p := filepath.Join(t.TempDir(), "t")
		os.WriteFile(p, []byte(tc.content), tc.mode)
		os.Chmod(p, tc.mode)
		if _, _, err := TokenFile(p); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%q %o: %v, want %q and the path", tc.content, tc.mode, err, tc.want)
		}
	}
}

func TestCheckListen(t *testing.T) {
	bridge := netip.MustParseAddr("10.231.77.1")
	for addr, ok := range map[string]bool{
		"127.0.0.1:8780": true, "[::1]:8780": true, "localhost:1": true, "10.231.77.1:8780": true,
		"0.0.0.0:8780": false, "[::]:1": false, "10.231.77.2:1": false, "8780": false, "example.com:1": false, "127.0.0.1:": false,
	} {
		if err := CheckListen(addr, bridge); (err == nil) != ok {
			t.Errorf("%s: %v, want ok %v", addr, err, ok)
		}
	}
}
