package systest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// SignalBound is how long a command may take to end after SIGINT or
// SIGTERM: generous, for a loaded machine; a command that ignores the
// signal runs on for minutes.
const SignalBound = 10 * time.Second

// MarkedProcesses lists the live processes whose environment holds
// marker: the command and everything it started, wherever they were
// reparented to. Zombies are dead and not listed.
func MarkedProcesses(marker string) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, []byte(marker)) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		found = append(found, e.Name()+" "+strings.ReplaceAll(strings.TrimSpace(string(cmdline)), "\x00", " "))
	}
	return found
}

// Interrupt starts the fleet binary with args (stdin: a pipe that stays
// open), waits until busy says it is at work, sends sig and checks that
// it ends within SignalBound, with exit status 128+sig and one line on
// stderr saying which signal stopped it (path is the command's, as its
// errors name it: "fleet lab up"), and that it leaves no process and no
// temporary file behind. It returns stdout.
func Interrupt(t *testing.T, bin, path string, args, env []string, busy func(pid int) bool, sig syscall.Signal) string {
	t.Helper()
	tmp := t.TempDir()
	marker := fmt.Sprintf("RELAYFLEET_SIGNAL_TEST=%d-%d", os.Getpid(), time.Now().UnixNano())
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), "TMPDIR="+tmp, marker, "PULUMI_SKIP_UPDATE_CHECK=true"), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	stdin, feed, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	cmd.Stdin = stdin
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	gone := func() bool {
		select {
		case <-exited:
			return true
		default:
			return false
		}
	}
	testutil.WaitFor(t, 3*time.Minute, path+" to get busy", func() bool { return busy(cmd.Process.Pid) || gone() })
	if gone() {
		t.Fatalf("fleet %s ended (%v) before it was busy: the test's set-up is wrong\n%s%s", strings.Join(args, " "), cmd.ProcessState, stdout.String(), stderr.String())
	}
	sent := time.Now()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(SignalBound):
		t.Fatalf("%s still runs %v after %s\nstdout:\n%s\nstderr:\n%s", path, SignalBound, SigName(sig), stdout.String(), stderr.String())
	}
	took := time.Since(sent)
	code := cmd.ProcessState.ExitCode()
	errOut := stderr.String()
	// The error is one line, the last (progress lines may come before),
	// naming the command's path.
	want := fmt.Sprintf("%s: interrupted by %s", path, SigName(sig))
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	t.Logf("%s: %s, exit %d %.1fs later: %s", path, SigName(sig), code, took.Seconds(), lines[len(lines)-1])
	if code != 128+int(sig) || !strings.HasSuffix(errOut, "\n") || !strings.HasPrefix(lines[len(lines)-1], want) || strings.Count(errOut, path+": ") != 1 {
		t.Errorf("exit %d, stderr %q; want exit %d and its last line, the only error line, starting %q", code, errOut, 128+int(sig), want)
	}
	if !testutil.Poll(5*time.Second, func() bool { return len(MarkedProcesses(marker)) == 0 }) {
		t.Errorf("processes left behind:\n%s", strings.Join(MarkedProcesses(marker), "\n"))
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		var names []string
		for _, e := range left {
			names = append(names, e.Name())
		}
		t.Errorf("temporary files left behind in TMPDIR: %s", strings.Join(names, ", "))
	}
	return stdout.String()
}

// SigName is the signal as the commands name it.
func SigName(s syscall.Signal) string {
	if s == syscall.SIGINT {
		return "SIGINT"
	}
	return "SIGTERM"
}
