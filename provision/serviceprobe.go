package provision

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/wire"
)

// ServiceProbe judges a relay process by what a listener gets through it:
// the fleet's heartbeat broadcast (a small group every 120 ms that every
// origin publishes under a reserved path), received through the process
// from this machine over the relay's own port, its certificate pinned by
// the hash the process reports on the box (read over SSH). A process
// that answers /healthz but pulls nothing from its origin hears nothing.
//
// Gate and Bake are a FleetRollout's: Gate after each restart, before the
// undrain; Bake on the rollout's first process, against a process still
// on the old build heard at the same time.
type ServiceProbe struct {
	// Window is how long Gate listens (0: 3s); MinShare the share of the
	// beats due it must hear (0: 0.8).
	Window   time.Duration
	MinShare float64
	// BakeFor is how long Bake listens (0: no bake).
	BakeFor time.Duration
	// Baseline is the process Bake compares the canary with: one still
	// on the old build (Baseline picks one when nil).
	Baseline func(t Target, inst string) (Target, string, bool)
	// Log gets one line per judgement (nil: none).
	Log func(format string, args ...any)
	// probe replaces client.ProbeHeartbeat in tests.
	probe func(ctx context.Context, o client.ProbeOptions) (client.ProbeResult, error)
}

func (s ServiceProbe) logf(format string, args ...any) {
	if s.Log != nil {
		s.Log(format, args...)
	}
}

// Hear probes the heartbeat through inst on t's box for window.
func (s ServiceProbe) Hear(ctx context.Context, t Target, inst string, window time.Duration) (client.ProbeResult, error) {
	port, err := InstancePort(inst)
	if err != nil {
		return client.ProbeResult{}, err
	}
	doc, err := instanceStats(ctx, t.Run, inst)
	if err != nil {
		return client.ProbeResult{}, fmt.Errorf("%s /stats: %w", inst, err)
	}
	if doc.CertificateSHA256 == "" {
		return client.ProbeResult{}, fmt.Errorf("%s /stats: no certificate hash to pin", inst)
	}
	host, _, err := net.SplitHostPort(t.Host.Addr())
	if err != nil {
		host = t.Host.Addr()
	}
	probe := s.probe
	if probe == nil {
		probe = client.ProbeHeartbeat
	}
	return probe(ctx, client.ProbeOptions{
		URL:    "https://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/",
		Window: window,
		Dial:   client.Options{CertificateHash: doc.CertificateSHA256},
	})
}

// due is how many heartbeat groups a window holds.
func due(window time.Duration) int {
	return int(window / client.DefaultHeartbeatInterval)
}

// Gate is FleetRollout.Gate: the process must pass on at least MinShare
// of the heartbeat groups due in Window, the first of them within it.
func (s ServiceProbe) Gate(ctx context.Context, t Target, inst string) error {
	window := s.Window
	if window <= 0 {
		window = 3 * time.Second
	}
	share := s.MinShare
	if share <= 0 {
		share = 0.8
	}
	res, err := s.Hear(ctx, t, inst, window)
	if err != nil {
		return &CheckError{Check: "heartbeat gate", Figure: err.Error(), err: err}
	}
	want := int(float64(due(window)) * share)
	s.logf("%s: %s heartbeat gate: %d groups in %v (want %d), first after %v, lost %d", t.Host, inst, res.Groups, window, want, res.FirstGroup.Round(time.Millisecond), res.Lost)
	if res.Groups < want {
		return &CheckError{Check: "heartbeat gate", Figure: fmt.Sprintf("%d heartbeat groups in %v through it, want at least %d", res.Groups, window, want)}
	}
	return nil
}

