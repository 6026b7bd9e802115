package provision

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/sysctl"
)

// sshRunner is a Runner over SSH to a test sshd on this machine.
func sshRunner(t *testing.T) Runner {
	t.Helper()
	f := newFixture(t, sshdOpts{})
	return f.pool.Runner(f.host)
}

func TestWriteFile(t *testing.T) {
	t.Parallel()
	run := sshRunner(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "etc", "it's here.conf") // a quote and a space survive
	wrote, err := WriteFile(ctx, run, path, []byte("a = 1\n"), 0o640)
	if err != nil || !wrote {
		t.Fatalf("WriteFile = %v, %v", wrote, err)
	}
	if wrote, err := WriteFile(ctx, run, path, []byte("a = 1\n"), 0o640); err != nil || wrote {
		t.Errorf("rewrite of the same content: wrote=%v err=%v", wrote, err)
	}
	if wrote, _ := WriteFile(ctx, run, path, []byte("a = 2\n"), 0o640); !wrote {
		t.Error("changed content not written")
	}
	data, _ := os.ReadFile(path)
	st, _ := os.Stat(path)
	if string(data) != "a = 2\n" || st.Mode().Perm() != 0o640 {
		t.Errorf("file = %q mode %v", data, st.Mode().Perm())
	}
	left, _ := filepath.Glob(path + ".relayfleet.*")
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if _, err := WriteFile(ctx, run, "relative", nil, 0o644); err == nil {
		t.Error("a relative path was accepted")
	}
}

func TestApplySysctlReadsBack(t *testing.T) {
	t.Parallel()
	run := sshRunner(t)
	// The sshd is this machine: the profile holds only a key at its current
	// value and one the kernel lacks, so applying it changes nothing here.
	// Lab boxes exercise keys that change.
	cur, err := os.ReadFile("/proc/sys/net/core/somaxconn")
	if err != nil {
		testutil.Skipf(t, "no /proc/sys/net/core/somaxconn")
	}
	p := sysctl.Profile{Name: "test", File: filepath.Join(t.TempDir(), "60-test.conf"), Settings: []sysctl.Setting{
		{Key: "net.core.somaxconn", Value: strings.TrimSpace(string(cur)), Reason: "already set"},
		{Key: "net.core.relayfleet_no_such_key", Value: "1", Reason: "the kernel lacks it"},
	}}
	rs, err := ApplySysctl(context.Background(), run, p)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]sysctl.Status{}
	for _, r := range rs {
		got[r.Key] = r.Status
	}
	if got["net.core.somaxconn"] != sysctl.Already || got["net.core.relayfleet_no_such_key"] != sysctl.NotApplied {
		t.Errorf("results = %+v", rs)
	}
	data, _ := os.ReadFile(p.File)
	want, _ := p.Render()
	if string(data) != string(want) {
		t.Errorf("file on the box = %q", data)
	}
}
