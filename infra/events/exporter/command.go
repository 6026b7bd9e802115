package exporter

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/cli"
)

// RunOptions are fleet events exporter's inputs, as its flags give them.
type RunOptions struct {
	// EventsFile is the events file the reconciler follows (required).
	EventsFile string
	// Listen is the HOST:PORT /metrics is served on (required).
	Listen string
	// ListEvery is how often the backends are listed and the Pulumi
	// backend read (DefaultListEvery when 0).
	ListEvery time.Duration
	// StaleAfter is the Exporter's.
	StaleAfter time.Duration
	// Stack checks the Pulumi flags, then makes the stacks' template and
	// says how boxes are reached, as for fleet events reconcile.
	Stack func(progress io.Writer) (*program.Stack, provider.Config, error)
}

// Run is fleet events exporter: it opens what the reconciler of the
// events file uses (its Pulumi backend, its backends) and serves the
// metrics on o.Listen until ctx ends. Its log goes to stdout.
func Run(ctx context.Context, stdout io.Writer, o RunOptions) error {
	if o.EventsFile == "" {
		return cli.Usagef("flag --events: required")
	}
	if o.Listen == "" {
		return cli.Usagef("flag --listen: required (HOST:PORT for /metrics)")
	}
	if _, _, err := net.SplitHostPort(o.Listen); err != nil {
		return cli.Usagef("flag --listen: want HOST:PORT, got %q", o.Listen)
	}
	st, cfg, err := o.Stack(stdout)
	if err != nil {
		return err
	}
	w, err := events.OpenWatch(ctx, events.Options{EventsFile: o.EventsFile, Stack: *st, Lab: cfg})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("flag --listen: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stdout, nil))
	e := &Exporter{Fleet: w.Fleet, Store: w.Store, ReadEvents: w.ReadEvents, Backends: w.Backends, StaleAfter: o.StaleAfter, Log: log}
	every := o.ListEvery
	if every <= 0 {
		every = DefaultListEvery
	}
	log.Info(fmt.Sprintf("events exporter of fleet %s: /metrics on http://%s, listing by label every %s", w.Fleet, ln.Addr(), every))
	return e.Serve(ctx, ln, every)
}
