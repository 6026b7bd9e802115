package main

import (
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/relay"
)

// flagRanges are the values the commands' numeric flags accept, keyed by
// command and flag. parse checks every numeric flag given against its
// range; TestEveryNumericFlagHasARange holds every numeric flag to having
// one. Sizes given as text (--udp-buffer, --memory-budget) are bounded
// where they are parsed.
var flagRanges = map[string]map[string]cli.Range{
	"serve": {
		"send-batch":             cli.Ints(1, 1024),
		"ack-delay":              cli.Durations(time.Millisecond, relay.MaxAckDelay),
		"ack-threshold":          cli.Ints(1, relay.MaxAckThreshold),
		"pto-ack-delay":          cli.Durations(0, relay.MaxAckDelay),
		"listener-ack-delay":     cli.Durations(0, relay.MaxAckDelay),
		"listener-ack-threshold": cli.Ints(1, relay.MaxAckThreshold),
		"max-listeners":          cli.Ints(0, 10_000_000),
		"reap-after":             cli.Durations(time.Second, 24*time.Hour),
		"shed-rate":              cli.Floats(0.01, relay.MaxShedRate),
		"shutdown-grace":         cli.Durations(0, 10*time.Minute),
		"notice-grace":           cli.Durations(0, relay.MaxNoticeGrace),
	},
	"router": {"poll": cli.Durations(10*time.Millisecond, time.Minute)},
	"token":  {"ttl": cli.Durations(time.Second, 365*24*time.Hour)},
	"publish": {
		"interval": cli.Durations(time.Millisecond, time.Minute),
		"frames":   cli.Ints(1, 1000),
		"size":     cli.Ints(16, 1<<20),
		"groups":   cli.Ints(0, 1_000_000_000),
	},
	"listen": {
		"groups":  cli.Ints(0, 1_000_000_000),
		"check":   cli.Ints(0, 1<<20),
		"silence": cli.Durations(0, time.Hour),
	},
	"loadgen": {
		"listeners":    cli.Ints(1, 1_000_000),
		"ramp":         cli.Floats(0, 1_000_000),
		"duration":     cli.Durations(time.Millisecond, 24*time.Hour),
		"freeze":       cli.Floats(0, 1),
		"freeze-at":    cli.Durations(0, 24*time.Hour),
		"freeze-for":   cli.Durations(0, 24*time.Hour),
		"silence":      cli.Durations(time.Millisecond, time.Hour),
		"late":         cli.Durations(time.Millisecond, time.Hour),
		"shards":       cli.Ints(0, 4096),
		"idle-timeout": cli.Durations(time.Millisecond, time.Hour),
	},
}
