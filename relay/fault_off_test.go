//go:build !relayfault

package relay_test

import (
	"testing"

	"github.com/relayfleet/relayfleet/relay"
)

// TestReleaseBuildHasNoFault: without the relayfault tag the fault mode
// is the constant "" (fault_off.go), whatever -X says; cmd/relay's
// TestFaultBuilds links a release build with -X to show it.
func TestReleaseBuildHasNoFault(t *testing.T) {
	if m := relay.FaultMode(); m != "" {
		t.Fatalf("a release build has fault mode %q", m)
	}
}
