package relay_test

import (
	"runtime"
	"testing"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
)

// TestUDPBufferIsWhatWasAsked: a buffer smaller than quic-go's own 7 MiB
// wish is honoured, not raised behind the operator's back (the benchmark's
// "kernel default" run depends on it).
func TestUDPBufferIsWhatWasAsked(t *testing.T) {
	if runtime.GOOS != "linux" {
		testutil.Skipf(t, "reads back SO_RCVBUF, Linux only")
	}
	r := startRelay(t, relay.Config{UDPBuffer: 212992})
	if st := r.Stats(); st.UDPReceiveBuffer != 2*212992 || st.UDPSendBuffer != 2*212992 {
		t.Fatalf("granted receive %d, send %d; want %d (Linux reports double)", st.UDPReceiveBuffer, st.UDPSendBuffer, 2*212992)
	}
}
