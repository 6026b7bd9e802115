package monitoring

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
)

// DirEnv names the monitor directory fleet up, destroy, events reconcile
// and burst keep current when --monitor-dir is not given.
const DirEnv = "RELAYFLEET_MONITOR_DIR"

// DirFrom is the monitor directory: flagValue (--monitor-dir), else
// $RELAYFLEET_MONITOR_DIR; "" means none.
func DirFrom(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return os.Getenv(DirEnv)
}

// CommandOptions are fleet monitor's inputs, as its flags give them.
type CommandOptions struct {
	// Out is the directory to write (required).
	Out string
	// Inventory limits the targets to a fleet file's stacks, EventsFile
	// to its fleet's, with each event's end; at most one of them.
	Inventory, EventsFile string
	// StateDir holds the stacks ("": program.DefaultStateDir).
	StateDir string
	Routers  []string
	// Prober is --prober, a relay prober's HOST:PORT ("": none).
	Prober string
	// EventsExporter is --events-exporter, fleet events exporter's
	// HOST:PORT ("": none).
	EventsExporter string
	// ScrapeInterval and EvaluationInterval are whole milliseconds (0:
	// 15s); their ranges are the flags' to check.
	ScrapeInterval, EvaluationInterval time.Duration
	// FleetHosts reads the hosts of the inventory's fleet's stacks (its
	// own and its events', with any backend), as fleet status does.
	FleetHosts func(ctx context.Context, f *inventories.Fleet, stateDir string) (map[string][]program.HostEntry, error)
}

// WriteDir is fleet monitor: it checks o, reads the stacks' hosts and the
// files named, writes the directory (Write) and says what it wrote on w.
// Errors in what the flags gave are cli usage errors naming the flag.
func WriteDir(ctx context.Context, w io.Writer, co CommandOptions) error {
	if co.Out == "" {
		return cli.Usagef("flag --out: required")
	}
	if co.Inventory != "" && co.EventsFile != "" {
		return cli.Usagef("flag --events: give --inventory or --events, not both (the events file names its fleet)")
	}
	if co.ScrapeInterval%time.Millisecond != 0 {
		return cli.Usagef("flag --scrape-interval: want a positive whole number of milliseconds, got %s", co.ScrapeInterval)
	}
	if co.EvaluationInterval%time.Millisecond != 0 {
		return cli.Usagef("flag --evaluation-interval: want a positive whole number of milliseconds, got %s", co.EvaluationInterval)
	}
	if _, err := RouterTargets(co.Routers); err != nil {
		return cli.Usagef("flag --router: %v", err)
	}
	if co.Prober != "" {
		if _, err := RouterTargets([]string{co.Prober}); err != nil {
			return cli.Usagef("flag --prober: %v", err)
		}
	}
	if co.EventsExporter != "" {
		if _, err := RouterTargets([]string{co.EventsExporter}); err != nil {
			return cli.Usagef("flag --events-exporter: want HOST:PORT (fleet events install prints it), got %q", co.EventsExporter)
		}
	}
	o := Options{StateDir: co.StateDir, Routers: co.Routers, Prober: co.Prober, EventsExporter: co.EventsExporter, ScrapeInterval: co.ScrapeInterval, EvaluationInterval: co.EvaluationInterval}
	var err error
	if o.StateDir == "" {
		if o.StateDir, err = program.DefaultStateDir(); err != nil {
			return err
		}
	}
	switch {
	case co.Inventory != "":
		f, _, err := inventories.LoadFleetFile(co.Inventory)
		if err != nil {
			return err
		}
		o.Fleet = f.Name
		// Its hosts are its stacks' (steady and events), any backend.
		if o.Hosts, err = co.FleetHosts(ctx, f, o.StateDir); err != nil {
			return err
		}
	case co.EventsFile != "":
		cat, err := inventories.LoadCatalogue(inventories.Beside(co.EventsFile, inventories.ProvidersFile))
		if err != nil {
			return err
		}
		evs, f, err := inventories.LoadEvents(co.EventsFile, cat)
		if err != nil {
			return err
		}
		o.Fleet, o.Events = f.Name, evs
	}
	if _, err := os.Stat(filepath.Join(o.StateDir, program.HostsDir)); err != nil && o.Hosts == nil {
		return cli.Usagef("flag --state-dir: %s has no stacks yet (%v); run fleet up first", o.StateDir, err)
	}
	res, err := Write(co.Out, o)
	if err != nil {
		return err
	}
	return res.WriteSummary(w)
}
