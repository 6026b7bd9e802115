package relay

import "fmt"

// Bad relay builds, for the tests of what judges a rollout (a health gate
// must catch a relay that runs but does not serve). A build with the tag
// relayfault reads its fault from the linker:
//
//	go build -tags relayfault -ldflags "-X github.com/relayfleet/relayfleet/relay.faultMode=MODE" ./cmd/relay
//
// (make build-faults builds one binary per mode into bin/faults/). A
// release build, without the tag, has faultMode as a constant "" (fault_off.go):
// -X sets only string variables, so no -X can switch it to a fault.
//
// The modes:
const (
	// FaultExit: Run (relay serve) exits with an error, status 1, right
	// after the relay started listening, before it tells systemd READY.
	FaultExit = "exit"
	// FaultNoForward: the relay runs, answers /healthz and /stats, admits
	// sessions and subscriptions, mirrors its upstream's announcements,
	// but never pulls a track from an upstream: listeners through it get
	// nothing, and the heartbeat through it is silent.
	FaultNoForward = "noforward"
	// FaultDrop5: the relay forwards but drops 5% of the groups it hands
	// its subscribers: those whose sequence is a multiple of 20.
	FaultDrop5 = "drop5"
)

// FaultMode is the fault this build was made with: "" in a release build
// (fault.go).
func FaultMode() string { return fault() }

// checkFault refuses a fault mode this build does not know (a typo in -X).
func checkFault() error {
	switch m := fault(); m {
	case "", FaultExit, FaultNoForward, FaultDrop5:
		return nil
	default:
		return fmt.Errorf("fault build: unknown fault mode %q (want %s, %s or %s)", m, FaultExit, FaultNoForward, FaultDrop5)
	}
}

// faultDrops reports whether the fault drops the group with sequence seq.
func faultDrops(seq uint64) bool { return fault() == FaultDrop5 && seq%20 == 0 }
