package main

import (
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/units"
)

// flagRanges are the values the commands' numeric flags accept, keyed by
// the flag set's name (newFlags) and the flag's. flags.parse checks every
// numeric flag given against its range, so a command never spins on a
// count it cannot serve or waits for ever; TestEveryNumericFlagHasARange
// holds every numeric flag of every command to having one.
var flagRanges = map[string]map[string]cli.Range{
	"events install":   {"interval": cli.Durations(units.MinReconcileInterval, 24*time.Hour)},
	"events reconcile": {"lease-ttl": leaseRange},
	"burst up":         {"drain-time": drainRange, "lease-ttl": leaseRange},
	"burst down":       {"drain-time": drainRange, "lease-ttl": leaseRange},
	"burst resize":     {"drain-time": drainRange, "lease-ttl": leaseRange},
}

var (
	parallelRange = cli.Ints(1, 1024)              // hosts at once
	drainRange    = cli.Durations(0, 24*time.Hour) // how long listeners get to leave
)

// leaseRange is the events reconciler's lease in the Pulumi backend.
var leaseRange = cli.Durations(30*time.Second, time.Hour)
