// Package lease is a fleet's one lock: a lease kept in the fleet's
// Pulumi backend (a file:// directory or an s3:// bucket), beside
// Pulumi's own .pulumi/, taken by every fleet command that changes the
// fleet (up, destroy, converge, rollout, auth rotate, events reconcile,
// burst).
//
// A lease is a sequence of takes: take/N is created only if it does not
// exist (the one atomic step the stores give: a hard link on a file
// backend, a conditional write, If-None-Match: *, on S3), and the
// highest N is the lease. N is the fence token: the holder of N checks,
// before every write to the shared state, that take/N is still the
// highest, so a holder that was taken over writes nothing. The holder
// renews by rewriting renew/N (only it writes that key) every third of
// the TTL; a renewal that keeps failing cancels the holder's context
// when two thirds of the TTL have passed since the last good one, so it
// stops before another may take the lease. Another command takes the
// lease only once it is released or expired, by the clock; never
// because a machine id matches. Clocks must agree to well within a third
// of the TTL.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/relayfleet/relayfleet/internal/bucketurl"
)

// Prefix is where leases live in the backend's bucket: one folder per
// fleet.
const Prefix = ".relayfleet/leases/"

// DefaultTTL is how long a lease lives without a renewal.
const DefaultTTL = 3 * time.Minute

