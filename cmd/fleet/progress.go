package main

import (
	"io"

	"github.com/relayfleet/relayfleet/internal/cli"
)

// liveLines is cli.LiveLines under the names converge.go uses.
type liveLines struct{ *cli.LiveLines }

func newLiveLines(w io.Writer, hosts []string) *liveLines {
	return &liveLines{cli.NewLiveLines(w, hosts)}
}

func (l *liveLines) set(host, step string) { l.Set(host, step) }
