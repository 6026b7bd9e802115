package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/infra/fleethosts"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/provision"
)

// readHosts lists the fleet's hosts from its stacks (the steady stack st
// and its events'); what differs from the inventory is a warning on
// errOut (the command's stderr).
func readHosts(ctx context.Context, st *program.Stack, errOut io.Writer) (*fleethosts.Set, error) {
	set, err := fleethosts.Read(ctx, st)
	if err != nil {
		return nil, err
	}
	for _, w := range set.Warnings {
		fmt.Fprintf(errOut, "fleet: warning: %s\n", w)
	}
	return set, nil
}

// hostTargets are the provision targets for hosts: lab boxes reached with
// the admin key of labDir, else of the lab the stack was brought up with,
// the others with sshKey or the ssh-agent.
func hostTargets(ctx context.Context, st *program.Stack, hosts []fleethosts.Host, sshKey, labDir string) ([]provision.Target, func(), error) {
	if len(hosts) == 0 {
		return nil, nil, fmt.Errorf("stack %s: no hosts: run fleet up first", st.Name)
	}
	access, err := fleethosts.StackAccess(ctx, st, hosts, fleethosts.Access{LabDir: labDir, SSHKey: sshKey})
	if err != nil {
		return nil, nil, err
	}
	targets, closer, err := fleethosts.Targets(st.Fleet, hosts, access)
	if err != nil {
		return nil, nil, err
	}
	return targets, func() { closer.Close() }, nil
}

// steadyTargets are the targets of the steady stack's hosts; warnings go
// to errOut.
func steadyTargets(ctx context.Context, st *program.Stack, sshKey, labDir string, errOut io.Writer) ([]provision.Target, func(), error) {
	set, err := readHosts(ctx, st, errOut)
	if err != nil {
		return nil, nil, err
	}
	return hostTargets(ctx, st, set.SteadyHosts(), sshKey, labDir)
}

// hostJSONEntry is one host in fleet hosts --json.
type hostJSONEntry struct {
	fleethosts.Host
	Release string `json:"release,omitempty"`
	Error   string `json:"error,omitempty"`
}

// hostsCommand is fleet hosts.
func hostsCommand(ios *cli.IOStreams) *cobra.Command {
	var hf hostFlags
	var asJSON, release bool
	cmd := &cobra.Command{
		Use:   "hosts",
		Short: "the fleet's hosts as its stacks list them (steady and events, any backend): stack, group, tier, address, host key, processes",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runHosts(cmd.Context(), &hf, asJSON, release, ios)
		},
	}
	fs := cmd.Flags()
	hf.add(fs)
	fs.BoolVar(&asJSON, "json", false, "print JSON: every host with its stack, tier, event, addresses, host key and ports")
	fs.BoolVar(&release, "release", false, "read each box's current relay release over SSH (default: the stacks alone, no connection)")
	return cmd
}

func runHosts(ctx context.Context, hf *hostFlags, asJSON, release bool, ios *cli.IOStreams) error {
	stdout := ios.Out
	if err := hf.check(); err != nil {
		return err
	}
	fleet, err := loadFleet(hf.inventory)
	if err != nil {
		return err
	}
	st, err := hf.stackFor(fleet)
	if err != nil {
		return err
	}
	set, err := fleethosts.Read(ctx, st)
	if err != nil {
		return err
	}
	rows := make([]hostJSONEntry, len(set.Hosts))
	for i, h := range set.Hosts {
		rows[i].Host = h
	}
	failed := 0
	if release && len(set.Hosts) > 0 {
		targets, cleanup, err := hostTargets(ctx, st, set.Hosts, hf.sshKey, hf.labDir)
		if err != nil {
			return err
		}
		defer cleanup()
		current, errs := provision.CurrentReleases(ctx, targets, provision.Releases{})
		for i := range rows {
			if errs[i] != nil {
				rows[i].Error = oneLine(errs[i])
				failed++
				continue
			}
			rows[i].Release = current[i]
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		warnings := append([]string{}, set.Warnings...)
		if err := enc.Encode(map[string]any{"fleet": set.Fleet, "stack": set.Steady, "hosts": rows, "warnings": warnings}); err != nil {
			return err
		}
	} else if err := writeHostsText(stdout, set, rows, release); err != nil {
		return err
	}
	if failed > 0 {
		return &exitError{Code: exitHostsFailed, Msg: fmt.Sprintf("%d of %s could not be read", failed, text.Plural(len(rows), "host", "hosts"))}
	}
	return nil
}

// writeHostsText writes fleet hosts's table; RELEASE is read over SSH
// only with --release (fleet status reads it too, with each process's).
func writeHostsText(w io.Writer, set *fleethosts.Set, rows []hostJSONEntry, release bool) error {
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d (%s)\t%s\n", r.Stack, r.Name, r.Group, r.Tier, dash(r.Event), r.Backend,
			r.Address, r.Fingerprint, len(r.Ports), strings.Join(ports, ","), rel)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	steady := len(set.SteadyHosts())
	fmt.Fprintf(w, "\n%s in stack %s, %d in event stacks\n", text.Plural(steady, "steady host", "steady hosts"), set.Steady, len(rows)-steady)
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(w, "%s: FAILED: %s\n", r.Name, r.Error)
		}
	}
	for _, wn := range set.Warnings {
		fmt.Fprintf(w, "warning: %s\n", wn)
	}
	return nil
}

// allTargets loads the inventory and resolves every box of its stacks:
// the steady stack's and its events'. Warnings go to errOut.
func (h *hostFlags) allTargets(ctx context.Context, errOut io.Writer) ([]provision.Target, func(), error) {
	fleet, err := loadFleet(h.inventory)
	if err != nil {
		return nil, nil, err
	}
	st, err := h.stackFor(fleet)
	if err != nil {
		return nil, nil, err
	}
	set, err := readHosts(ctx, st, errOut)
	if err != nil {
		return nil, nil, err
	}
	return hostTargets(ctx, st, set.Hosts, h.sshKey, h.labDir)
}
