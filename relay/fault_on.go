//go:build relayfault

package relay

import "sync/atomic"

// faultMode is the fault of this bad build, set at link time:
// -ldflags "-X github.com/relayfleet/relayfleet/relay.faultMode=MODE".
var faultMode string

// faultOverride, when set, replaces faultMode: the fault tests switch
// modes in one test binary (fault_test.go).
var faultOverride atomic.Pointer[string]

// fault is the build's fault mode.
func fault() string {
	if m := faultOverride.Load(); m != nil {
		return *m
	}
	return faultMode
}
