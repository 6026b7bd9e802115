package provision

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/text"
)

// Exit codes of the fleet commands that work on many hosts, beyond the
// common ones (internal/cli).
const (
	ExitChanges     = 1 // fleet converge --check found changes
	ExitHostsFailed = 3 // some hosts failed (or could not be read); the others were done
)

// RunConverge is fleet converge over targets: it converges them
// (ConvergeFleet with o, whose Progress it sets) and reports on w, as JSON
// lines when asJSON (progress events, one result per host, a summary),
// else as text: one live line per host on a terminal, a timestamped line
// as each host starts otherwise, then WriteConvergeText. Its error is a
// cli.ExitError: ExitHostsFailed when a host failed, ExitChanges when o.Check
// found changes.
func RunConverge(ctx context.Context, w io.Writer, targets []Target, o Options, asJSON bool) error {
	start := time.Now()
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	var live *cli.LiveLines
	if !asJSON && cli.IsTerminal(w) {
		var hosts []string
		for _, t := range targets {
			hosts = append(hosts, t.Host.String())
		}
		live = cli.NewLiveLines(w, hosts)
	}
	o.Progress = func(host, step string) {
		if live != nil {
			live.Set(host, step)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if asJSON {
			enc.Encode(map[string]any{"event": "progress", "host": host, "step": step, "seconds": time.Since(start).Seconds()})
			return
		}
		if step == "converge" {
			fmt.Fprintf(w, "%6.1fs %s: %s\n", time.Since(start).Seconds(), host, map[bool]string{true: "checking", false: "converging"}[o.Check])
		}
	}
	results := ConvergeFleet(ctx, targets, o)
	if asJSON {
		if err := WriteConvergeJSON(enc, results); err != nil {
			return err
		}
	} else {
		WriteConvergeText(w, results, o.Check)
	}
	switch tally := TallyResults(results); {
	case tally.Failed > 0:
		return &cli.ExitError{Code: ExitHostsFailed, Msg: fmt.Sprintf("%d of %s failed: %s", tally.Failed, text.Plural(len(results), "host", "hosts"), text.OneLine(Failed(results)))}
	case o.Check && tally.Changed > 0:
		return &cli.ExitError{Code: ExitChanges, Msg: fmt.Sprintf("%d of %s would change", tally.Changed, text.Plural(len(results), "host", "hosts"))}
	}
	return nil
}
