package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/relay/cli"
	"github.com/relayfleet/relayfleet/sysctl"
	"golang.org/x/crypto/ssh"
)

// exitError ends a command with a given exit code and one line.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// Exit codes of fleet converge beyond the common ones.
const (
	exitChanges     = 1 // --check found changes
	exitHostsFailed = 3 // some hosts failed; the others were converged
)

func runConverge(ctx context.Context, args []string, ios *cli.IOStreams) error {
	stdout := ios.Out
	fs := newFlags("converge", stdout)
	var hf hostFlags
	hf.add(fs)
	var kf keyFlags
	kf.add(fs)
	check := fs.Bool("check", false, "print what would change and exit 1 if anything would")
	asJSON := fs.Bool("json", false, "print JSON lines: progress events, one result per host, a summary")
	binaryPath := fs.String("relay-binary", "", "the relay build to release (default: relay beside the fleet binary)")
	parallel := fs.Int("parallel", 16, "hosts converged at once")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := hf.check(); err != nil {
		return err
	}
	if *parallel <= 0 {
		return usagef("flag --parallel: must be positive, got %d", *parallel)
	}
	fleet, err := loadFleet(hf.inventory)
	if err != nil {
		return err
	}
	binary, err := relayBinary(*binaryPath)
	if err != nil {
		return err
	}
	st, err := kf.stackFor(fleet)
	if err != nil {
		return err
	}
	// The relays verify tokens with the fleet's key, kept in its stack: a
	// fleet converged for the first time gets its first key.
	keys, _, err := fleetAuthKeys(ctx, openKeyStore(st), !*check)
	if err != nil {
		return err
	}
	targets, cleanup, err := resolveTargets(ctx, fleet, hf.sshKey, hf.labDir)
	if err != nil {
		return err
	}
	defer cleanup()
	for i := range targets {
		targets[i].AuthKeys = []byte(keys)
		targets[i].PublicListen = fleet.Access.PublicListen
	}
	return convergeTargets(ctx, stdout, targets, binary, *check, *asJSON, *parallel)
}

// convergeTargets converges targets and reports per host, as text or
// JSON lines.
func convergeTargets(ctx context.Context, stdout io.Writer, targets []provision.Target, binary []byte, check, asJSON bool, parallel int) error {
	start := time.Now()
	var mu sync.Mutex
	enc := json.NewEncoder(stdout)
	var live *liveLines
	if !asJSON && cli.IsTerminal(stdout) {
		var hosts []string
		for _, t := range targets {
			hosts = append(hosts, t.Host.String())
		}
		live = newLiveLines(stdout, hosts)
	}
	progress := func(host, step string) {
		if live != nil {
			live.set(host, step)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if asJSON {
			enc.Encode(map[string]any{"event": "progress", "host": host, "step": step, "seconds": time.Since(start).Seconds()})
			return
		}
		if step == "converge" {
			fmt.Fprintf(stdout, "%6.1fs %s: %s\n", time.Since(start).Seconds(), host, map[bool]string{true: "checking", false: "converging"}[check])
		}
	}
	results := provision.ConvergeFleet(ctx, targets, provision.Options{Binary: binary, Check: check, Parallel: parallel, Progress: progress})
	if asJSON {
		if err := writeConvergeJSON(enc, results); err != nil {
			return err
		}
	} else {
		writeConvergeText(stdout, results, check)
	}
	failed, changed := 0, 0
	for _, r := range results {
		if r.Err != nil {
			failed++
		} else if len(r.Report.Changes) > 0 {
			changed++
		}
	}
	switch {
	case failed > 0:
		return &exitError{exitHostsFailed, fmt.Sprintf("%d of %d hosts failed: %s", failed, len(results), oneLine(provision.Failed(results)))}
	case check && changed > 0:
		return &exitError{exitChanges, fmt.Sprintf("%d of %d hosts would change", changed, len(results))}
	}
	return nil
}

// hostFlags are the flags of the commands that reach an inventory's boxes.
type hostFlags struct {
	inventory, sshKey, labDir string
}

func (h *hostFlags) add(fs flags) {
	fs.StringVar(&h.inventory, "inventory", "", "fleet file (required)")
	fs.StringVar(&h.sshKey, "ssh-key", "", "private key for static hosts (default: ssh-agent at SSH_AUTH_SOCK)")
	fs.StringVar(&h.labDir, "lab-dir", "", "lab state directory (default $"+lab.DirEnv+", else "+lab.DefaultDir+")")
}

func (h *hostFlags) check() error {
	if h.inventory == "" {
		return usagef("flag --inventory: required")
	}
	return nil
}

// targets loads the inventory and resolves its steady boxes.
func (h *hostFlags) targets(ctx context.Context) ([]provision.Target, func(), error) {
	fleet, err := loadFleet(h.inventory)
	if err != nil {
		return nil, nil, err
	}
	return resolveTargets(ctx, fleet, h.sshKey, h.labDir)
}

// loadFleet reads a fleet file with the catalogue beside it (or the
// shipped one).
func loadFleet(path string) (*inventories.Fleet, error) {
	cat, err := inventories.LoadCatalogue(inventories.Beside(path, inventories.ProvidersFile))
	if err != nil {
		return nil, err
	}
	return inventories.LoadFleet(path, cat)
}

// relayBinary reads the relay build to release.
func relayBinary(path string) ([]byte, error) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		path = filepath.Join(filepath.Dir(exe), "relay")
		if _, err := os.Stat(path); err != nil {
			return nil, usagef("flag --relay-binary: no relay beside %s; build it with make build or give --relay-binary", exe)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("flag --relay-binary: %v", err)
	}
	if len(data) < 4 || string(data[:4]) != "\x7fELF" {
		return nil, usagef("flag --relay-binary: %s is not a Linux executable", path)
	}
	return data, nil
}

