//go:build stockquic

package relay

import "github.com/quic-go/quic-go"

// PatchedQUIC reports whether the relay is built against relayfleet's
// patched quic-go: false with the stockquic tag (go.stock.mod, make
// build-stockquic), where the patch's features are off.
const PatchedQUIC = false

// patchedQUIC does nothing against the quic-go release: the ACK delay and
// threshold, the synchronous send path, the ACK frequency extension,
// batched stream credit and the probe timeout's allowances are quic-go's
// own (flags that set them still parse, and change nothing).
func (cfg *Config) patchedQUIC(*quic.Config) {}
