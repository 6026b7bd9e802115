package monitoring

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/relayfleet/relayfleet/internal/text"
)

// WriteSummary writes what Write wrote, as fleet monitor prints it: the
// targets and stacks, and how to point Prometheus and Grafana at them.
func (r *Result) WriteSummary(w io.Writer) error {
	fmt.Fprintf(w, "monitor: %d relay targets from stacks %s, %d routers, written to %s\n",
		r.Relays, strings.Join(r.Stacks, ", "), r.Routers, r.Dir)
	fmt.Fprintf(w, "  prometheus --config.file=%s   (or copy its jobs and rule_files into yours)\n", filepath.Join(r.Dir, ConfigFile))
	_, err := fmt.Fprintf(w, "  grafana: provisioning in %s\n", filepath.Join(r.Dir, "grafana/provisioning"))
	return err
}

// RefreshAndSay is Refresh for a command that changed the stacks: it
// writes a line on w saying what it wrote or why it wrote nothing. A
// failure is reported, not returned: the change itself went through.
// An empty dir (no monitor directory configured) does nothing.
func RefreshAndSay(w io.Writer, dir string, o Options) {
	if dir == "" {
		return
	}
	res, err := Refresh(dir, o)
	if err != nil {
		fmt.Fprintf(w, "monitor: targets in %s NOT updated: %s\n", dir, text.OneLine(err))
		return
	}
	fmt.Fprintf(w, "monitor: %d relay targets written to %s\n", res.Relays, filepath.Join(dir, RelayTargetsFile))
}