// resolveTargets finds the steady boxes of an inventory and how to reach
// them: lab boxes from the lab's state (labelled fleet=NAME, in name
// order), static servers from the inventory with their pinned host keys.
// Cloud boxes are converged by fleet up's Host resources.
func resolveTargets(ctx context.Context, f *inventories.Fleet, sshKey, labDir string) ([]provision.Target, func(), error) {
	var targets []provision.Target
	var closers []func()
	cleanup := func() {
		for _, c := range closers {
			c()
		}
	}
	var labBoxes []lab.Box
	var labPool *provision.Pool
	var staticPool *provision.Pool
	for i, g := range f.Steady {
		path := fmt.Sprintf("steady[%d] %s", i, g.Name)
		switch g.Provider {
		case "lab":
			if labPool == nil {
				l, err := newLab(labDir, io.Discard) // lists boxes only
				if err != nil {
					cleanup()
					return nil, nil, err
				}
				if labBoxes, err = l.List(ctx, map[string]string{"fleet": f.Name}); err != nil {
					cleanup()
					return nil, nil, err
				}
				sort.Slice(labBoxes, func(a, b int) bool { return labBoxes[a].Name < labBoxes[b].Name })
				signer, err := l.Signer()
				if err != nil {
					cleanup()
					return nil, nil, err
				}
				labPool = &provision.Pool{Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, Keys: &provision.HostKeys{File: l.KnownHostsPath()}}
				closers = append(closers, func() { labPool.Close() })
			}
			n := g.BoxCount()
			running := slices.DeleteFunc(slices.Clone(labBoxes), func(b lab.Box) bool { return b.State != lab.StateRunning })
			if len(running) < n {
				cleanup()
				return nil, nil, fmt.Errorf("%s: %d lab boxes wanted, %d run labelled fleet=%s (fleet lab up %d)", path, n, len(running), f.Name, n)
			}
			for _, b := range running[:n] {
				h := provision.Host{Name: b.Name, Address: b.SSHAddr(), User: "root"}
				targets = append(targets, provision.Target{Host: h, Run: labPool.Runner(h), Processes: int(g.Processes), BasePort: g.BasePort, Upstream: f.Origin})
			}
			labBoxes = slices.DeleteFunc(labBoxes, func(b lab.Box) bool {
				return slices.ContainsFunc(running[:n], func(r lab.Box) bool { return r.Name == b.Name })
			})
		case inventories.ProviderStatic:
			if staticPool == nil {
				auth, closer, err := provision.Auth(sshKey)
				if err != nil {
					cleanup()
					return nil, nil, usagef("flag --ssh-key: %v", err)
				}
				closers = append(closers, func() { closer.Close() })
				known, err := os.CreateTemp("", "relayfleet-known-hosts-*")
				if err != nil {
					cleanup()
					return nil, nil, err
				}
				known.Close()
				closers = append(closers, func() { os.Remove(known.Name()) })
				staticPool = &provision.Pool{Auth: auth, Keys: &provision.HostKeys{File: known.Name()}}
				closers = append(closers, func() { staticPool.Close() })
			}
			for j, sh := range g.Hosts {
				key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(sh.HostKey))
				if err != nil {
					cleanup()
					return nil, nil, fmt.Errorf("%s hosts[%d].host_key: %v", path, j, err)
				}
				h := provision.Host{Name: sh.Address, Address: sh.Address, User: sh.User}
				if err := provision.PinKey(staticPool.Keys.File, hostAddr(sh.Address), key); err != nil {
					cleanup()
					return nil, nil, err
				}
				targets = append(targets, provision.Target{Host: h, Run: staticPool.Runner(h), Processes: int(g.Processes), BasePort: g.BasePort, Upstream: f.Origin})
			}
		default:
			cleanup()
			return nil, nil, fmt.Errorf("%s: %s boxes are converged by fleet up (its Host resources); fleet converge, rollout and status take lab and static groups", path, g.Provider)
		}
	}
	if len(targets) == 0 {
		cleanup()
		return nil, nil, errors.New("the inventory has no steady boxes to converge")
	}
	return targets, cleanup, nil
}

// hostAddr is the address as SSH sees it: host:port, port 22 by default.
func hostAddr(a string) string {
	return provision.Host{Address: a}.Addr()
}

