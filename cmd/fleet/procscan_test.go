package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// procHit is a process whose command line or environment holds the
// needle.
type procHit struct {
	Dir  string // /proc/PID
	File string // "cmdline" or "environ"
	Line string // for the report: the comm, and the file with the needle masked
}

// procDirs lists /proc/PID for every process now.
func procDirs() []string {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	return dirs
}

// vanished says whether err is what reading a process's file gives once
// the process is gone: ENOENT, or ESRCH.
func vanished(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// parentOf is the parent pid of the process of /proc/PID dir d, 0 when
// it cannot be read.
func parentOf(d string) int {
	stat, err := os.ReadFile(filepath.Join(d, "stat"))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	var state string
	var ppid int
	if _, err := fmt.Sscan(string(stat[i+1:]), &state, &ppid); err != nil {
		return 0
	}
	return ppid
}

// ours says whether the process of dir d is this test process or one it
// started, directly or not: the processes a fleet command it runs can
// start.
func ours(d string) bool {
	self := os.Getpid()
	pid, err := strconv.Atoi(filepath.Base(d))
	for range 64 {
		if err != nil || pid <= 1 {
			return false
		}
		if pid == self {
			return true
		}
		pid = parentOf(fmt.Sprintf("/proc/%d", pid))
	}
	return false
}

// scanProcs reads the command line and the environment of each process
// dir (/proc/PID) once and returns where it found needle. A read error
// other than a vanished process's (vanished) is returned too, one per
// file: a scanner that cannot read a process cannot say the needle is
// not there. Only a process the test did not start may refuse the read
// (EACCES: a sandbox's own processes, another user's), since no fleet
// command can have put the token there.
func scanProcs(dirs []string, needle []byte) (hits []procHit, errs []error) {
	for _, d := range dirs {
		comm, _ := os.ReadFile(filepath.Join(d, "comm"))
		for _, f := range []string{"cmdline", "environ"} {
			data, err := os.ReadFile(filepath.Join(d, f))
			if err != nil {
				if !vanished(err) && !(errors.Is(err, fs.ErrPermission) && !ours(d)) {
					errs = append(errs, err)
				}
				continue
			}
			if !bytes.Contains(data, needle) {
				continue
			}
			shown := strings.ReplaceAll(string(data), "\x00", " ")
			shown = strings.ReplaceAll(shown, string(needle), "[TOKEN]")
			if len(shown) > 300 {
				shown = shown[:300] + "..."
			}
			hits = append(hits, procHit{Dir: d, File: f, Line: fmt.Sprintf("%s (%s) %s: %s", d, strings.TrimSpace(string(comm)), f, shown)})
		}
	}
	return hits, errs
}

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
