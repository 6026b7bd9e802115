package relay

import (
	"os"
	"sync"
)

// envDisableGSO is quic-go's switch for UDP generic segmentation offload
// (GSO), read when a quic.Transport wraps its socket.
const envDisableGSO = "QUIC_GO_DISABLE_GSO"

// gsoEnv serialises the relays that set envDisableGSO around their start.
var gsoEnv sync.Mutex

// withoutGSO runs start (which creates the relay's quic.Transport) with
// quic-go's GSO switched off, unless the operator set QUIC_GO_DISABLE_GSO
// either way.
//
// With GSO, quic-go packs every send into a 20 KiB buffer from a pool
// (room for a train of full-size packets to one peer), even a 100-byte
// audio packet: at one small packet per listener per frame, every packet
// queued or in flight holds 20 KiB instead of 1,452 bytes, and the pool
// keeps the peak. A relay never sends a listener a train of full-size
// packets (one Opus frame is a few hundred bytes), so GSO saves it no
// system calls: the batched sendmmsg across connections does (udpbatch).
// docs/benchmarks.md, "Memory per listener": 157 MiB of heap at 500
// listeners with GSO, 40 MiB without (allocated, at the end of a run).
func withoutGSO(start func() error) error {
	gsoEnv.Lock()
	defer gsoEnv.Unlock()
	if _, set := os.LookupEnv(envDisableGSO); set {
		return start()
	}
	if err := os.Setenv(envDisableGSO, "true"); err != nil {
		return start()
	}
	defer os.Unsetenv(envDisableGSO)
	return start()
}
