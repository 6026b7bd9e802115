package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// TestSignalContext: SIGTERM ends the context with an *Interrupted that
// names it and maps to exit status 143; stop ends it with no signal.
func TestSignalContext(t *testing.T) {
	ctx, stop := SignalContext(context.Background())
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "SIGTERM to end the context", func() bool { return ctx.Err() != nil })
	var in *Interrupted
	if !errors.As(context.Cause(ctx), &in) || in.Signal != syscall.SIGTERM || in.Error() != "interrupted by SIGTERM" || in.ExitCode() != 143 {
		t.Errorf("cause %v, want interrupted by SIGTERM, exit 143", context.Cause(ctx))
	}

	ctx2, stop2 := SignalContext(context.Background())
	stop2()
	stop2() // twice is harmless
	if ctx2.Err() == nil {
		t.Errorf("after stop: err %v", ctx2.Err())
	}
	if c := context.Cause(ctx2); !errors.Is(c, context.Canceled) {
		t.Errorf("after stop: cause %v, want context.Canceled (no signal)", c)
	}
}

// TestContextReader: bytes pass through; a read that blocks returns the
// context's cause once it ends, and so does every read after.
func TestContextReader(t *testing.T) {
	testutil.NoLeaks(t)
	pr, pw := io.Pipe()
	defer pw.Close() // ends the read the cancel left blocked
	ctx, cancel := context.WithCancelCause(context.Background())
	reading := make(chan struct{}, 2)
	r := ContextReader(ctx, notifyReader{pr, reading})
	go pw.Write([]byte("token\n"))
	buf := make([]byte, 16)
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "token\n" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
	stop := &Interrupted{Signal: syscall.SIGINT}
	got := make(chan error, 1)
	<-reading // the first read
	go func() {
		_, err := r.Read(buf) // nothing more is written: blocks
		got <- err
	}()
	<-reading // the second read blocks in the pipe now
	cancel(stop)
	if err := <-got; err != stop {
		t.Errorf("blocked Read after cancel = %v, want %v", err, stop)
	}
	if _, err := r.Read(buf); err != stop {
		t.Errorf("Read after cancel = %v, want %v", err, stop)
	}
}

// notifyReader sends on called each time a Read starts.
type notifyReader struct {
	io.Reader
	called chan<- struct{}
}

func (n notifyReader) Read(p []byte) (int, error) {
	n.called <- struct{}{}
	return n.Reader.Read(p)
}
