package cli

import (
	"context"
	"io"
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

// ContextReader returns a reader of r whose Read returns, with ctx's
// cause, once ctx ends, even while a read of r blocks: stdin or a
// confirmation prompt that a signal interrupts. A read of r that is under
// way then finishes in the background and its bytes are dropped.
func ContextReader(ctx context.Context, r io.Reader) io.Reader {
	return &ctxReader{ctx: ctx, r: r}
}

type ctxReader struct {
	ctx     context.Context
	r       io.Reader
	pending chan readResult // the read under way, if any
}

type readResult struct {
	b   []byte
	err error
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	if c.pending == nil {
		ch := make(chan readResult, 1)
		buf := make([]byte, len(p))
		go func() {
			n, err := c.r.Read(buf)
			ch <- readResult{buf[:n], err}
		}()
		c.pending = ch
	}
	select {
	case res := <-c.pending:
		c.pending = nil
		return copy(p, res.b), res.err
	case <-c.ctx.Done():
		return 0, context.Cause(c.ctx)
	}
}
