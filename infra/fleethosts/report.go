package fleethosts

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/provision"
)

// Row is one host in fleet hosts's output: the host, and with --release
// the relay release it runs, or why that could not be read.
type Row struct {
	Host
	Release string `json:"release,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Rows are the set's hosts, their releases not read.
func (s *Set) Rows() []Row {
	rows := make([]Row, len(s.Hosts))
	for i, h := range s.Hosts {
		rows[i].Host = h
	}
	return rows
}

// ReadReleases reads the current relay release of each row's box over
// SSH, targets[i] being rows[i]'s box, and says how many could not be
// read (their Error says why).
func ReadReleases(ctx context.Context, targets []provision.Target, rows []Row) (failed int) {
	current, errs := provision.CurrentReleases(ctx, targets, provision.Releases{})
	for i := range rows {
		if errs[i] != nil {
			rows[i].Error = text.OneLine(errs[i])
			failed++
			continue
		}
		rows[i].Release = current[i]
	}
	return failed
}

// WriteJSON writes fleet hosts --json: the fleet, its steady stack, the
// rows and the set's warnings.
func WriteJSON(w io.Writer, s *Set, rows []Row) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	warnings := append([]string{}, s.Warnings...)
	return enc.Encode(map[string]any{"fleet": s.Fleet, "stack": s.Steady, "hosts": rows, "warnings": warnings})
}

// WriteText writes fleet hosts's table; RELEASE is read over SSH only
// with --release (fleet status reads it too, with each process's).
func WriteText(w io.Writer, s *Set, rows []Row, release bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STACK\tHOST\tGROUP\tTIER\tEVENT\tBACKEND\tADDRESS\tHOSTKEY\tPROCESSES\tRELEASE")
	for _, r := range rows {
		rel := "-"
		switch {
		case r.Error != "":
			rel = "FAILED"
		case release:
			rel = text.ShortSHA(r.Release)
		}
		ports := make([]string, len(r.Ports))
		for i, p := range r.Ports {
			ports[i] = fmt.Sprint(p)
		}
		event := r.Event
		if event == "" {
			event = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d (%s)\t%s\n", r.Stack, r.Name, r.Group, r.Tier, event, r.Backend,
			r.Address, r.Fingerprint, len(r.Ports), strings.Join(ports, ","), rel)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	steady := len(s.SteadyHosts())
	if origins := len(Origins(s.Hosts)); origins > 0 {
		fmt.Fprintf(w, "\n%s and %s in stack %s, %d in event stacks\n", text.Plural(steady-origins, "steady host", "steady hosts"), text.Plural(origins, "origin", "origins"), s.Steady, len(rows)-steady)
	} else {
		fmt.Fprintf(w, "\n%s in stack %s, %d in event stacks\n", text.Plural(steady, "steady host", "steady hosts"), s.Steady, len(rows)-steady)
	}
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(w, "%s: FAILED: %s\n", r.Name, r.Error)
		}
	}
	for _, wn := range s.Warnings {
		fmt.Fprintf(w, "warning: %s\n", wn)
	}
	return nil
}

// StackTargets are the provision targets for hosts of stack st: lab
// boxes reached with the admin key of a.LabDir, else of the lab the
// stack was brought up with, the others with a.SSHKey or the ssh-agent.
// close releases what reaching them holds.
func StackTargets(ctx context.Context, st *program.Stack, hosts []Host, a Access) (targets []provision.Target, close func(), err error) {
	if len(hosts) == 0 {
		return nil, nil, fmt.Errorf("stack %s: no hosts: run fleet up first", st.Name)
	}
	access, err := StackAccess(ctx, st, hosts, a)
	if err != nil {
		return nil, nil, err
	}
	targets, closer, err := Targets(st.Fleet, hosts, access)
	if err != nil {
		return nil, nil, err
	}
	return targets, func() { closer.Close() }, nil
}