// Holder says who holds a lease.
type Holder struct {
	Host    string    `json:"host"`
	User    string    `json:"user"`
	Command string    `json:"command"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	// Run tells two holders with the same host and pid apart.
	Run string `json:"run"`
}

// Self is this process as a holder running command.
func Self(command string) Holder {
	host, _ := os.Hostname()
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	b := make([]byte, 6)
	rand.Read(b)
	return Holder{Host: host, User: name, Command: command, PID: os.Getpid(), Started: time.Now().UTC().Truncate(time.Second), Run: hex.EncodeToString(b)}
}

func (h Holder) String() string {
	return fmt.Sprintf("%q by %s@%s (pid %d) since %s", h.Command, h.User, h.Host, h.PID, h.Started.UTC().Format(time.RFC3339))
}

// State is a fleet's lease as read from the backend.
type State struct {
	// Token is the fence token of the last take; 0: never taken.
	Token    uint64    `json:"token"`
	Holder   Holder    `json:"holder"`
	Expires  time.Time `json:"expires"`
	Released bool      `json:"released,omitempty"`
}

// Free reports whether the lease may be taken at now.
func (s State) Free(now time.Time) bool {
	return s.Token == 0 || s.Released || !now.Before(s.Expires)
}

// renewal is renew/N: the holder's latest expiry, or its release.
type renewal struct {
	Expires  time.Time `json:"expires"`
	Released bool      `json:"released,omitempty"`
}

// ErrHeld is what HeldError is (errors.Is): another command holds the
// lease.
var ErrHeld = errors.New("the fleet is locked")

// HeldError names the holder of a lease that could not be taken.
type HeldError struct {
	Fleet string
	State State
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("fleet %s is locked by %s, lease until %s: wait for it (--wait DURATION), or if that command is dead run fleet unlock",
		e.Fleet, e.State.Holder, e.State.Expires.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// ErrLost is the cause of a held context's end when the lease was lost:
// its renewal kept failing, or another took it over.
var ErrLost = errors.New("the fleet's lease was lost")

// errReleased ends a held context after Release.
var errReleased = errors.New("lease released")

// Lease is one fleet's lease in a backend.
type Lease struct {
	Fleet string
	// TTL is the life of a lease without renewal (DefaultTTL).
	TTL time.Duration
	// Clock is the wall clock (time.Now).
	Clock func() time.Time
	// Poll is how often a waiting take looks again (2s).
	Poll time.Duration
	// Waiting, when set, is told once that a take waits, and for whom.
	Waiting func(State)

	objs  objects
	where string
}

// Open opens fleet's lease in the DIY Pulumi backend at backendURL.
func Open(ctx context.Context, backendURL, fleet string) (*Lease, error) {
	objs, where, err := openObjects(ctx, backendURL)
	if err != nil {
		return nil, err
	}
	return &Lease{Fleet: fleet, objs: objs, where: where}, nil
}

// Close closes the backend.
func (l *Lease) Close() error { return l.objs.close() }

func (l *Lease) now() time.Time {
	if l.Clock != nil {
		return l.Clock()
	}
	return time.Now()
}

func (l *Lease) ttl() time.Duration {
	if l.TTL > 0 {
		return l.TTL
	}
	return DefaultTTL
}

func (l *Lease) key(kind string, token uint64) string {
	return fmt.Sprintf("%s%s/%s/%020d", Prefix, l.Fleet, kind, token)
}

// top is the highest take's token (0: none).
func (l *Lease) top(ctx context.Context) (uint64, error) {
	keys, err := l.objs.list(ctx, Prefix+l.Fleet+"/take/")
	if err != nil {
		return 0, l.errorf("list: %w", err)
	}
	var top uint64
	for _, k := range keys {
		if n, err := strconv.ParseUint(path.Base(k), 10, 64); err == nil && n > top {
			top = n
		}
	}
	return top, nil
}

func (l *Lease) errorf(format string, a ...any) error {
	err := fmt.Errorf(format, a...)
	return &StoreError{msg: fmt.Sprintf("fleet %s lease in %s: %v", l.Fleet, l.where, err), err: err}
}

// StoreError is a read or write of the lease's store that failed; its
// text names the fleet and the store (the backend URL, without its
// query). errors.Is(err, ErrUnreachable) tells a store that did not
// answer.
type StoreError struct {
	msg string
	err error
}

func (e *StoreError) Error() string { return e.msg }
func (e *StoreError) Unwrap() error { return e.err }

// ErrUnreachable is what a StoreError of a store that did not answer is
// (errors.Is); its text is the network error alone.
var ErrUnreachable = bucketurl.ErrUnreachable

// Read returns the lease as the backend holds it now.
func (l *Lease) Read(ctx context.Context) (State, error) {
	top, err := l.top(ctx)
	if err != nil || top == 0 {
		return State{}, err
	}
	data, err := l.objs.get(ctx, l.key("take", top))
	if err != nil {
		return State{}, l.errorf("read take %d: %w", top, err)
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return State{}, l.errorf("take %d: %v", top, err)
	}
	st.Token = top
	data, err = l.objs.get(ctx, l.key("renew", top))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return State{}, l.errorf("read renewal %d: %w", top, err)
	default:
		var r renewal
		if err := json.Unmarshal(data, &r); err != nil {
			return State{}, l.errorf("renewal %d: %v", top, err)
		}
		st.Expires, st.Released = r.Expires, r.Released
	}
	return st, nil
}

// take creates take/N+1 for st's N: false when another was faster.
func (l *Lease) take(ctx context.Context, prev State, next State) (bool, error) {
	data, err := json.Marshal(next)
	if err != nil {
		return false, err
	}
	err = l.objs.create(ctx, l.key("take", next.Token), data)
	if errors.Is(err, errExists) {
		return false, nil
	}
	if err != nil {
		return false, l.errorf("take %d: %w", next.Token, err)
	}
	// The takes before the previous one are history.
	if keys, err := l.objs.list(ctx, Prefix+l.Fleet+"/"); err == nil {
		for _, k := range keys {
			if n, err := strconv.ParseUint(path.Base(k), 10, 64); err == nil && n < prev.Token {
				l.objs.remove(ctx, k)
			}
		}
	}
	return true, nil
}

// Take takes the lease for h, waiting up to wait for a live holder to
// release it or let it expire; then it fails with a *HeldError naming
// the holder. The returned Held renews the lease until Release.
func (l *Lease) Take(ctx context.Context, h Holder, wait time.Duration) (*Held, error) {
	deadline := time.Now().Add(wait)
	told := false
	for {
		st, err := l.Read(ctx)
		if err != nil {
			return nil, err
		}
		now := l.now()
		if st.Free(now) {
			next := State{Token: st.Token + 1, Holder: h, Expires: now.Add(l.ttl()).UTC()}
			ok, err := l.take(ctx, st, next)
			if err != nil {
				return nil, err
			}
			if ok {
				return l.hold(ctx, next, now), nil
			}
			continue // another took it first: read who
		}
		if !time.Now().Before(deadline) {
			return nil, &HeldError{Fleet: l.Fleet, State: st}
		}
		if !told && l.Waiting != nil {
			l.Waiting(st)
			told = true
		}
		poll := l.Poll
		if poll <= 0 {
			poll = 2 * time.Second
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(poll, time.Until(deadline)+time.Millisecond)):
		}
	}
}

// Held is a lease this process holds.
type Held struct {
	l     *Lease
	state State

	ctx    context.Context
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	good   time.Time // the start of the last good renewal (or the take)
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

func (l *Lease) hold(ctx context.Context, st State, at time.Time) *Held {
	h := &Held{l: l, state: st, good: at, stop: make(chan struct{}), done: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancelCause(ctx)
	go h.renewLoop()
	return h
}

// Context ends when the lease is lost (context.Cause: ErrLost), released,
// or the parent ends. Every step taken under the lease runs in it.
func (h *Held) Context() context.Context { return h.ctx }

// Token is the fence token of this hold.
func (h *Held) Token() uint64 { return h.state.Token }

// Lost is the reason the lease was lost (wrapping ErrLost), or nil.
func (h *Held) Lost() error {
	if c := context.Cause(h.ctx); errors.Is(c, ErrLost) {
		return c
	}
	return nil
}

func (h *Held) renewLoop() {
	defer close(h.done)
	ttl := h.l.ttl()
	retry := max(ttl/30, 100*time.Millisecond)
	next := ttl / 3
	var lastErr error
	for {
		select {
		case <-h.stop:
			return
		case <-h.ctx.Done():
			return
		case <-time.After(next):
		}
		h.mu.Lock()
		good := h.good
		h.mu.Unlock()
		// Stop with a third of the TTL to spare: the lease is still
		// ours until it expires, so no one else runs before we stopped.
		// No attempt outlasts that moment: a store that hangs (or
		// retries a refused connection) must not keep a holder that
		// cannot renew running past it.
		stopAt := good.Add(ttl * 2 / 3)
		start := h.l.now()
		err := lastErr
		if limit := min(ttl/3, stopAt.Sub(start)); limit > 0 {
			actx, cancel := context.WithTimeout(h.ctx, limit)
			err = h.renew(actx)
			cancel()
		}
		if errors.Is(err, ErrLost) {
			h.cancel(err)
			return
		}
		if err == nil {
			h.mu.Lock()
			h.good, next, lastErr = start, ttl/3, nil
			h.mu.Unlock()
			continue
		}
		lastErr = err
		now := h.l.now()
		if !now.Before(stopAt) {
			h.cancel(fmt.Errorf("%w: renewals failed for %s (%w); stopping before it expires", ErrLost, now.Sub(good).Round(time.Second), lastErr))
			return
		}
		next = min(retry, stopAt.Sub(now))
	}
}

// renew rewrites renew/N after checking the fence.
func (h *Held) renew(ctx context.Context) error {
	if err := h.fence(ctx); err != nil {
		return err
	}
	data, _ := json.Marshal(renewal{Expires: h.l.now().Add(h.l.ttl()).UTC()})
	if err := h.l.objs.put(ctx, h.l.key("renew", h.state.Token), data); err != nil {
		return h.l.errorf("renew: %w", err)
	}
	return nil
}

// fence checks that take/N is still the highest.
func (h *Held) fence(ctx context.Context) error {
	top, err := h.l.top(ctx)
	if err != nil {
		return err
	}
	if top != h.state.Token {
		who := ""
		if st, err := h.l.Read(ctx); err == nil {
			who = ", now " + st.Holder.String()
		}
		return fmt.Errorf("%w: fence token %d was superseded by %d%s", ErrLost, h.state.Token, top, who)
	}
	return nil
}

// Check is the fence: it returns nil only while this hold is the fleet's
// lease (not lost, not expired by this clock, its take still the
// highest in the backend). Call it before every write to the shared
// state.
func (h *Held) Check(ctx context.Context) error {
	if err := h.Lost(); err != nil {
		return err
	}
	if errors.Is(context.Cause(h.ctx), errReleased) {
		return fmt.Errorf("%w: released", ErrLost)
	}
	h.mu.Lock()
	good := h.good
	h.mu.Unlock()
	if !h.l.now().Before(good.Add(h.l.ttl())) {
		err := fmt.Errorf("%w: not renewed since %s", ErrLost, good.UTC().Format(time.RFC3339))
		h.cancel(err)
		return err
	}
	if err := h.fence(ctx); err != nil {
		if errors.Is(err, ErrLost) {
			h.cancel(err)
		}
		return err
	}
	return nil
}

// Release gives the lease back (when it is still ours) and ends the
// held context.
func (h *Held) Release() {
	h.once.Do(func() {
		close(h.stop)
		<-h.done
		ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), 30*time.Second)
		defer cancel()
		if h.fence(ctx) == nil {
			data, _ := json.Marshal(renewal{Expires: h.l.now().UTC(), Released: true})
			h.l.objs.put(ctx, h.l.key("renew", h.state.Token), data)
		}
		h.cancel(errReleased)
	})
}

// Alive reports whether a holder may still run, seen from this host: a
// holder on this host runs while its pid does; one on another host is
// taken as running while its lease is live.
func Alive(st State, now time.Time) (bool, string) {
	host, _ := os.Hostname()
	if st.Free(now) {
		return false, "its lease ended"
	}
	if st.Holder.Host == host && st.Holder.PID > 0 {
		if st.Holder.PID != os.Getpid() && !pidRuns(st.Holder.PID) {
			return false, fmt.Sprintf("pid %d is gone", st.Holder.PID)
		}
		return true, fmt.Sprintf("pid %d still runs on this host", st.Holder.PID)
	}
	return true, fmt.Sprintf("it runs on another host and its lease is live until %s", st.Expires.UTC().Format(time.RFC3339))
}

// ErrAlive refuses an unlock whose holder may still run.
var ErrAlive = errors.New("the holder may still run")

// Clear ends a dead holder's lease (fleet unlock): it takes the next
// token, released at once, so the dead holder's fence fails should it
// wake. It refuses, naming the holder, when Alive says it may run. It
// returns the lease as it was.
func (l *Lease) Clear(ctx context.Context, by Holder) (State, error) {
	for {
		st, err := l.Read(ctx)
		if err != nil {
			return st, err
		}
		now := l.now()
		if alive, why := Alive(st, now); alive {
			return st, fmt.Errorf("%w: fleet %s is locked by %s: %s; not unlocked", ErrAlive, l.Fleet, st.Holder, why)
		}
		if st.Token == 0 || st.Released {
			return st, nil
		}
		next := State{Token: st.Token + 1, Holder: by, Expires: now.UTC(), Released: true}
		ok, err := l.take(ctx, st, next)
		if err != nil {
			return st, err
		}
		if ok {
			data, _ := json.Marshal(renewal{Expires: now.UTC(), Released: true})
			return st, l.objs.put(ctx, l.key("renew", next.Token), data)
		}
	}
}

// PulumiLock is a lock file the DIY Pulumi backend keeps while a run
// changes a stack (.pulumi/locks/organization/PROJECT/STACK/ID.json).
type PulumiLock struct {
	Key       string    `json:"-"`
	Stack     string    `json:"-"`
	PID       int       `json:"pid"`
	Username  string    `json:"username"`
	Hostname  string    `json:"hostname"`
	Timestamp time.Time `json:"timestamp"`
}

// PulumiLocks lists the Pulumi stack locks of fleet's stacks: the stack
// named after the fleet and those named FLEET-SOMETHING (its events'
// stacks, records), in every project.
func (l *Lease) PulumiLocks(ctx context.Context) ([]PulumiLock, error) {
	keys, err := l.objs.list(ctx, ".pulumi/locks/")
	if err != nil {
		return nil, l.errorf("list Pulumi locks: %w", err)
	}
	var out []PulumiLock
	for _, k := range keys {
		if !strings.HasSuffix(k, ".json") {
			continue
		}
		stack := path.Base(path.Dir(k))
		if stack != l.Fleet && !strings.HasPrefix(stack, l.Fleet+"-") {
			continue
		}
		data, err := l.objs.get(ctx, k)
		if err != nil {
			continue
		}
		pl := PulumiLock{Key: k, Stack: strings.TrimPrefix(path.Dir(k), ".pulumi/locks/")}
		json.Unmarshal(data, &pl)
		out = append(out, pl)
	}
	return out, nil
}

// RemovePulumiLock removes one stack lock.
func (l *Lease) RemovePulumiLock(ctx context.Context, pl PulumiLock) error {
	if err := l.objs.remove(ctx, pl.Key); err != nil {
		return l.errorf("remove Pulumi lock %s: %w", pl.Key, err)
	}
	return nil
}

// Unlock is fleet unlock: it clears the fleet's lease when its holder is
// dead (Clear), then the Pulumi stack locks of the fleet's stacks that
// no live run holds: on this host those whose pid is gone, from another
// host those older than the lease's TTL (every fleet command that runs
// Pulumi holds the fleet's lease, which is free now). What it did goes
// to w, one line a step.
func (l *Lease) Unlock(ctx context.Context, w io.Writer, by Holder) error {
	st, err := l.Clear(ctx, by)
	if err != nil {
		return err
	}
	now := l.now()
	if st.Token != 0 && !st.Released {
		fmt.Fprintf(w, "cleared fleet %s's lease (token %d) held by %s\n", l.Fleet, st.Token, st.Holder)
	} else {
		fmt.Fprintf(w, "fleet %s's lease is free\n", l.Fleet)
	}
	locks, err := l.PulumiLocks(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, pl := range locks {
		if !deadLock(pl, now, l.ttl()) {
			errs = append(errs, fmt.Errorf("%w: Pulumi lock on stack %s held by %s@%s pid %d since %s; not removed", ErrAlive, pl.Stack, pl.Username, pl.Hostname, pl.PID, pl.Timestamp.UTC().Format(time.RFC3339)))
			continue
		}
		if err := l.RemovePulumiLock(ctx, pl); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(w, "removed Pulumi lock on stack %s left by %s@%s pid %d since %s\n", pl.Stack, pl.Username, pl.Hostname, pl.PID, pl.Timestamp.UTC().Format(time.RFC3339))
	}
	return errors.Join(errs...)
}

// pidRuns reports whether process pid of this host runs: it exists and
// is not a zombie (killed, not yet reaped).
func pidRuns(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	// pid (comm) STATE ...: comm may hold spaces and parens.
	if i := strings.LastIndexByte(string(data), ')'); i >= 0 {
		if f := strings.Fields(string(data[i+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			return false
		}
	}
	return true
}

// deadLock reports whether a Pulumi stack lock's run is dead: on this
// host its pid is gone; from another host it is older than maxAge (a
// fleet command renews its lease, never the stack lock, so a live one
// from another host holds the fleet's lease, which the caller holds).
func deadLock(pl PulumiLock, now time.Time, maxAge time.Duration) bool {
	host, _ := os.Hostname()
	if pl.Hostname == host {
		return pl.PID > 0 && pl.PID != os.Getpid() && !pidRuns(pl.PID)
	}
	return now.Sub(pl.Timestamp) > maxAge
}

// ClearDeadStackLocks removes the locks of one stack (PROJECT/STACK) in
// the DIY backend at backendURL whose run is dead, and refuses, naming
// it, a lock whose run may be live. It replaces pulumi cancel, which
// deletes every lock of the stack, a live run's too. Call it only under
// the fleet's lease.
func ClearDeadStackLocks(ctx context.Context, backendURL, project, stack string, maxAge time.Duration) (int, error) {
	objs, where, err := openObjects(ctx, backendURL)
	if err != nil {
		return 0, err
	}
	defer objs.close()
	l := &Lease{Fleet: stack, objs: objs, where: where}
	locks, err := l.PulumiLocks(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	now := time.Now()
	for _, pl := range locks {
		if path.Base(pl.Stack) != stack || (project != "" && path.Base(path.Dir(pl.Stack)) != project && path.Dir(pl.Stack) != ".") {
			continue
		}
		if !deadLock(pl, now, maxAge) {
			return n, fmt.Errorf("%w: stack %s is locked by a Pulumi run that may be live (%s@%s pid %d since %s); not cleared", ErrAlive, pl.Stack, pl.Username, pl.Hostname, pl.PID, pl.Timestamp.UTC().Format(time.RFC3339))
		}
		if err := l.RemovePulumiLock(ctx, pl); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
