package lease

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "gocloud.dev/blob/memblob"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// backends are the two ways a lease reaches its store: the file system
// (file://) and gocloud.dev/blob (s3://; mem:// here), and a real S3
// store when RELAYFLEET_TEST_S3_URL names a bucket
// (s3://BUCKET?endpoint=...&s3ForcePathStyle=true&region=..., the AWS
// variables its credentials).
func backends(t *testing.T) map[string]string {
	b := map[string]string{"file": "file://" + t.TempDir(), "blob": "mem://"}
	if u := os.Getenv("RELAYFLEET_TEST_S3_URL"); u != "" {
		b["s3"] = u
	}
	return b
}

func open(t *testing.T, url string) *Lease {
	t.Helper()
	fleet := "f1"
	if strings.HasPrefix(url, "s3:") {
		fleet = "f1-" + strconv.FormatInt(time.Now().UnixNano(), 36) // a bucket kept between runs
	}
	l, err := Open(context.Background(), url, fleet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// other is a holder on another host.
func other(cmd string) Holder {
	return Holder{Host: "elsewhere", User: "bob", Command: cmd, PID: 4242, Started: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), Run: "x"}
}

func TestTakeRefusesNamingHolder(t *testing.T) {
	for name, url := range backends(t) {
		t.Run(name, func(t *testing.T) {
			a := open(t, url)
			b := &Lease{Fleet: a.Fleet, objs: a.objs, where: a.where}
			held, err := a.Take(context.Background(), other("fleet rollout"), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release()
			if held.Token() != 1 {
				t.Fatalf("token %d, want 1", held.Token())
			}
			_, err = b.Take(context.Background(), Self("fleet converge"), 0)
			var he *HeldError
			if !errors.As(err, &he) || !errors.Is(err, ErrHeld) {
				t.Fatalf("second take: %v, want a HeldError", err)
			}
			for _, want := range []string{"fleet rollout", "bob@elsewhere", "since 2030-01-02T03:04:05Z", "fleet unlock"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
			if strings.Count(err.Error(), "\n") != 0 {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

func TestWaitTakesAfterRelease(t *testing.T) {
	for name, url := range backends(t) {
		t.Run(name, func(t *testing.T) {
			a := open(t, url)
			b := &Lease{Fleet: a.Fleet, objs: a.objs, where: a.where, Poll: 50 * time.Millisecond}
			held, err := a.Take(context.Background(), other("fleet up"), 0)
			if err != nil {
				t.Fatal(err)
			}
			var waited atomic.Bool
			b.Waiting = func(st State) {
				if st.Holder.Command == "fleet up" {
					waited.Store(true)
				}
			}
			time.AfterFunc(300*time.Millisecond, held.Release)
			start := time.Now()
			h2, err := b.Take(context.Background(), Self("fleet converge"), 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer h2.Release()
			if time.Since(start) < 250*time.Millisecond || !waited.Load() {
				t.Fatalf("took after %s (waiting told: %v): did not wait for the holder", time.Since(start), waited.Load())
			}
			if h2.Token() != 2 {
				t.Fatalf("token %d, want 2 (incremented at each take)", h2.Token())
			}
			if err := held.Check(context.Background()); !errors.Is(err, ErrLost) {
				t.Fatalf("released holder's fence: %v, want ErrLost", err)
			}
		})
	}
}

func TestWaitGivesUpNamingHolder(t *testing.T) {
	a := open(t, "file://"+t.TempDir())
	held, err := a.Take(context.Background(), other("fleet up"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	b := &Lease{Fleet: a.Fleet, objs: a.objs, where: a.where, Poll: 50 * time.Millisecond}
	start := time.Now()
	_, err = b.Take(context.Background(), Self("fleet destroy"), 400*time.Millisecond)
	if !errors.Is(err, ErrHeld) || !strings.Contains(err.Error(), "fleet up") {
		t.Fatalf("err %v, want ErrHeld naming fleet up", err)
	}
	if d := time.Since(start); d < 350*time.Millisecond {
		t.Fatalf("gave up after %s, before --wait", d)
	}
}

// failing makes puts fail on demand.
type failing struct {
	objects
	fail atomic.Bool
}

func (f *failing) put(ctx context.Context, key string, data []byte) error {
	if f.fail.Load() {
		return errors.New("store unreachable")
	}
	return f.objects.put(ctx, key, data)
}

func TestRenewalFailureStopsHolderBeforeExpiry(t *testing.T) {
	for name, url := range backends(t) {
		t.Run(name, func(t *testing.T) {
			base := open(t, url)
			f := &failing{objects: base.objs}
			ttl := 900 * time.Millisecond
			a := &Lease{Fleet: base.Fleet, objs: f, where: "test", TTL: ttl}
			held, err := a.Take(context.Background(), Self("fleet up"), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release()
			// Renewals work for a while: the lease outlives its TTL.
			time.Sleep(ttl + ttl/2)
			if err := held.Check(context.Background()); err != nil {
				t.Fatalf("renewed holder: %v", err)
			}
			f.fail.Store(true)
			st, _ := base.Read(context.Background())
			select {
			case <-held.Context().Done():
			case <-time.After(10 * ttl):
				t.Fatal("the holder's context still runs after its renewals failed")
			}
			if !errors.Is(context.Cause(held.Context()), ErrLost) {
				t.Fatalf("cause %v, want ErrLost", context.Cause(held.Context()))
			}
			if !time.Now().Before(st.Expires) {
				t.Fatalf("stopped at %s, after the lease expired (%s)", time.Now(), st.Expires)
			}
		})
	}
}

func TestTakeoverOnlyAfterExpiryAndFence(t *testing.T) {
	for name, url := range backends(t) {
		t.Run(name, func(t *testing.T) {
			a := open(t, url)
			a.TTL = time.Minute
			held, err := a.Take(context.Background(), other("fleet events reconcile"), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release()
			// Another machine (even one that claims the same machine id and
			// host) cannot take it before it expires.
			// The clock is set from the lease's own expiry, not from this
			// test's clock: a take that took seconds on a loaded machine
			// (SeaweedFS) made "now + 59 s" land after it.
			expires := func() time.Time {
				st, err := a.Read(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				return st.Expires
			}
			var now atomic.Pointer[time.Time]
			n := expires().Add(-time.Second)
			now.Store(&n)
			b := &Lease{Fleet: a.Fleet, objs: a.objs, where: a.where, Clock: func() time.Time { return *now.Load() }}
			if _, err := b.Take(context.Background(), other("fleet up"), 0); !errors.Is(err, ErrHeld) {
				t.Fatalf("take before expiry: %v, want ErrHeld", err)
			}
			if err := held.Check(context.Background()); err != nil {
				t.Fatalf("holder's fence before takeover: %v", err)
			}
			n = expires().Add(time.Second)
			now.Store(&n)
			h2, err := b.Take(context.Background(), Self("fleet up"), 0)
			if err != nil {
				t.Fatalf("take after expiry: %v", err)
			}
			defer h2.Release()
			err = held.Check(context.Background())
			if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "fleet up") {
				t.Fatalf("taken-over holder's fence: %v, want ErrLost naming the new holder", err)
			}
			select {
			case <-held.Context().Done():
			case <-time.After(5 * time.Second):
				t.Fatal("taken-over holder's context not cancelled")
			}
			if err := h2.Check(context.Background()); err != nil {
				t.Fatalf("new holder's fence: %v", err)
			}
		})
	}
}

func TestConcurrentTakesOneWins(t *testing.T) {
	for name, url := range backends(t) {
		if name == "blob" {
			continue // mem:// opens a bucket of its own each time: no contest
		}
		t.Run(name, func(t *testing.T) {
			var wg sync.WaitGroup
			var won atomic.Int32
			// One fleet name for the eight (open gives an s3:// bucket's
			// fleet a unique name per call).
			fleet := "f1"
			if strings.HasPrefix(url, "s3:") {
				fleet = "c-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			}
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l, err := Open(context.Background(), url, fleet)
					if err != nil {
						t.Error(err)
						return
					}
					if _, err := l.Take(context.Background(), Self("t"), 0); err == nil {
						won.Add(1)
					}
				}()
			}
			wg.Wait()
			if won.Load() != 1 {
				t.Fatalf("%d takes won, want 1", won.Load())
			}
		})
	}
}

// TestS3Lease runs the lease's tests on a real object store too:
// SeaweedFS on loopback (make test-s3), where the take is a conditional
// write (If-None-Match: *) the store must honour.
func TestS3Lease(t *testing.T) {
	store := testutil.StartSeaweedFS(t)
	store.MakeBucket(t, "leases")
	store.SetEnv(t)
	t.Setenv("RELAYFLEET_TEST_S3_URL", store.Backend("leases", "t"))
	for name, f := range map[string]func(*testing.T){
		"TakeRefusesNamingHolder":            TestTakeRefusesNamingHolder,
		"WaitTakesAfterRelease":              TestWaitTakesAfterRelease,
		"RenewalFailureStopsHolderBeforeExp": TestRenewalFailureStopsHolderBeforeExpiry,
		"TakeoverOnlyAfterExpiryAndFence":    TestTakeoverOnlyAfterExpiryAndFence,
		"ConcurrentTakesOneWins":             TestConcurrentTakesOneWins,
	} {
		t.Run(name, f)
	}
}

// TestS3StoreKilled: SeaweedFS killed (SIGKILL) under a held lease: the
// renewals fail and the holder's context ends before the lease could
// expire, its cause one line naming the store and the refused
// connection, without the store's secret; restarted on its data, the
// store still has the lease, unreleased (the holder could not write
// its release), and another takes it over (it expired while the store
// was down) with the next fence token.
func TestS3StoreKilled(t *testing.T) {
	testutil.Short(t, "make test-s3")
	store := testutil.StartSeaweedFS(t)
	store.MakeBucket(t, "leases")
	store.SetEnv(t)
	ctx := context.Background()
	url := store.Backend("leases", "killed")
	a := open(t, url)
	a.TTL = 6 * time.Second
	held, err := a.Take(ctx, other("fleet events reconcile"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	// Renewed at least once: the lease as the store has it at the kill.
	time.Sleep(a.TTL/3 + a.TTL/6)
	st, err := a.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	store.Proc.Kill()
	select {
	case <-held.Context().Done():
	case <-time.After(time.Minute):
		t.Fatal("the holder still runs a minute after its store was killed")
	}
	// It stopped before the lease it last renewed could expire. (Not
	// checked against the expiry the restarted store reads back: weed
	// killed with SIGKILL came back with renewals of the last seconds
	// before the kill missing, an older expiry.)
	held.mu.Lock()
	good := held.good
	held.mu.Unlock()
	if stopped := time.Now(); !stopped.Before(good.Add(a.TTL)) {
		t.Errorf("the holder stopped at %s, after the lease it last renewed (at %s) expired", stopped.UTC().Format(time.RFC3339Nano), good.UTC().Format(time.RFC3339Nano))
	}
	cause := context.Cause(held.Context())
	msg := cause.Error()
	if !errors.Is(cause, ErrLost) || !errors.Is(cause, ErrUnreachable) || strings.Contains(msg, "\n") ||
		!strings.Contains(msg, "s3://leases/killed: list: unreachable (") ||
		len(msg) > 300 || strings.Contains(msg, store.SecretKey) {
		t.Fatalf("the holder's cause: %v", msg)
	}
	t.Logf("the holder stopped: %s", msg)
	if _, err := a.Read(ctx); !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "s3://leases/killed") {
		t.Fatalf("a read with the store killed: %v, want ErrUnreachable naming the store", err)
	}

	store.Restart(t)
	again, err := a.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again.Token != st.Token || again.Released || again.Holder != st.Holder {
		t.Fatalf("after the restart the lease is %+v, want the one held before the kill, %+v", again, st)
	}

	b := &Lease{Fleet: a.Fleet, objs: a.objs, where: a.where, TTL: time.Minute, Poll: 200 * time.Millisecond}
	h2, err := b.Take(ctx, Self("fleet events reconcile"), time.Minute)
	if err != nil {
		t.Fatalf("a take once it expired: %v", err)
	}
	h2.Release()
	if h2.Token() != st.Token+1 {
		t.Errorf("the take after the restart has token %d, want %d", h2.Token(), st.Token+1)
	}
}

// deadPID is the pid of a process that ran and is gone.
func deadPID(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestUnlock(t *testing.T) {
	dir := t.TempDir()
	l := open(t, "file://"+dir)
	host, _ := os.Hostname()
	lockDir := filepath.Join(dir, ".pulumi", "locks", "organization", "relayfleet", "f1")
	os.MkdirAll(lockDir, 0o700)
	other := filepath.Join(dir, ".pulumi", "locks", "organization", "relayfleet", "g1")
	os.MkdirAll(other, 0o700)

	// A live holder on this host: refused, naming it; nothing removed.
	live := Self("fleet up")
	held, err := l.Take(context.Background(), live, 0)
	if err != nil {
		t.Fatal(err)
	}
	pulumiLock := `{"pid":` + itoa(os.Getpid()) + `,"username":"me","hostname":"` + host + `","timestamp":"` + time.Now().UTC().Format(time.RFC3339) + `"}`
	os.WriteFile(filepath.Join(lockDir, "a.json"), []byte(pulumiLock), 0o600)
	var out strings.Builder
	err = l.Unlock(context.Background(), &out, Self("fleet unlock"))
	if !errors.Is(err, ErrAlive) || !strings.Contains(err.Error(), "fleet up") || !strings.Contains(err.Error(), "still runs") {
		t.Fatalf("unlock of a live holder: %v", err)
	}
	if err := held.Check(context.Background()); err != nil {
		t.Fatalf("live holder lost its lease to a refused unlock: %v", err)
	}
	held.Release()

	// A dead holder (its pid gone) and the stack lock it left: cleared;
	// another fleet's lock stays.
	dead := deadPID(t)
	h := Self("fleet up")
	h.PID = dead
	l2 := &Lease{Fleet: "f1", objs: l.objs, where: l.where}
	if _, err := l2.Take(context.Background(), h, 0); err != nil {
		t.Fatal(err)
	}
	deadLock := strings.Replace(pulumiLock, itoa(os.Getpid()), itoa(dead), 1)
	os.WriteFile(filepath.Join(lockDir, "a.json"), []byte(deadLock), 0o600)
	os.WriteFile(filepath.Join(other, "b.json"), []byte(deadLock), 0o600)
	if _, err := l.Take(context.Background(), Self("fleet up"), 0); !errors.Is(err, ErrHeld) {
		t.Fatalf("dead holder's lease is live until it expires: take %v", err)
	}
	out.Reset()
	if err := l.Unlock(context.Background(), &out, Self("fleet unlock")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "cleared") || !strings.Contains(out.String(), "removed Pulumi lock on stack organization/relayfleet/f1") {
		t.Fatalf("unlock said %q", out.String())
	}
	if _, err := os.Stat(filepath.Join(lockDir, "a.json")); !os.IsNotExist(err) {
		t.Fatalf("the dead run's stack lock is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(other, "b.json")); err != nil {
		t.Fatalf("another fleet's lock was removed: %v", err)
	}
	h3, err := l.Take(context.Background(), Self("fleet up"), 0)
	if err != nil {
		t.Fatalf("take after unlock: %v", err)
	}
	h3.Release()
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestClearDeadStackLocks: the repair's replacement for pulumi cancel
// removes a dead run's stack lock and refuses, naming it, a live one's.
func TestClearDeadStackLocks(t *testing.T) {
	dir := t.TempDir()
	host, _ := os.Hostname()
	stackDir := filepath.Join(dir, ".pulumi", "locks", "organization", "relayfleet-infra", "f1-event-e")
	os.MkdirAll(stackDir, 0o700)
	lock := func(pid int) string {
		return `{"pid":` + itoa(pid) + `,"username":"me","hostname":"` + host + `","timestamp":"` + time.Now().UTC().Format(time.RFC3339) + `"}`
	}
	live := exec.Command("sleep", "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { live.Process.Kill(); live.Wait() }()
	os.WriteFile(filepath.Join(stackDir, "live.json"), []byte(lock(live.Process.Pid)), 0o600)
	n, err := ClearDeadStackLocks(context.Background(), "file://"+dir, "relayfleet-infra", "f1-event-e", time.Minute)
	if !errors.Is(err, ErrAlive) || n != 0 || !strings.Contains(err.Error(), "pid "+itoa(live.Process.Pid)) {
		t.Fatalf("a live run's lock: removed %d, %v; want refused naming it", n, err)
	}
	if _, err := os.Stat(filepath.Join(stackDir, "live.json")); err != nil {
		t.Fatalf("a live run's lock was removed: %v", err)
	}
	os.Remove(filepath.Join(stackDir, "live.json"))
	os.WriteFile(filepath.Join(stackDir, "dead.json"), []byte(lock(deadPID(t))), 0o600)
	if n, err := ClearDeadStackLocks(context.Background(), "file://"+dir, "relayfleet-infra", "f1-event-e", time.Minute); err != nil || n != 1 {
		t.Fatalf("a dead run's lock: removed %d, %v; want 1", n, err)
	}
}
