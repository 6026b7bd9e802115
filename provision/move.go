package provision

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/internal/ctxtime"
	"github.com/relayfleet/relayfleet/relay/wire"
)

// ShedResult is a relay's answer to POST /shed.
type ShedResult struct {
	// Shed is how many sessions it closed with the going-away code.
	Shed int `json:"shed"`
	// Remaining is how many sessions it still holds.
	Remaining int `json:"remaining"`
}

// ErrNoShed is what ShedOnBox returns for a relay build without /shed
// (one from before make-before-break rollouts).
var ErrNoShed = errors.New("the relay has no /shed (an older build)")

// DefaultShedRate is how many sessions a second a process being emptied
// closes: its listeners reconnect through the router at that pace. The
// lab fault test's rollout (240 listeners, 2 boxes, a shared 2-core
// machine) lost 0.25 to 0.7% of the frames at 200 a second (longest
// audible gap 550 to 911 ms over three runs), the reconnects crowding
// each other; at 50 a second 0 to 0.12% (gap 248 to 843 ms), the rollout
// no slower (docs/fault-tests.md).
const DefaultShedRate = 50

// ShedOnBox asks a relay instance, from the box itself, to close n of its
// sessions ("all" or a count) with the going-away close code, at most
// rate a second (listeners first, publishers and cluster links last):
// their clients reconnect through the router to other processes while
// this one still runs.
func ShedOnBox(ctx context.Context, run Runner, instance, n string, rate int) (ShedResult, error) {
	if n != "all" {
		if k, err := strconv.Atoi(n); err != nil || k < 0 {
			return ShedResult{}, fmt.Errorf("shed %s: n %q: want all or a count", instance, n)
		}
	}
	if rate <= 0 {
		rate = DefaultShedRate
	}
	out, err := run.Run(ctx, onBox(instance, "POST", fmt.Sprintf("/shed?n=%s&rate=%d", n, rate), "cat"), nil)
	if err != nil {
		return ShedResult{}, fmt.Errorf("shed %s: %w", instance, err)
	}
	head, body, _ := strings.Cut(strings.ReplaceAll(string(out), "\r\n", "\n"), "\n\n")
	status, _, _ := strings.Cut(head, "\n")
	switch {
	case strings.Contains(status, " 200 "):
	case strings.Contains(status, " 404 ") || strings.Contains(status, " 405 "):
		return ShedResult{}, ErrNoShed
	default:
		return ShedResult{}, fmt.Errorf("shed %s: relay answered %q", instance, strings.TrimSpace(status))
	}
	var r ShedResult
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return ShedResult{}, fmt.Errorf("shed %s: answer %q: %w", instance, strings.TrimSpace(body), err)
	}
	return r, nil
}

// InstanceSessions reads the sessions a relay instance holds from its
// /stats, asked from the box.
func InstanceSessions(ctx context.Context, run Runner, instance string) (int64, error) {
	p := processStatus(ctx, run, instance)
	if p.Error != "" {
		return 0, fmt.Errorf("%s: %s", instance, p.Error)
	}
	return p.Sessions, nil
}

// Move empties one relay process before it restarts, make before break:
// mark it draining (it refuses new sessions and reports no headroom),
// wait until no router routes new listeners to it, tell its sessions to
// go (the going-away close, at ShedRate a second) and wait until they
// have, so its listeners are already on other processes when it stops.
// Nil functions use the relay's own endpoints on the box through Run.
type Move struct {
	Run Runner
	// Drain marks the instance draining (DrainOnBox).
	Drain func(ctx context.Context, instance string) error
	// Routed reports whether any router still routes new listeners to the
	// instance, and whether any router knows it at all. Nil, or no router
	// that knows it: Move waits BlindWait instead.
	Routed func(ctx context.Context, instance string) (routed, known bool, err error)
	// Shed closes the instance's sessions (ShedOnBox).
	Shed func(ctx context.Context, instance, n string, rate int) (ShedResult, error)
	// Sessions reads the sessions it holds (InstanceSessions).
	Sessions func(ctx context.Context, instance string) (int64, error)
	// RouterWait bounds the wait for the routers (default 10 s); past it
	// the shed goes ahead (a draining relay refuses whom a router sends).
	RouterWait time.Duration
	// BlindWait is the wait without a router to ask: two of its poll
	// intervals (default 2 s).
	BlindWait time.Duration
	// ShedRate is the sessions closed a second (DefaultShedRate).
	ShedRate int
	// EmptyWait bounds the wait for the sessions to leave (default 30 s).
	EmptyWait time.Duration
	// Poll is how often Routed and Sessions are asked (default 100 ms).
	Poll time.Duration
	// Log, when set, gets one line per step.
	Log func(format string, args ...any)
}

