package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Interrupted is the cause of a context that SignalContext ended: the
// signal that asked the command to stop.
type Interrupted struct{ Signal syscall.Signal }

func (e *Interrupted) Error() string { return "interrupted by " + SignalName(e.Signal) }

// ExitCode is the status a command that stopped for the signal exits
// with, as a shell reports a process the signal ended: 128 + its number
// (130 for SIGINT, 143 for SIGTERM).
func (e *Interrupted) ExitCode() int { return 128 + int(e.Signal) }

// SignalName is a signal's name as kill -l spells it, with SIG.
func SignalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return s.String()
}

// SignalContext returns a context that SIGINT or SIGTERM ends, with an
// *Interrupted as its cause (context.Cause), so that the command stops
// what it does, cleans up (temporary files, child processes, locks) and
// says why it stopped. A second signal is not caught: it ends the
// process at once, for a clean-up that hangs. stop releases the signals.
func SignalContext(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			// The next signal gets the default action: the process ends.
			signal.Stop(ch)
			cancel(&Interrupted{Signal: s.(syscall.Signal)})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		select {
		case <-done:
		default:
			close(done)
		}
		cancel(nil)
	}
}
