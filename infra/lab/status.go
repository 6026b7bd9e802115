package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/relayfleet/relayfleet/internal/text"
)

// BoxStatus is one box as fleet lab status shows it: what the lab knows
// of it, and whether its SSH server answers.
type BoxStatus struct {
	Name       string            `json:"name"`
	Address    string            `json:"address"`
	State      string            `json:"state"`
	Cores      int               `json:"cores"`
	CPUs       string            `json:"cpus"`
	RAM        int64             `json:"ram"`
	MemoryUsed int64             `json:"memory_used"`
	SSH        bool              `json:"ssh"`
	HostKey    string            `json:"host_key"`
	Labels     map[string]string `json:"labels,omitempty"`
	PID        int               `json:"pid,omitempty"`
}

// statusSSHTimeout bounds each box's SSH check in Status.
const statusSSHTimeout = 2 * time.Second

// Status lists the lab's boxes and checks, in parallel, whether the SSH
// server of each running one answers with its pinned host key.
func (l *Lab) Status(ctx context.Context) ([]BoxStatus, error) {
	boxes, err := l.List(ctx, nil)
	if err != nil {
		return nil, err
	}
	signer, err := l.Signer()
	if err != nil {
		return nil, err
	}
	out := make([]BoxStatus, len(boxes))
	var wg sync.WaitGroup
	for i, b := range boxes {
		out[i] = BoxStatus{b.Name, b.Address.String(), b.State, b.Cores, b.CPUs, b.RAM, b.MemoryUsed, false, b.HostKey, b.Labels, b.PID}
		if b.State != StateRunning {
			continue
		}
		wg.Go(func() {
			hk, err := ParseHostKey(b.HostKey)
			out[i].SSH = err == nil && WaitSSH(ctx, b.SSHAddr(), signer, hk, statusSSHTimeout) == nil
		})
	}
	wg.Wait()
	return out, nil
}

// WriteStatus writes boxes as a table, or as indented JSON when asJSON.
func WriteStatus(w io.Writer, boxes []BoxStatus, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(boxes)
	}
	if len(boxes) == 0 {
		_, err := fmt.Fprintln(w, "no lab boxes (fleet lab up N makes some)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BOX\tADDRESS\tSTATE\tCORES\tCPUS\tMEMORY\tSSH")
	for _, b := range boxes {
		ok := "no"
		if b.SSH {
			ok = "ok"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d/%d MiB\t%s\n", b.Name, b.Address, b.State, b.Cores, b.CPUs, b.MemoryUsed>>20, b.RAM>>20, ok)
	}
	return tw.Flush()
}

// WriteStarted writes a line for each box Up started or found running:
// name, address, cores, memory and how long it took. Failed ones are left
// out (Up's error names them).
func WriteStarted(w io.Writer, results []Started) {
	for _, r := range results {
		if r.Err != nil {
			continue
		}
		how := fmt.Sprintf("ready in %.1fs", r.Took.Seconds())
		if r.WasRunning {
			how = "already running"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d MiB\t%s\n", r.Box.Name, r.Box.Address, text.Plural(r.Box.Cores, "core", "cores"), r.Box.RAM>>20, how)
	}
}

// SSHCommand is the ssh client (client, the path of the binary) logging in
// to b as root with the lab's key and its pinned host key.
func (l *Lab) SSHCommand(ctx context.Context, client string, b Box) *exec.Cmd {
	return exec.CommandContext(ctx, client, "-i", l.AdminKeyPath(),
		"-o", "UserKnownHostsFile="+l.KnownHostsPath(), "-o", "StrictHostKeyChecking=yes",
		"-o", "LogLevel=ERROR", "root@"+b.Address.String())
}