// MoveReport is what Out did.
type MoveReport struct {
	// Sessions is what the instance held when the shed began.
	Sessions int64
	// Shed is how many sessions it closed; Left how many it still held
	// when Out returned.
	Shed int
	Left int64
	// RouterWait is how long the routers took to stop routing to it.
	RouterWait time.Duration
	// NoShed: the running build has no /shed; it was only drained.
	NoShed bool
}

func (m Move) logf(format string, args ...any) {
	if m.Log != nil {
		m.Log(format, args...)
	}
}

func (m Move) durations() (routerWait, blind, empty, poll time.Duration) {
	routerWait, blind, empty, poll = m.RouterWait, m.BlindWait, m.EmptyWait, m.Poll
	if routerWait <= 0 {
		routerWait = 10 * time.Second
	}
	if blind <= 0 {
		blind = 2 * time.Second
	}
	if empty <= 0 {
		empty = 30 * time.Second
	}
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	return
}

// Out drains, waits for the routers, sheds and waits for the sessions to
// leave. It fails only when the instance cannot be drained or shed; a
// router that keeps routing or sessions that stay past their bound are
// logged and the move goes on (the restart ends them).
func (m Move) Out(ctx context.Context, instance string) (MoveReport, error) {
	var rep MoveReport
	routerWait, blind, empty, poll := m.durations()
	drain, shed, sessions := m.Drain, m.Shed, m.Sessions
	if drain == nil {
		drain = func(ctx context.Context, inst string) error { return DrainOnBox(ctx, m.Run, inst, true) }
	}
	if shed == nil {
		shed = func(ctx context.Context, inst, n string, rate int) (ShedResult, error) {
			return ShedOnBox(ctx, m.Run, inst, n, rate)
		}
	}
	if sessions == nil {
		sessions = func(ctx context.Context, inst string) (int64, error) { return InstanceSessions(ctx, m.Run, inst) }
	}
	if err := drain(ctx, instance); err != nil {
		return rep, err
	}
	start := time.Now()
	if err := m.waitUnrouted(ctx, instance, routerWait, blind, poll); err != nil {
		return rep, err
	}
	rep.RouterWait = time.Since(start)
	n, err := sessions(ctx, instance)
	if err != nil {
		return rep, err
	}
	rep.Sessions = n
	res, err := shed(ctx, instance, "all", m.ShedRate)
	if errors.Is(err, ErrNoShed) {
		rep.NoShed, rep.Left = true, n
		m.logf("%s: %v; restarting it with its %d sessions", instance, err, n)
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	rep.Shed = res.Shed
	deadline := time.Now().Add(empty)
	for {
		left, err := sessions(ctx, instance)
		if err == nil {
			rep.Left = left
			if left == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			m.logf("%s: %d sessions still there %v after the shed; restarting anyway", instance, rep.Left, empty)
			break
		}
		if err := ctxtime.Sleep(ctx, poll); err != nil {
			return rep, err
		}
	}
	m.logf("%s: routers stopped routing to it after %.1fs; %d of %d sessions moved, %d left", instance, rep.RouterWait.Seconds(), rep.Shed, rep.Sessions, rep.Left)
	return rep, nil
}

// waitUnrouted waits until no router routes new listeners to instance, at
// most routerWait; without a router that knows it, blind.
func (m Move) waitUnrouted(ctx context.Context, instance string, routerWait, blind, poll time.Duration) error {
	if m.Routed == nil {
		return ctxtime.Sleep(ctx, blind)
	}
	deadline := time.Now().Add(routerWait)
	for {
		routed, known, err := m.Routed(ctx, instance)
		switch {
		case err == nil && !known:
			return ctxtime.Sleep(ctx, blind)
		case err == nil && !routed:
			return nil
		}
		if time.Now().After(deadline) {
			why := "still routes to it"
			if err != nil {
				why = err.Error()
			}
			m.logf("%s: router: %s after %v; shedding anyway (it refuses new sessions)", instance, why, routerWait)
			return nil
		}
		if err := ctxtime.Sleep(ctx, poll); err != nil {
			return err
		}
	}
}

// RouterRoutes asks a router's GET /relays whether it would route new
// listeners to the relay process on host at port: it is listed, healthy,
// not draining and has headroom. known is false when the router lists no
// relay on host:port.
func RouterRoutes(ctx context.Context, hc *http.Client, router, host string, port int) (routed, known bool, err error) {
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	u := strings.TrimSuffix(router, "/") + "/relays"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, false, fmt.Errorf("router %s: %w", router, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, false, fmt.Errorf("router %s: %w", router, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, false, fmt.Errorf("router %s: /relays answered %s", router, resp.Status)
	}
	var doc wire.RelaysState
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&doc); err != nil {
		return false, false, fmt.Errorf("router %s: /relays: %w", router, err)
	}
	for _, r := range doc.Relays {
		ru, err := url.Parse(r.URL)
		if err != nil || !sameHost(ru.Hostname(), host) || ru.Port() != strconv.Itoa(port) {
			continue
		}
		known = true
		if r.Healthy && !r.Draining && r.Headroom > 0 {
			routed = true
		}
	}
	return routed, known, nil
}

func sameHost(a, b string) bool {
	if ia, ib := net.ParseIP(a), net.ParseIP(b); ia != nil && ib != nil {
		return ia.Equal(ib)
	}
	return strings.EqualFold(a, b)
}

// InstancePort is the port in a relay@PORT.service name.
func InstancePort(instance string) (int, error) {
	s := strings.TrimSuffix(strings.TrimPrefix(instance, "relay@"), ".service")
	p, err := strconv.Atoi(s)
	if err != nil || p <= 0 || p > 65535 {
		return 0, fmt.Errorf("instance %q: no port in its name", instance)
	}
	return p, nil
}

// ProcLoad is one relay process's sessions.
type ProcLoad struct {
	Box      string `json:"box"`
	Unit     string `json:"unit"`
	Sessions int64  `json:"sessions"`
}

// ShedPlan is how many sessions one process sheds to rebalance.
type ShedPlan struct {
	ProcLoad
	Shed int64 `json:"shed"`
}

// PlanRebalance finds the processes holding more than the fleet's mean
// by more than tolerance (0.2: 20%) and how many sessions each sheds to
// come down to the mean.
func PlanRebalance(procs []ProcLoad, tolerance float64) (mean float64, plans []ShedPlan) {
	if len(procs) == 0 {
		return 0, nil
	}
	var total int64
	for _, p := range procs {
		total += p.Sessions
	}
	mean = float64(total) / float64(len(procs))
	for _, p := range procs {
		if float64(p.Sessions) > mean*(1+tolerance) {
			if n := p.Sessions - int64(math.Round(mean)); n > 0 {
				plans = append(plans, ShedPlan{ProcLoad: p, Shed: n})
			}
		}
	}
	sort.Slice(plans, func(i, j int) bool { return plans[i].Shed > plans[j].Shed })
	return mean, plans
}

// Balanced reports whether every process holds at most the mean by
// tolerance more.
func Balanced(procs []ProcLoad, tolerance float64) bool {
	_, plans := PlanRebalance(procs, tolerance)
	return len(plans) == 0
}

// Box is a box to read and rebalance: its name and how to run on it.
type Box struct {
	Name string
	Run  Runner
}

// FleetLoad reads the sessions of every active relay process on the boxes.
func FleetLoad(ctx context.Context, boxes []Box) ([]ProcLoad, error) {
	var out []ProcLoad
	for _, b := range boxes {
		insts, err := ActiveInstances(ctx, b.Run)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.Name, err)
		}
		for _, inst := range insts {
			n, err := InstanceSessions(ctx, b.Run, inst)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", b.Name, err)
			}
			out = append(out, ProcLoad{Box: b.Name, Unit: inst, Sessions: n})
		}
	}
	return out, nil
}

