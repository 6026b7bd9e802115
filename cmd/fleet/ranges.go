package main

import (
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/relay"
)

// flagRanges are the values the commands' numeric flags accept, keyed by
// the flag set's name (newFlags) and the flag's. flags.parse checks every
// numeric flag given against its range, so a command never spins on a
// count it cannot serve or waits for ever; TestEveryNumericFlagHasARange
// holds every numeric flag of every command to having one.
var flagRanges = map[string]map[string]cli.Range{
	"plan": {
		"listeners":   cli.Ints(0, inventories.MaxListeners),
		"event-hours": cli.Floats(0, inventories.MaxEventHours),
	},
	"converge": {"parallel": parallelRange},
	"rollout": {
		"boxes":          cli.Ints(1, 1000),
		"listener-wait":  cli.Durations(time.Second, time.Hour),
		"router-poll":    cli.Durations(100*time.Millisecond, time.Minute),
		"shed-rate":      cli.Ints(1, relay.MaxShedRate),
		"shed-wait":      cli.Durations(time.Second, time.Hour),
		"rebalance-rate": cli.Ints(1, relay.MaxShedRate),
		"rebalance-wait": cli.Durations(time.Second, time.Hour),
	},
	"token": {"ttl": cli.Durations(time.Second, maxTokenTTL)},
	"auth rotate": {
		"overlap":  cli.Durations(0, maxTokenTTL),
		"parallel": parallelRange,
	},
	"lab cloud hcloud|digitalocean --listen ADDR": {"ram-scale": cli.Floats(0.01, 1)},
	"loadtest": {
		"step-duration": cli.Durations(2*time.Second, time.Hour),
		"ramp":          cli.Floats(0.1, 100_000),
	},
	"monitor": {
		"scrape-interval":     cli.Durations(time.Second, time.Hour),
		"evaluation-interval": cli.Durations(time.Second, time.Hour),
	},
}

// maxStepListeners bounds fleet loadtest --steps: listeners one machine
// opens against one box.
const maxStepListeners = 1_000_000

var (
	parallelRange = cli.Ints(1, 1024)              // hosts at once
	drainRange    = cli.Durations(0, 24*time.Hour) // how long listeners get to leave
)

// leaseRange is the events reconciler's lease in the Pulumi backend.
var leaseRange = cli.Durations(30*time.Second, time.Hour)
