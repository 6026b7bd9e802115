package provision

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/units"
)

// Target is one host to converge and the relay layout it gets.
type Target struct {
	Host Host
	Run  Runner
	// Processes is the relay process count; 0 means one per core.
	Processes int
	BasePort  int
	// RAM overrides what the box reports (0: read it from the box).
	RAM int64
	// Upstream is the fleet's origin: relay URLs every process pulls from.
	Upstream []string
	// Origin, for one of the fleet's origin boxes, is its relay's URL
	// (what the edges' Upstream names it by); empty for an edge. fleet
	// status lists origins apart, and names the origin each edge pulls
	// from.
	Origin string
	// Region is the box's region in a fleet with regions (fleet status's
	// REGION column), else empty.
	Region string
	// AuthKeys is the fleet's relay auth key file (BoxKeyFile), which
	// every relay verifies tokens with; required.
	AuthKeys []byte
	// AcceptLinkTokens marks a box other relays pull from (an origin):
	// its relays take the edges' link tokens. Every other box gets
	// AuthKeys without the link key's public half (RelayKeyFile).
	AcceptLinkTokens bool
	// PublicListen are broadcast path prefixes listeners may subscribe
	// under without a token.
	PublicListen []string
	// MaxSessionsPerAddress caps each relay's sessions from one source
	// address; 0: no cap.
	MaxSessionsPerAddress int
	// UncappedAddresses are the fleet's load generators (CIDR prefixes,
	// comma-separated), whose sessions no per-address cap counts.
	UncappedAddresses string
	// TLSKey is the box's relay TLS key (BoxTLSKey), which every relay
	// serves its certificates for; nil leaves the relays making their own.
	TLSKey []byte
}

// Facts are what a box says about itself.
type Facts struct {
	Cores int
	// CPUs are the CPU ids the box may run on (its cpuset).
	CPUs []int
	// RAM is the memory the box may use: MemTotal, or its cgroup limit
	// when that is lower (a container).
	RAM int64
}

// ReadFacts reads the box's cores and usable RAM over SSH.
func ReadFacts(ctx context.Context, run Runner) (Facts, error) {
	out, err := run.Run(ctx, `nproc; awk '/^MemTotal:/ {print $2}' /proc/meminfo; cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || echo max; awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status`, nil)
	if err != nil {
		return Facts{}, fmt.Errorf("read cores and RAM: %w", err)
	}
	f := strings.Fields(string(out))
	if len(f) < 3 {
		return Facts{}, fmt.Errorf("read cores and RAM: unexpected answer %q", out)
	}
	cores, err1 := strconv.Atoi(f[0])
	memKB, err2 := strconv.ParseInt(f[1], 10, 64)
	mem := memKB * 1024
	if err1 != nil || err2 != nil || cores <= 0 || mem <= 0 {
		return Facts{}, fmt.Errorf("read cores and RAM: unexpected answer %q", out)
	}
	if limit, err := strconv.ParseInt(f[2], 10, 64); err == nil && limit > 0 && limit < mem {
		mem = limit
	}
	facts := Facts{Cores: cores, RAM: mem}
	if len(f) > 3 {
		cpus, err := parseCPUList(f[3])
		if err != nil {
			return Facts{}, fmt.Errorf("read cores and RAM: cpu list %q: %w", f[3], err)
		}
		facts.CPUs = cpus
	}
	return facts, nil
}

// parseCPUList reads a kernel CPU list such as "0-3,8,10-11".
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("bad range %q", part)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// HostResult is one host's outcome.
type HostResult struct {
	Host    string
	Facts   Facts
	Report  *Report
	Err     error
	Elapsed time.Duration
}

// Options for ConvergeFleet.
type Options struct {
	Binary []byte
	Check  bool
	// Parallel caps hosts worked on at once (default 16).
	Parallel int
	Releases Releases
	// Progress, when set, hears each host's step ("facts", "converge",
	// "done" or "failed"); it may be called from several goroutines.
	Progress func(host, step string)
}

// ConvergeFleet converges every target, at most Parallel at a time. A
// failed host does not stop the others; each result carries its error.
func ConvergeFleet(ctx context.Context, targets []Target, o Options) []HostResult {
	par := o.Parallel
	if par <= 0 {
		par = 16
	}
	progress := o.Progress
	if progress == nil {
		progress = func(string, string) {}
	}
	release := Digest(o.Binary)
	results := make([]HostResult, len(targets))
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i] = HostResult{Host: t.Host.String(), Err: ctx.Err()}
				return
			}
			defer func() { <-sem }()
			start := time.Now()
			r := HostResult{Host: t.Host.String()}
			r.Facts, r.Report, r.Err = convergeTarget(ctx, t, release, o, progress)
			r.Elapsed = time.Since(start)
			if r.Err != nil {
				progress(r.Host, "failed")
			} else {
				progress(r.Host, "done")
			}
			results[i] = r
		})
	}
	wg.Wait()
	return results
}

func convergeTarget(ctx context.Context, t Target, release string, o Options, progress func(string, string)) (Facts, *Report, error) {
	progress(t.Host.String(), "facts")
	facts, err := ReadFacts(ctx, t.Run)
	if err != nil {
		return facts, nil, err
	}
	if t.RAM > 0 {
		facts.RAM = t.RAM
	}
	root := o.Releases.Root
	if root == "" {
		root = DefaultRoot
	}
	plan, err := DesiredRelay(units.Layout{Cores: facts.Cores, RAM: facts.RAM, Processes: t.Processes, BasePort: t.BasePort, Binary: root + "/current/relay", CPUs: facts.CPUs, Upstream: t.Upstream, PublicListen: t.PublicListen, MaxSessionsPerAddress: t.MaxSessionsPerAddress, UncappedAddresses: t.UncappedAddresses}, release, RelayKeyFile(t.AuthKeys, t.AcceptLinkTokens), t.TLSKey)
	if err != nil {
		return facts, nil, err
	}
	progress(t.Host.String(), "converge")
	rep, err := Converge(ctx, t.Run, plan, o.Releases, o.Binary, o.Check)
	return facts, rep, err
}

// Failed joins the errors of the failed hosts, nil when none failed.
func Failed(rs []HostResult) error {
	var errs []error
	for _, r := range rs {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.Host, r.Err))
		}
	}
	return errors.Join(errs...)
}
