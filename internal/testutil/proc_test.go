package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// procHelperEnv makes TestProcHelperParent the parent process of the
// tests below (a re-exec of this test binary) instead of a skip.
const procHelperEnv = "TESTUTIL_PROC_HELPER"

// TestProcHelperParent is not a test of its own: run by
// startHelperParent, it starts `sleep 60` with Start, prints "child PID"
// and "ready", and waits to be killed. With TESTUTIL_PROC_HELPER=churn it
// starts four, each from a goroutine locked to its thread that returns,
// which ends the thread (as code that changes a thread's namespaces
// does), and prints "alive" if all still run half a second later (the
// kernel kills a child at once whose forking thread ends).
func TestProcHelperParent(t *testing.T) {
	mode := HelperProcess(t, procHelperEnv, "TestStartChildDiesWithTheTestBinary")
	var ps []*Proc
	if mode != "churn" {
		ps = append(ps, Start(t, "sleep", exec.Command("sleep", "60")))
	} else {
		// Four at once: one of the threads may be the main thread,
		// which the runtime never ends.
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				runtime.LockOSThread()
				p := Start(t, fmt.Sprint("sleep", i), exec.Command("sleep", "60"))
				mu.Lock()
				ps = append(ps, p)
				mu.Unlock()
			})
		}
		wg.Wait()
		time.Sleep(500 * time.Millisecond) // a child Start failed to protect dies at once
		alive := true
		for _, p := range ps {
			if p.Exited() {
				alive = false
				fmt.Printf("died %v\n", p.Wait())
			}
		}
		if alive {
			fmt.Println("alive")
		}
	}
	for _, p := range ps {
		fmt.Printf("child %d\n", p.Cmd.Process.Pid)
	}
	fmt.Println("ready")
	time.Sleep(time.Minute)
}

// startHelperParent runs TestProcHelperParent in mode and returns its
// process, the other lines it printed, and its children's pids.
func startHelperParent(t *testing.T, mode string) (*exec.Cmd, []string, []int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestProcHelperParent$", "-test.v")
	cmd.Env = append(os.Environ(), procHelperEnv+"="+mode)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var lines []string
	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if sc.Text() == "ready" {
			return cmd, lines, pids
		}
		if pid, ok := strings.CutPrefix(sc.Text(), "child "); ok {
			n, err := strconv.Atoi(pid)
			if err != nil {
				t.Fatalf("helper: %q", sc.Text())
			}
			pids = append(pids, n)
			continue
		}
		lines = append(lines, sc.Text())
	}
	t.Fatalf("the helper parent ended before it was ready: %v\n%s", sc.Err(), strings.Join(lines, "\n"))
	return nil, nil, nil
}

// running reports whether pid is a live (not zombie) process running
// comm.
func running(pid int, comm string) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || !strings.Contains(s[:i], "("+comm) || len(s) < i+3 {
		return false
	}
	return s[i+2] != 'Z' && s[i+2] != 'X'
}

// TestStartChildDiesWithTheTestBinary: a child started with Start is
// killed by the kernel when the test binary is killed with SIGKILL, no
// cleanup run; and thread churn in the test binary does not kill it
// before.
func TestStartChildDiesWithTheTestBinary(t *testing.T) {
	for _, mode := range []string{"plain", "churn"} {
		t.Run(mode, func(t *testing.T) {
			parent, lines, children := startHelperParent(t, mode)
			if mode == "churn" && !slices.Contains(lines, "alive") {
				t.Fatalf("a child died when the thread of Start's caller ended: %q", lines)
			}
			for _, c := range children {
				if !running(c, "sleep") {
					t.Fatalf("the child %d does not run", c)
				}
			}
			if err := parent.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			parent.Wait()
			for _, c := range children {
				if !Poll(10*time.Second, func() bool { return !running(c, "sleep") }) {
					syscall.Kill(c, syscall.SIGKILL)
					t.Errorf("the child %d outlived its killed parent", c)
				}
			}
		})
	}
}

// TestStartStops: the cleanup stops a child with SIGTERM; one that
// ignores SIGTERM it kills; output the caller left goes to the log.
func TestStartStops(t *testing.T) {
	defer func(g time.Duration) { stopGrace = g }(stopGrace)
	stopGrace = time.Second
	var p, stubborn *Proc
	t.Run("run", func(t *testing.T) {
		p = Start(t, "echo", exec.Command("sh", "-c", "echo hello; echo oops >&2; exec sleep 60"))
		WaitFor(t, 5*time.Second, "the output in the log", func() bool { return strings.Contains(p.Tail(5), "oops") })
		if got := p.Tail(5); got != "hello\noops" {
			t.Errorf("log %q, want hello and oops", got)
		}
		if filepath.Dir(p.LogPath) == "." {
			t.Errorf("log path %q", p.LogPath)
		}
		stubborn = Start(t, "stubborn", exec.Command("sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done"))
		WaitFor(t, 5*time.Second, "the trap", func() bool { return strings.Contains(stubborn.Tail(1), "ready") })
	})
	var ee *exec.ExitError
	if err := p.Wait(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("sleep: %v, want killed by SIGTERM", err)
	}
	if err := stubborn.Wait(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("stubborn: %v, want killed by SIGKILL", err)
	}
}

// TestStartLines: the lines come as the child writes them, stdout and
// stderr, and are in the log; a test that stops reading early does not
// hang its cleanup, though the child goes on writing.
func TestStartLines(t *testing.T) {
	var flood *Proc
	t.Run("run", func(t *testing.T) {
		p, lines := StartLines(t, "lines", exec.Command("sh", "-c", "echo one; echo two >&2; echo three"))
		var got []string
		for l := range lines {
			got = append(got, l)
		}
		if len(got) != 3 || !slices.Contains(got, "two") || got[2] != "three" {
			t.Errorf("lines %q, want one, two, three", got)
		}
		if err := p.Wait(); err != nil {
			t.Errorf("exit: %v", err)
		}
		if log := p.Log(); !strings.Contains(log, "one\n") || !strings.Contains(log, "two\n") || !strings.Contains(log, "three\n") {
			t.Errorf("log %q, want the three lines", log)
		}
		var ls <-chan string
		flood, ls = StartLines(t, "flood", exec.Command("sh", "-c", "while :; do echo flood; done"))
		if l := <-ls; l != "flood" {
			t.Errorf("first line %q", l)
		}
	})
	if !flood.Exited() {
		t.Error("the flood still runs after its test")
	}
}
