// Package scripts_test tests the shell scripts make runs: deps.sh, which
// installs what make test and make demo need, and quic-go-apply.sh, which
// rebuilds and checks the quic-go copy from the release and the patch series.
package scripts_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// fakeBin is a PATH directory with the tools deps.sh may run: id, and
// recorders for apt-get and sudo that log their arguments to calls.
// present are tools deps.sh looks for and finds.
func fakeBin(t *testing.T, aptGet bool, present ...string) (dir, calls string) {
	t.Helper()
	dir = t.TempDir()
	calls = filepath.Join(t.TempDir(), "calls")
	id, err := exec.LookPath("id")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(id, filepath.Join(dir, "id")); err != nil {
		t.Fatal(err)
	}
	rec := "#!/bin/sh\necho \"${0##*/} $*\" >> " + calls + "\n"
	tools := append([]string{"sudo"}, present...)
	if aptGet {
		tools = append(tools, "apt-get")
	}
	for _, tool := range tools {
		testutil.WriteFile(t, filepath.Join(dir, tool), []byte(rec), 0o755)
	}
	// The recorder log is written by whoever runs the script.
	testutil.WriteFile(t, calls, nil, 0o666)
	if err := os.Chmod(calls, 0o666); err != nil {
		t.Fatal(err)
	}
	// Another user (setpriv) reaches the tools, the log and the script's
	// working directory: the test's temporary directories are 0700.
	for _, d := range []string{dir, filepath.Dir(dir), filepath.Dir(calls)} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return dir, calls
}

// deps runs deps.sh with PATH path, as uid (-1: as the test runs),
// and returns its stdout, stderr and exit status.
func deps(t *testing.T, path string, uid int, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	script, err := filepath.Abs("deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"/bin/sh", script}, args...)
	if uid >= 0 {
		argv = append([]string{"/usr/bin/setpriv", "--reuid", strconv.Itoa(uid), "--regid", strconv.Itoa(uid), "--clear-groups", "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + path, "HOME=/nonexistent"}
	cmd.Dir = t.TempDir()
	if err := os.Chmod(cmd.Dir, 0o777); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

func readCalls(t *testing.T, calls string) string {
	t.Helper()
	b, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDepsAsAnotherUser: not root, deps.sh installs nothing and calls
// neither apt-get nor sudo: it names what is missing and the command in
// one line on stderr, and fails.
func TestDepsAsAnotherUser(t *testing.T) {
	uid := -1
	if os.Geteuid() == 0 {
		if _, err := os.Stat("/usr/bin/setpriv"); err != nil {
			testutil.Skipf(t, "as root, the test needs setpriv (util-linux) to run deps.sh as nobody")
		}
		uid = 65534
	}
	dir, calls := fakeBin(t, true)
	out, errOut, code := deps(t, dir, uid, "monitor", "node")
	want := "make monitor node needs the Debian packages prometheus nodejs npm: run it as root, or first: sudo apt-get install -y --no-install-recommends prometheus nodejs npm\n"
	if code != 1 || out != "" || errOut != want {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 and stderr %q", code, out, errOut, want)
	}
	if c := readCalls(t, calls); c != "" {
		t.Errorf("deps.sh as another user ran: %s", c)
	}
}

// TestDepsAsRootWithoutSudo: as root it installs the missing packages
// with apt-get itself, on a machine without sudo, and never calls sudo.
func TestDepsAsRootWithoutSudo(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Skipf(t, "needs root (deps.sh installs only as root)")
	}
	dir, calls := fakeBin(t, true, "node")
	// This fake sudo must not be called: remove it, so a call would fail.
	if err := os.Remove(filepath.Join(dir, "sudo")); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := deps(t, dir, -1, "monitor", "node")
	if code != 0 || out != "apt-get install prometheus npm\n" || errOut != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 0 and the install announced", code, out, errOut)
	}
	want := "apt-get update -qq\napt-get install -y -qq --no-install-recommends prometheus npm\n"
	if c := readCalls(t, calls); c != want {
		t.Errorf("calls:\n%s\nwant\n%s", c, want)
	}
}

// TestDepsAsRootWithoutAptGet: root on a machine without apt-get gets
// the same one line, and a failure.
func TestDepsAsRootWithoutAptGet(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Skipf(t, "needs root")
	}
	dir, calls := fakeBin(t, false)
	out, errOut, code := deps(t, dir, -1, "monitor")
	if code != 1 || out != "" || errOut != "make monitor needs the Debian packages prometheus, and this machine has no apt-get: install their equivalents first\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 and one line naming prometheus and no apt-get", code, out, errOut)
	}
	if c := readCalls(t, calls); c != "" {
		t.Errorf("ran: %s", c)
	}
}

// TestDepsNothingMissing: with everything there it runs nothing and
// succeeds, as any user.
func TestDepsNothingMissing(t *testing.T) {
	dir, calls := fakeBin(t, true, "prometheus", "node", "npm")
	out, errOut, code := deps(t, dir, -1, "monitor", "node")
	if code != 0 || out != "" || errOut != "" || readCalls(t, calls) != "" {
		t.Errorf("exit %d, stdout %q, stderr %q, calls %q; want exit 0 and nothing", code, out, errOut, readCalls(t, calls))
	}
}

// TestDepsBadSet: an unknown set is one line and exit 2.
func TestDepsBadSet(t *testing.T) {
	dir, _ := fakeBin(t, true)
	_, errOut, code := deps(t, dir, -1, "tests")
	if code != 2 || errOut != "scripts/deps.sh: unknown set tests (want test, demo, lab, listen, monitor, node or qemu)\n" {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}