// Bake is FleetRollout.Bake: for BakeFor the canary and a process still
// on the old build are heard at once; the canary fails when it loses
// more groups (beyond 1% of those due, and at least 2), hears none, has
// a p99 gap more than 250 ms above the other's, or its unit restarted.
func (s ServiceProbe) Bake(ctx context.Context, t Target, inst string) error {
	if s.BakeFor <= 0 {
		return nil
	}
	pick := s.Baseline
	if pick == nil {
		pick = func(Target, string) (Target, string, bool) { return Target{}, "", false }
	}
	bt, binst, hasBase := pick(t, inst)
	restartsBefore := unitRestarts(ctx, t.Run, inst)
	memBefore := unitMemory(ctx, t.Run, inst)
	var baseMemBefore int64 = -1
	if hasBase {
		baseMemBefore = unitMemory(ctx, bt.Run, binst)
	}
	s.logf("%s: %s bakes for %v beside %s", t.Host, inst, s.BakeFor, baseName(bt, binst, hasBase))
	canaryBefore, cerrBefore := instanceStats(ctx, t.Run, inst)
	var baseBefore wire.Stats
	var berrBefore error = errors.New("no baseline")
	if hasBase {
		baseBefore, berrBefore = instanceStats(ctx, bt.Run, binst)
	}
	var canary, base client.ProbeResult
	var cerr, berr error
	var wg sync.WaitGroup
	wg.Go(func() { canary, cerr = s.Hear(ctx, t, inst, s.BakeFor) })
	if hasBase {
		wg.Go(func() { base, berr = s.Hear(ctx, bt, binst, s.BakeFor) })
	}
	wg.Wait()
	if cerr != nil {
		return &CheckError{Check: "canary bake", Figure: cerr.Error(), err: cerr}
	}
	if berr != nil {
		s.logf("%s: the baseline %s could not be heard (%v): the canary is judged alone", bt.Host, binst, berr)
		hasBase = false
	}
	n := due(s.BakeFor)
	allowed := max(2, n/100)
	figure := fmt.Sprintf("%d of %d heartbeat groups lost, p99 gap %v", canary.Lost, n, canary.P99Gap.Round(time.Millisecond))
	if hasBase {
		allowed += base.Lost
		figure += fmt.Sprintf(" (a process on the old build: %d lost, p99 gap %v)", base.Lost, base.P99Gap.Round(time.Millisecond))
	}
	s.logf("%s: %s bake: %s", t.Host, inst, figure)
	switch {
	case canary.Groups == 0:
		return &CheckError{Check: "canary bake", Figure: fmt.Sprintf("no heartbeat group in %v", s.BakeFor)}
	case canary.Lost > allowed:
		return &CheckError{Check: "canary bake", Figure: figure + fmt.Sprintf(", want at most %d lost", allowed)}
	case hasBase && canary.P99Gap > base.P99Gap+250*time.Millisecond:
		return &CheckError{Check: "canary bake", Figure: figure + ", want a p99 gap within 250ms of the old build's"}
	}
	// What its own listeners got, from its counters: how many sessions
	// ended per listener (a listener that loses its session reconnects)
	// and the share of groups it dropped, against the old build's.
	if cerrBefore == nil {
		if after, err := instanceStats(ctx, t.Run, inst); err == nil {
			// Undrained, it must take sessions from the router, which
			// sends new listeners only to a relay that admits (a full
			// one has taken its share).
			full := after.MaxSessions > 0 && after.Sessions >= after.MaxSessions
			if (!after.Admitting && !full) || after.Draining {
				return &CheckError{Check: "canary bake", Figure: fmt.Sprintf("after its undrain it does not admit new sessions (admitting %v, draining %v): the router sends it no listener", after.Admitting, after.Draining)}
			}
			c := listenerFigures(canaryBefore, after)
			var b listenerFigure
			if berrBefore == nil {
				if bafter, err := instanceStats(ctx, bt.Run, binst); err == nil {
					b = listenerFigures(baseBefore, bafter)
				}
			}
			s.logf("%s: %s bake: its listeners: %s (the old build's: %s)", t.Host, inst, c, b)
			if err := c.worseThan(b); err != nil {
				return &CheckError{Check: "canary bake", Figure: err.Error()}
			}
		}
	}
	if after := unitRestarts(ctx, t.Run, inst); after > restartsBefore {
		return &CheckError{Check: "canary bake", Figure: fmt.Sprintf("the unit restarted %s during the bake", text.Plural(after-restartsBefore, "time", "times"))}
	}
	// Memory: a canary that grows far beyond the old build over the same
	// time (a leak) fails; growth with its listeners is fine.
	if memBefore >= 0 {
		grew := unitMemory(ctx, t.Run, inst) - memBefore
		var baseGrew int64
		if hasBase && baseMemBefore >= 0 {
			baseGrew = max(0, unitMemory(ctx, bt.Run, binst)-baseMemBefore)
		}
		s.logf("%s: %s bake: memory grew %s (the old build's: %s)", t.Host, inst, inventories.Bytes(max(0, grew)).IEC(), inventories.Bytes(baseGrew).IEC())
		if grew > baseGrew+LeakAllowance && grew > 2*baseGrew {
			return &CheckError{Check: "canary bake", Figure: fmt.Sprintf("memory grew %s in %v, the old build's %s: want at most %s more", inventories.Bytes(grew).IEC(), s.BakeFor, inventories.Bytes(baseGrew).IEC(), inventories.Bytes(LeakAllowance).IEC())}
		}
	}
	return nil
}