func writeConvergeText(w io.Writer, rs []provision.HostResult, check bool) {
	changed, unchanged, failed := 0, 0, 0
	for _, r := range rs {
		fmt.Fprintln(w)
		if r.Err != nil {
			failed++
			fmt.Fprintf(w, "== %s: FAILED after %.1fs: %s\n", r.Host, r.Elapsed.Seconds(), oneLine(r.Err))
			if r.Report == nil {
				continue
			}
		}
		rep := r.Report
		procs := ""
		if r.Facts.Cores > 0 {
			procs = fmt.Sprintf(" (%d cores, %s)", r.Facts.Cores, inventories.Bytes(r.Facts.RAM).IEC())
		}
		switch {
		case r.Err != nil:
		case len(rep.Changes) == 0:
			unchanged++
			fmt.Fprintf(w, "== %s%s: converged, nothing to change (%.1fs)\n", r.Host, procs, r.Elapsed.Seconds())
		case check:
			changed++
			fmt.Fprintf(w, "== %s%s: %d changes to make\n", r.Host, procs, len(rep.Changes))
		default:
			changed++
			fmt.Fprintf(w, "== %s%s: %d changes applied in %.1fs\n", r.Host, procs, len(rep.Changes), r.Elapsed.Seconds())
		}
		for _, c := range rep.Changes {
			fmt.Fprintf(w, "   %s\n", c)
		}
		for _, s := range rep.Sysctl {
			fmt.Fprintf(w, "   sysctl %s = %s: %s%s\n", s.Key, s.Want, s.Status, sysctlNote(s))
		}
		if len(rep.Sysctl) == 0 && len(rep.Refused) > 0 {
			keys := make([]string, 0, len(rep.Refused))
			for k := range rep.Refused {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			fmt.Fprintf(w, "   sysctl not applied (this kernel refuses them, as inside a container): %s\n", strings.Join(keys, ", "))
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tRESULT\tCHANGES\tRESTARTED\tRELEASE\tSECONDS")
	for _, r := range rs {
		result, n, restarted, release := "converged", 0, 0, ""
		if r.Report != nil {
			n, restarted, release = len(r.Report.Changes), len(r.Report.Restarted), short(r.Report.Release)
		}
		switch {
		case r.Err != nil:
			result = "FAILED"
		case n > 0 && check:
			result = "would change"
		case n > 0:
			result = "changed"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%.1f\n", r.Host, result, n, restarted, release, r.Elapsed.Seconds())
	}
	tw.Flush()
	fmt.Fprintf(w, "\nsummary: %d hosts: %d changed, %d unchanged, %d failed\n", len(rs), changed, unchanged, failed)
}

func sysctlNote(s sysctl.Result) string {
	if s.Status == sysctl.NotApplied {
		got := s.After
		if got == "" {
			got = "no such key"
		}
		return fmt.Sprintf(" (the kernel keeps %s: read-only here, as inside a container)", got)
	}
	return ""
}

type hostJSON struct {
	Event     string            `json:"event"`
	Host      string            `json:"host"`
	Cores     int               `json:"cores"`
	RAMBytes  int64             `json:"ram_bytes"`
	Changes   []string          `json:"changes"`
	Sysctl    []sysctlJSON      `json:"sysctl"`
	Refused   map[string]string `json:"sysctl_refused"`
	Restarted []string          `json:"restarted"`
	Release   string            `json:"release"`
	Seconds   float64           `json:"seconds"`
	Error     string            `json:"error,omitempty"`
}

type sysctlJSON struct {
	Key    string `json:"key"`
	Want   string `json:"want"`
	Before string `json:"before"`
	After  string `json:"after"`
	Status string `json:"status"`
}

func writeConvergeJSON(enc *json.Encoder, rs []provision.HostResult) error {
	summary := map[string]any{"event": "summary", "hosts": len(rs), "changed": 0, "unchanged": 0, "failed": 0}
	for _, r := range rs {
		h := hostJSON{Event: "result", Host: r.Host, Cores: r.Facts.Cores, RAMBytes: r.Facts.RAM, Seconds: r.Elapsed.Seconds(), Changes: []string{}, Sysctl: []sysctlJSON{}, Restarted: []string{}}
		switch {
		case r.Err != nil:
			h.Error = oneLine(r.Err)
			summary["failed"] = summary["failed"].(int) + 1
		case len(r.Report.Changes) > 0:
			summary["changed"] = summary["changed"].(int) + 1
		default:
			summary["unchanged"] = summary["unchanged"].(int) + 1
		}
		if rep := r.Report; rep != nil {
			for _, c := range rep.Changes {
				h.Changes = append(h.Changes, c.String())
			}
			for _, s := range rep.Sysctl {
				h.Sysctl = append(h.Sysctl, sysctlJSON{s.Key, s.Want, s.Before, s.After, string(s.Status)})
			}
			h.Refused = rep.Refused
			h.Restarted = append(h.Restarted, rep.Restarted...)
			h.Release = rep.Release
		}
		if err := enc.Encode(h); err != nil {
			return err
		}
	}
	return enc.Encode(summary)
}
