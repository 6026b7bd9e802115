//go:build e2e

// Replacing boxes one at a time (issue 16.2) on a two-box lab fleet
// through the real Pulumi CLI, with listeners routed through the real
// router: a shape change replaces the boxes one per run, each new box is
// in the router's list before its old box is drained and deleted, both old
// boxes are never gone while no replacement serves, and every listener
// keeps listening. Then fleet destroy (16.2) refuses without a terminal or
// --yes while the boxes serve listeners, and destroys with --yes. It runs
// on its own lab (bridge rfsafe0, subnet 10.231.115.0/24, dir
// /var/lib/relayfleet/lab-safe) and state directory, sharing the image
// cache, and leaves no box behind.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

const (
	safeLabDir   = "/var/lib/relayfleet/lab-safe"
	safeBridge   = "rfsafe0"
	safeSubnet   = "10.231.115.0/24"
	safeOriginIP = "10.231.115.1" // this machine's address on the bridge
	safeFleet    = "safe"
	safeListen   = 6 // listeners through the router
)

func safeInventory(t *testing.T, path, originURL, shape string) {
	t.Helper()
	inv := fmt.Sprintf(`version: 1
name: %s
origin: [%q]
access:
  public_listen: [live/]
steady:
  - name: safe
    provider: lab
    shape: %s
    count: 2
    processes: auto
    base_port: 4443
`, safeFleet, originURL, shape)
	if err := os.WriteFile(path, []byte(inv), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestE2EReplaceOneBoxAtATime(t *testing.T) {
	t.Parallel() // its own lab and fleet: see e2eLab
	e := newE2ELab(t, safeLabDir, safeBridge, safeSubnet, map[string]string{"fleet": safeFleet})
	work, relayBin, state, inv := e.work, e.relayBin, e.state, filepath.Join(e.work, "safe.yaml")
	e.inv = inv
	l, ctx := e.lab, context.Background()
	boxes := func() []lab.Box { return e.boxes(e.owned) }
	fleet := e.run
	// Gone with the test binary, also when it is killed (an origin left
	// on the bridge address made the next run's origin fail).
	bg := func(lctx context.Context, name string, args ...string) *testutil.Proc {
		t.Helper()
		return testutil.StartLog(t, filepath.Join(work, name+".log"), exec.CommandContext(lctx, relayBin, args...))
	}

	// 1. Two small boxes, pulling the broadcast from an origin on this
	// machine's address on the bridge (so that a new box serves it too).
	key := filepath.Join(work, "origin.key")
	spki, err := exec.Command(relayBin, "keygen", "--out", key).Output()
	if err != nil {
		t.Fatalf("relay keygen: %v", err)
	}
	originURL := fmt.Sprintf("http://%s:4443/#spki=%s", safeOriginIP, strings.TrimSpace(string(spki)))
	safeInventory(t, inv, originURL, "small")
	if out, code := fleet(nil, "up"); code != 0 {
		t.Fatalf("fleet up: exit %d: %s", code, lastLine(out))
	}
	before := boxes()
	if len(before) != 2 {
		t.Fatalf("%d boxes after up, want 2", len(before))
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	bg(lctx, "origin", "serve", "--listen", safeOriginIP+":4443", "--tls-key", key, "--no-auth", "--log-level", "warn")
	testutil.WaitFor(t, 20*time.Second, "the origin", func() bool {
		resp, err := http.Get("http://" + safeOriginIP + ":4443/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	bg(lctx, "publisher", "publish", "--paced", "--name", "live/show", originURL)

	// 2. The real router on the relays file fleet keeps, and the
	// listeners through it.
	port := freePort(t)
	routerURL := fmt.Sprintf("http://127.0.0.1:%d/", port)
	bg(lctx, "router", "router", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--relays", filepath.Join(state, program.RelaysFile), "--poll", "200ms", "--log-level", "warn")
	routed := func() []routerRelay {
		var doc struct{ Relays []routerRelay }
		if resp, err := http.Get(routerURL + "relays"); err == nil {
			json.NewDecoder(resp.Body).Decode(&doc)
			resp.Body.Close()
		}
		return doc.Relays
	}
	subscribers := func(u string) int64 {
		var st struct{ Subscribers int64 }
		c := http.Client{Timeout: 2 * time.Second}
		resp, err := c.Get(u + "stats")
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&st)
		return st.Subscribers
	}
	// listening is the subscribers of every relay on the fleet's boxes
	// (their processes' ports, whatever the router lists), by box.
	listeningOn := func(bs []lab.Box) (map[string]int64, int64) {
		by, total := map[string]int64{}, int64(0)
		for _, b := range bs {
			for p := 4443; p < 4443+b.Cores; p++ {
				n := subscribers(fmt.Sprintf("http://%s:%d/", b.Address, p))
				by[b.Name] += n
				total += n
			}
		}
		return by, total
	}
	listening := func() (map[string]int64, int64) { return listeningOn(boxes()) }
	testutil.WaitFor(t, 30*time.Second, "the router to list both boxes healthy", func() bool {
		rs := routed()
		return len(rs) == 2 && rs[0].Healthy && rs[1].Healthy
	})
	var listeners []*testutil.Proc
	for i := range safeListen {
		listeners = append(listeners, bg(lctx, fmt.Sprintf("listener%d", i), "listen", "--router", routerURL, "--name", "live/show"))
	}
	if !testutil.Poll(60*time.Second, func() bool { _, n := listening(); return n == safeListen }) {
		by, n := listening()
		for _, name := range []string{"origin", "publisher", "router", "listener0"} {
			data, _ := os.ReadFile(filepath.Join(work, name+".log"))
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			t.Logf("%s log (tail):\n%s", name, strings.Join(lines[max(0, len(lines)-10):], "\n"))
		}
		t.Fatalf("%d of %d listeners subscribed after 60 s (by box %v; the router lists %+v)", n, safeListen, by, routed())
	}
	by, _ := listening()
	t.Logf("listeners before the replacement: %v", by)

	// 3. The shape changes: with --yes (the boxes serve listeners), the
	// boxes are replaced one at a time. A watcher records the boxes, the
	// router's list and the listeners while it runs.
	type sample struct {
		at        time.Duration
		boxes     []string
		routed    []string
		listed    string // the relays file
		listening int64
	}
	var (
		mu      sync.Mutex
		samples []sample
	)
	watch, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	t0 := time.Now()
	take := func() {
		s := sample{at: time.Since(t0)}
		bs, err := l.List(ctx, map[string]string{"fleet": safeFleet})
		if err != nil {
			return // a sample without the boxes would show them gone
		}
		for _, b := range bs {
			s.boxes = append(s.boxes, b.Name)
		}
		for _, r := range routed() {
			if r.Healthy && !r.Draining {
				s.routed = append(s.routed, r.URL)
			}
		}
		_, s.listening = listeningOn(bs)
		if data, err := os.ReadFile(filepath.Join(state, program.RelaysFile)); err == nil {
			s.listed = string(data)
		}
		mu.Lock()
		samples = append(samples, s)
		mu.Unlock()
	}
	go func() {
		defer close(watched)
		for watch.Err() == nil {
			take()
			time.Sleep(300 * time.Millisecond)
		}
	}()
	safeInventory(t, inv, originURL, "medium")
	out, code := fleet(nil, "up", "--yes")
	stopWatch()
	<-watched
	// One more once up has returned: the last old box may go in the
	// moment between the watcher's last sample and up's end.
	take()
	sum := summary(out, "up: stack safe: ")
	if code != 0 || !strings.Contains(sum, "2 replace") {
		t.Fatalf("up --yes: exit %d, summary %q, want 2 replace", code, sum)
	}
	after := boxes()
	if len(after) != 2 {
		t.Fatalf("%d boxes after the replacement, want 2", len(after))
	}
	for i, b := range after {
		if b.Name != before[i].Name+"-r1" || b.Cores != lab.Medium.Cores {
			t.Errorf("box %s with %d cores after the replacement, want %s-r1, medium", b.Name, b.Cores, before[i].Name)
		}
	}

	// One at a time: never more than three boxes (two old, one new), and
	// when an old box went, the other old box or its replacement was
	// there; each old box went only once its replacement was in the
	// router's list.
	most, gone := 0, map[string]time.Duration{}
	made := map[string]time.Duration{}
	routedAt, listedAt := map[string]time.Duration{}, map[string]time.Duration{}
	var prev sample
	for i, s := range samples {
		most = max(most, len(s.boxes))
		for _, b := range s.boxes {
			if _, ok := made[b]; !ok {
				made[b] = s.at
			}
		}
		// A new box's address may be an old box's: only from its making.
		for _, b := range s.boxes {
			u := "http://" + addrOf(after, b) + ":4443/"
			if made[b] == 0 || addrOf(after, b) == "" {
				continue
			}
			if _, ok := listedAt[b]; !ok && strings.Contains(s.listed, `"`+u+`"`) {
				listedAt[b] = s.at
			}
			if _, ok := routedAt[b]; !ok && slices.Contains(s.routed, u) {
				routedAt[b] = s.at
			}
		}
		if i > 0 {
			for _, b := range prev.boxes {
				if !slices.Contains(s.boxes, b) {
					gone[b] = s.at
				}
			}
		}
		prev = s
	}
	if most > 3 {
		t.Errorf("%d boxes at once: the replacements were made all together, not one at a time", most)
	}
	t.Logf("boxes made at %v, gone at %v; new boxes in the relays file at %v", made, gone, listedAt)
	// The boxes go in name order (Up sorts them).
	old1, old2 := before[0].Name, before[1].Name
	if g1, g2 := gone[old1], gone[old2]; g1 == 0 || g2 == 0 || g2 <= g1 {
		t.Errorf("old boxes gone at %v and %v: want %s gone first, then %s", g1, g2, old1, old2)
	} else if made[old2+"-r1"] < g1 {
		t.Errorf("%s-r1 made at %v, before %s went at %v: not one at a time", old2, made[old2+"-r1"], old1, g1)
	}
	for i, b := range before {
		nu := after[i].Name
		at, ok := routedAt[nu]
		if !ok || at > gone[b.Name] {
			t.Errorf("the router listed %s's replacement %s at %v (listed: %v; in the relays file at %v), after %s went at %v", b.Name, nu, at, ok, listedAt[nu], b.Name, gone[b.Name])
			continue
		}
		t.Logf("%s: replacement made at %.1fs, in the relays file at %.1fs, routed at %.1fs, old box gone at %.1fs (%.1fs after)",
			b.Name, made[nu].Seconds(), listedAt[nu].Seconds(), at.Seconds(), gone[b.Name].Seconds(), (gone[b.Name] - at).Seconds())
	}
	least := int64(safeListen)
	for _, s := range samples {
		least = min(least, s.listening)
	}
	t.Logf("%d samples over %.0fs: at most %d boxes, fewest listeners subscribed at once %d of %d", len(samples), time.Since(t0).Seconds(), most, least, safeListen)

	// Every listener listens on, on the new boxes (each listener process
	// is one subscriber: all of them are still there).
	testutil.WaitFor(t, 60*time.Second, "every listener subscribed on the new boxes", func() bool { _, n := listening(); return n == int64(len(listeners)) })
	by, _ = listening()
	t.Logf("listeners after the replacement: %v", by)

	// 4. fleet destroy without a terminal and without --yes: refused in
	// one line naming --yes, nothing destroyed; with --yes: no box left.
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	out, code = fleet(devnull, "destroy")
	if code == 0 || !strings.Contains(lastLine(out), "--yes") || !strings.Contains(out, "destroy would destroy 2 boxes") || !strings.Contains(out, " listeners") {
		t.Fatalf("destroy with listeners, no terminal, no --yes: exit %d, last line %q; want a refusal listing the boxes", code, lastLine(out))
	}
	if bs := boxes(); len(bs) != 2 {
		t.Fatalf("the refused destroy left %d boxes, want 2", len(bs))
	}
	stop() // the listeners, publisher, origin and router
	if out, code := fleet(nil, "destroy", "--yes"); code != 0 {
		t.Fatalf("fleet destroy --yes: exit %d: %s", code, lastLine(out))
	}
	if bs := boxes(); len(bs) != 0 {
		t.Fatalf("%d boxes after destroy --yes, want 0", len(bs))
	}
}

// addrOf is the address of the box called name among bs, "" if none.
func addrOf(bs []lab.Box, name string) string {
	for _, b := range bs {
		if b.Name == name {
			return b.Address.String()
		}
	}
	return ""
}