// instanceStats reads an instance's /stats on its box.
func instanceStats(ctx context.Context, run Runner, inst string) (wire.Stats, error) {
	out, err := run.Run(ctx, onBox(inst, "GET", "/stats", `sed '1,/^\r$/d'`), nil)
	if err != nil {
		return wire.Stats{}, err
	}
	doc, err := wire.ParseStats(out)
	if err != nil {
		return wire.Stats{}, err
	}
	return doc, nil
}

// listenerFigure is what a process's listeners got over a bake, from its
// counters.
type listenerFigure struct {
	listeners float64 // sessions, the mean of before and after
	// endedPerListener is the sessions that ended (the probe's own left
	// out) per listener: each is a listener that had to reconnect, or
	// left.
	endedPerListener float64
	dropped          float64 // groups dropped, as a share of those due
}

func (f listenerFigure) String() string {
	return fmt.Sprintf("%.0f listeners, %.2f sessions ended per listener, %.1f%% of groups dropped", f.listeners, f.endedPerListener, 100*f.dropped)
}

// listenerFigures compares two /stats readings of one process.
func listenerFigures(before, after wire.Stats) listenerFigure {
	f := listenerFigure{listeners: float64(before.Sessions+after.Sessions) / 2}
	ended := (after.SessionsTotal - before.SessionsTotal) - int64(after.Sessions-before.Sessions) - 1 // the heartbeat probe's
	if f.listeners >= 1 && ended > 0 {
		f.endedPerListener = float64(ended) / f.listeners
	}
	out, dropped := after.GroupsOut-before.GroupsOut, after.GroupsDropped-before.GroupsDropped
	if out+dropped > 0 && dropped > 0 {
		f.dropped = float64(dropped) / float64(out+dropped)
	}
	return f
}

// Listener judgement: a canary with at least MinBakeListeners listeners
// fails when, over the bake, its sessions ended more often than the old
// build's by more than MaxExtraEnded per listener, or it dropped a share
// of groups more than MaxExtraDropped above the old build's.
const (
	MinBakeListeners = 10
	MaxExtraEnded    = 0.2
	MaxExtraDropped  = 0.01
)

// worseThan is nil when the canary's listeners fared about as well as the
// old build's (base; zero when unread), else why not.
func (f listenerFigure) worseThan(base listenerFigure) error {
	if f.listeners < MinBakeListeners {
		return nil
	}
	switch {
	case f.endedPerListener > base.endedPerListener+MaxExtraEnded:
		return fmt.Errorf("its listeners: %.2f sessions ended per listener (%.0f listeners), the old build's %.2f: want at most %.2f more", f.endedPerListener, f.listeners, base.endedPerListener, MaxExtraEnded)
	case f.dropped > base.dropped+MaxExtraDropped:
		return fmt.Errorf("its listeners: %.1f%% of groups dropped, the old build's %.1f%%: want at most %.0f points more", 100*f.dropped, 100*base.dropped, 100*MaxExtraDropped)
	}
	return nil
}

// LeakAllowance is how much more than a process on the old build a
// baking canary may grow (cgroup MemoryCurrent) before it counts as a
// leak.
const LeakAllowance = 64 << 20

// unitMemory is systemd's MemoryCurrent of the unit (-1 when unread).
func unitMemory(ctx context.Context, run Runner, unit string) int64 {
	out, err := run.Run(ctx, "systemctl show -p MemoryCurrent --value "+text.ShellQuote(unit), nil)
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func baseName(t Target, inst string, ok bool) string {
	if !ok {
		return "no process on the old build (judged alone)"
	}
	return t.Host.String() + " " + inst + " (old build)"
}

// unitRestarts is systemd's NRestarts of the unit (-1 when unread).
func unitRestarts(ctx context.Context, run Runner, unit string) int {
	out, err := run.Run(ctx, "systemctl show -p NRestarts --value "+text.ShellQuote(unit), nil)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return -1
	}
	return n
}

// OldBuildBaseline picks, for a canary, another relay process of the
// fleet that is not on the new release: the next instance on the canary's
// box, else the first of another box.
func OldBuildBaseline(ctx context.Context, targets []Target) func(t Target, inst string) (Target, string, bool) {
	return func(t Target, inst string) (Target, string, bool) {
		for _, o := range append([]Target{t}, targets...) {
			insts, err := ActiveInstances(ctx, o.Run)
			if err != nil {
				continue
			}
			for _, i := range insts {
				if o.Host.String() == t.Host.String() && i == inst {
					continue
				}
				return o, i, true
			}
		}
		return Target{}, "", false
	}
}