// Rebalance evens out the fleet after a rollout: each process holding
// more than the mean by more than tolerance sheds what it holds above the
// mean, rate sessions a second (a gentle pace: those listeners reconnect
// through the router, which sends them where the headroom is). It then
// waits for the fleet to come within tolerance of its mean; listeners
// that move on their own meanwhile (a silent path, a crash) can leave it
// off again, so while it is not, it plans and sheds again, each pass given
// five seconds to settle, until wait is spent. It returns the load
// before and after; a fleet still unbalanced after wait is not an error
// (the caller shows the figures).
func Rebalance(ctx context.Context, boxes []Box, tolerance float64, rate int, wait, poll time.Duration) (before, after []ProcLoad, err error) {
	before, err = FleetLoad(ctx, boxes)
	if err != nil {
		return nil, nil, err
	}
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	run := map[string]Runner{}
	for _, b := range boxes {
		run[b.Name] = b.Run
	}
	deadline := time.Now().Add(wait)
	after = before
	for {
		_, plans := PlanRebalance(after, tolerance)
		if len(plans) == 0 {
			return before, after, nil
		}
		errs := make([]error, len(plans))
		var wg sync.WaitGroup
		for i, p := range plans {
			wg.Go(func() {
				_, errs[i] = ShedOnBox(ctx, run[p.Box], p.Unit, strconv.FormatInt(p.Shed, 10), rate)
				if errs[i] != nil {
					errs[i] = fmt.Errorf("%s: %w", p.Box, errs[i])
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return before, after, err
		}
		settle := time.Now().Add(rebalanceSettle)
		for {
			after, err = FleetLoad(ctx, boxes)
			switch {
			case err == nil && Balanced(after, tolerance):
				return before, after, nil
			case time.Now().After(deadline):
				return before, after, err
			}
			if err == nil && time.Now().After(settle) {
				break // plan again from what the fleet holds now
			}
			if err := ctxtime.Sleep(ctx, poll); err != nil {
				return before, after, err
			}
		}
	}
}

// rebalanceSettle is how long one rebalancing pass waits for the shed
// listeners to land before it plans again.
var rebalanceSettle = 5 * time.Second

// BurstDrain empties an event's boxes, make before break: every relay
// process on them is marked draining first (the caller has already marked
// them draining in the router's list), then, after wait (two router polls:
// the router reloads its list and polls within one), each is told to send
// its sessions away (going-away close, rate a second), so its listeners
// reconnect through the router to the boxes that stay while these still
// run. It does not wait for them to leave: the caller counts what is left
// until its drain deadline. A relay build without /shed is only drained.
func BurstDrain(ctx context.Context, boxes []Box, wait time.Duration, rate int) error {
	type proc struct {
		box  Box
		inst string
	}
	var procs []proc
	for _, b := range boxes {
		insts, err := ActiveInstances(ctx, b.Run)
		if err != nil {
			return fmt.Errorf("%s: %w", b.Name, err)
		}
		for _, inst := range insts {
			if err := DrainOnBox(ctx, b.Run, inst, true); err != nil {
				return fmt.Errorf("%s: %w", b.Name, err)
			}
			procs = append(procs, proc{b, inst})
		}
	}
	if len(procs) == 0 {
		return nil
	}
	if err := ctxtime.Sleep(ctx, wait); err != nil {
		return err
	}
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() {
			if _, err := ShedOnBox(ctx, p.box.Run, p.inst, "all", rate); err != nil && !errors.Is(err, ErrNoShed) {
				errs[i] = fmt.Errorf("%s: %w", p.box.Name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// BoxHeadroom sums what the relay processes on a box still admit: each
// one's /stats headroom (0 while it is draining or its admission control
// refuses), the figure every router polls and routes by.
func BoxHeadroom(ctx context.Context, run Runner) (int64, error) {
	insts, err := ActiveInstances(ctx, run)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, inst := range insts {
		p := processStatus(ctx, run, inst)
		if p.Error != "" {
			return 0, fmt.Errorf("%s: %s", inst, p.Error)
		}
		if !p.Draining {
			total += int64(p.Headroom)
		}
	}
	return total, nil
}

// ShedListeners tells at most n listeners on the boxes' relay processes
// to move (the going-away close), one process after another at rate a
// second in all: each process sheds what it holds until n are told. It
// returns how many were; the processes stay as they are (not draining).
func ShedListeners(ctx context.Context, boxes []Box, n int64, rate int) (int64, error) {
	var shed int64
	for _, b := range boxes {
		if shed >= n {
			break
		}
		insts, err := ActiveInstances(ctx, b.Run)
		if err != nil {
			return shed, fmt.Errorf("%s: %w", b.Name, err)
		}
		for _, inst := range insts {
			if shed >= n {
				break
			}
			p := processStatus(ctx, b.Run, inst)
			if p.Error != "" {
				return shed, fmt.Errorf("%s: %s: %s", b.Name, inst, p.Error)
			}
			k := min(n-shed, p.Listeners)
			if k <= 0 {
				continue
			}
			res, err := ShedOnBox(ctx, b.Run, inst, strconv.FormatInt(k, 10), rate)
			if err != nil {
				return shed, fmt.Errorf("%s: %w", b.Name, err)
			}
			shed += int64(res.Shed)
		}
	}
	return shed, nil
}
