package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// startCanaries starts two processes that hold token where a scanner for
// it must look: one on its command line (a shell's argument), one in its
// environment. They end with the test; stop them sooner with Kill.
func startCanaries(t *testing.T, token string) (argv, env *testutil.Proc) {
	t.Helper()
	// "; :" keeps the shell from exec'ing sleep in its place, which
	// would drop the token from the command line.
	argv = testutil.Start(t, "canary-argv", exec.Command("sh", "-c", "sleep 600; :", "canary", token))
	ec := exec.Command("sleep", "600")
	ec.Env = append(os.Environ(), "RELAYFLEET_CANARY="+token)
	env = testutil.Start(t, "canary-env", ec)
	return argv, env
}

// procDir is p's /proc dir.
func procDir(p *testutil.Proc) string { return fmt.Sprintf("/proc/%d", p.Cmd.Process.Pid) }

// checkCanaries fails the test unless hits hold argv's token on its
// command line and env's in its environment.
func checkCanaries(t *testing.T, hits []procHit, argv, env *testutil.Proc) {
	t.Helper()
	for _, want := range []procHit{{Dir: procDir(argv), File: "cmdline"}, {Dir: procDir(env), File: "environ"}} {
		found := false
		for _, h := range hits {
			found = found || h.Dir == want.Dir && h.File == want.File
		}
		if !found {
			t.Errorf("the scanner missed the canary with the token in %s/%s (hits %v)", want.Dir, want.File, hits)
		}
	}
}

// TestScanProcsSeesCanaries: the scanner TestE2ESecretNeverOnACommandLine
// relies on finds the token on a command line and in an environment,
// reports read errors, and passes over processes that vanished.
func TestScanProcsSeesCanaries(t *testing.T) {
	const token = "procscan-canary-0123456789SECRET"
	argv, env := startCanaries(t, token)
	hits, errs := scanProcs([]string{procDir(argv), procDir(env)}, []byte(token))
	if len(errs) > 0 {
		t.Errorf("read errors: %v", errs)
	}
	checkCanaries(t, hits, argv, env)
	for _, h := range hits {
		if strings.Contains(h.Line, token) {
			t.Errorf("the report shows the token: %s", h.Line)
		}
	}

	// A process gone before the read is no error; a file that cannot be
	// read is.
	gone := testutil.Start(t, "gone", exec.Command("true"))
	if err := gone.Wait(); err != nil {
		t.Fatal(err)
	}
	unreadable := t.TempDir()
	for _, f := range []string{"cmdline", "environ"} {
		if err := os.Mkdir(filepath.Join(unreadable, f), 0o755); err != nil { // read(2) on a directory: EISDIR
			t.Fatal(err)
		}
	}
	hits, errs = scanProcs([]string{procDir(gone), unreadable}, []byte(token))
	if len(hits) != 0 {
		t.Errorf("hits %v, want none", hits)
	}
	if len(errs) != 2 || !errors.Is(errs[0], syscall.EISDIR) {
		t.Errorf("read errors %v, want the two of %s (EISDIR) alone", errs, unreadable)
	}

	// A scan of every process, as the end-to-end test makes, reads all
	// it must and sees both canaries.
	hits, errs = scanProcs(procDirs(), []byte(token))
	if len(errs) > 0 {
		t.Errorf("read errors scanning /proc: %v", errs)
	}
	checkCanaries(t, hits, argv, env)

	// The canaries are the test's own, init is not.
	if !ours(procDir(argv)) || !ours(fmt.Sprintf("/proc/%d", os.Getpid())) || ours("/proc/1") {
		t.Errorf("ours: canary %v, self %v, init %v; want true, true, false", ours(procDir(argv)), ours(fmt.Sprintf("/proc/%d", os.Getpid())), ours("/proc/1"))
	}
}
