package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stopGrace is how long a Proc's stop waits after SIGTERM before it sends
// SIGKILL.
var stopGrace = 10 * time.Second

// Proc is a child process a test runs in the background (a relay, a
// router, a load generator, a publisher, a fleet command): Start starts it
// and stops it when the test ends. Read Cmd (its Process, to signal it),
// but never call Cmd.Wait: Wait and Done do.
type Proc struct {
	// Cmd is the command, started.
	Cmd *exec.Cmd
	// LogPath is the file the output goes to that the caller did not
	// send elsewhere (Stdout, Stderr or both).
	LogPath string

	name string
	done chan struct{}
	err  error
	log  *os.File
}

// Start starts cmd in the background for the test under name, its output
// (whichever of Stdout and Stderr the caller left nil) in name.log in a
// t.TempDir(). See StartLog.
func Start(t testing.TB, name string, cmd *exec.Cmd) *Proc {
	t.Helper()
	return StartLog(t, filepath.Join(t.TempDir(), name+".log"), cmd)
}

// StartLog starts cmd in the background for the test, its output
// (whichever of Stdout and Stderr the caller left nil) in the file
// logPath, and stops it when the test ends: SIGTERM to its process group,
// SIGKILL 10 s later; when the test failed it logs the log's tail.
// A cmd made with exec.CommandContext is stopped the same way when its
// context ends.
//
// The child is the leader of a process group of its own (Setpgid: a
// stop reaches what it starts in that group, and a terminal's Ctrl-C
// reaches only the test binary), and the kernel kills it with SIGKILL
// when the test binary dies however it dies (Pdeathsig): killed by go
// test's -timeout, by Ctrl-C, by SIGKILL. Only the child: what it starts
// itself goes with it only if it sees to that.
//
// Pdeathsig fires when the thread that forked the child ends, not the
// process (https://go.dev/issue/27505), and the Go runtime ends a thread
// when a goroutine locked to it returns (as code that changes a thread's
// namespaces does). So the child is forked from a goroutine locked to
// its thread that stays there, waiting for the child, until it has
// exited: the thread lives as long as the child.
func StartLog(t testing.TB, logPath string, cmd *exec.Cmd) *Proc {
	t.Helper()
	p, err := TryStartLog(t, logPath, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TryStartLog is StartLog that returns the error of a child that did not
// start rather than fail the test: for a goroutine of the test's, which
// must not call t.Fatal.
func TryStartLog(t testing.TB, logPath string, cmd *exec.Cmd) (*Proc, error) {
	t.Helper()
	return start(t, logPath, cmd, nil)
}

// StartLines is Start for a test that reads the child's output as it
// comes: stdout, and stderr unless the caller sent it elsewhere, line by
// line, from the channel, which is closed once the child has exited and
// its output is read. The lines are in the log too. A test may stop
// reading at any point: once it ends, the rest is read for the log alone.
func StartLines(t testing.TB, name string, cmd *exec.Cmd) (*Proc, <-chan string) {
	t.Helper()
	lines := make(chan string)
	p, err := start(t, filepath.Join(t.TempDir(), name+".log"), cmd, lines)
	if err != nil {
		t.Fatal(err)
	}
	return p, lines
}

// start starts cmd as StartLog says; with lines, its output goes there
// too, line by line, as StartLines says.
func start(t testing.TB, logPath string, cmd *exec.Cmd, lines chan string) (*Proc, error) {
	t.Helper()
	p := &Proc{Cmd: cmd, LogPath: logPath, name: strings.TrimSuffix(filepath.Base(logPath), ".log"), done: make(chan struct{})}
	var pw *io.PipeWriter
	quit := make(chan struct{}) // the test has ended: lines has no reader
	if cmd.Stdout == nil || cmd.Stderr == nil || lines != nil {
		lf, err := os.Create(logPath)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		p.log = lf
		if lines != nil {
			var pr *io.PipeReader
			pr, pw = io.Pipe()
			w := io.MultiWriter(lf, pw)
			cmd.Stdout = w
			if cmd.Stderr == nil {
				cmd.Stderr = w
			}
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(pr)
				sc.Buffer(nil, 1<<20)
				for sc.Scan() {
					select {
					case lines <- sc.Text():
					case <-quit:
						io.Copy(io.Discard, pr)
						return
					}
				}
				io.Copy(io.Discard, pr) // a line over 1 MiB: the log has it
			}()
		}
		if cmd.Stdout == nil {
			cmd.Stdout = lf
		}
		if cmd.Stderr == nil {
			cmd.Stderr = lf
		}
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if cmd.Cancel != nil { // made by exec.CommandContext
		cmd.Cancel = func() error { return p.signalGroup(syscall.SIGTERM) }
		if cmd.WaitDelay == 0 {
			cmd.WaitDelay = stopGrace
		}
	}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread() // the child has exited: the thread may go
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		if pw != nil {
			pw.Close()
		}
		if p.log != nil {
			p.log.Close()
		}
		close(p.done)
	}()
	if err := <-started; err != nil {
		if pw != nil {
			pw.Close()
		}
		if p.log != nil {
			p.log.Close()
		}
		return nil, fmt.Errorf("%s: %w", p.name, err)
	}
	t.Cleanup(func() {
		close(quit)
		p.Stop()
		if t.Failed() {
			t.Logf("%s (pid %d) %s, log %s (tail):\n%s", p.name, cmd.Process.Pid, p.exit(), logPath, p.Tail(20))
		}
	})
	return p, nil
}

// Done is closed once the child has exited and its output is written.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the child to exit and returns what exec.Cmd.Wait
// returned.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// Exited reports whether the child has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop stops the child unless it has exited: SIGTERM to its process
// group, SIGKILL to the group 10 s later; it returns once the child
// has exited, with what Wait returns.
func (p *Proc) Stop() error {
	if !p.Exited() {
		p.signalGroup(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopGrace):
			p.signalGroup(syscall.SIGKILL)
		}
	}
	return p.Wait()
}

// Kill sends SIGKILL to the child's process group and waits for the
// child to exit.
func (p *Proc) Kill() error {
	if !p.Exited() {
		p.signalGroup(syscall.SIGKILL)
	}
	return p.Wait()
}

// signalGroup sends sig to the child's process group.
func (p *Proc) signalGroup(sig syscall.Signal) error {
	err := syscall.Kill(-p.Cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// exit says how the child ended, once it has.
func (p *Proc) exit() string {
	if !p.Exited() {
		return "still running"
	}
	if p.err == nil {
		return "exited 0"
	}
	return p.err.Error()
}

// Log is the child's log file so far.
func (p *Proc) Log() string {
	if p.log == nil {
		return "(the caller took both stdout and stderr)"
	}
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return string(data)
}

// Tail is the last n lines of the child's log file so far.
func (p *Proc) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Log(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
