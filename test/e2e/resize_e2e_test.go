//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

// The resize end-to-end (issue 16.3): an event of two burst boxes, a
// listener on the second, a calibration change mid-event that sizes the
// event at one box, then fleet burst resize. Its own lab (bridge
// rfsafa0, subnet 10.231.101.0/24).
const (
	rzLabDir = "/var/lib/relayfleet/lab-safa"
	rzBridge = "rfsafa0"
	rzSubnet = "10.231.101.0/24"
)

// rzEvents is the resize test's events file. A steady small lab box
// carries about 400 listeners (memory-bound): a peak of 1,100 needs two
// burst boxes.
var rzEvents = e2eEventFile("rsz", 1100)

// rzCalibration needs less memory per listener: a box carries about 600,
// and the same peak needs one burst box.
const rzCalibration = `version: 1
source: story
date: "2026-12-01"
listeners_per_core: 900
listeners_per_socket: 6500
ram_per_listener: 0.9MB
bitrate_per_listener: 40kbit
uplink_headroom: 0.7
`

func TestE2EEventCalibrationChangeAndResize(t *testing.T) {
	t.Parallel() // its own lab and fleet: see e2eLab
	e := newE2ELab(t, rzLabDir, rzBridge, rzSubnet, nil)
	cli, work, relayBin, state := e.cli, e.work, e.relayBin, e.state
	inv := filepath.Join(work, "lab.yaml")
	evPath := filepath.Join(work, "events.yaml")
	writeInventory(t, inv, 1, "small")
	if err := os.WriteFile(evPath, []byte(rzEvents), 0o644); err != nil {
		t.Fatal(err)
	}
	// The figures here were chosen under the story's calibration (the
	// default follows the bundled relay's measurements and moves with
	// them): it goes beside the inventory, where the reconciler reads it.
	story, err := os.ReadFile(filepath.Join("..", "..", "inventories", "calibrations", "story.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "calibration.yaml"), story, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	list := e.boxes
	eventBoxes := func() []lab.Box { return list(map[string]string{"fleet": "lab", "event": "rsz"}) }
	fleetCmd := func(args ...string) *exec.Cmd { return e.cmd(ctx, args...) }
	fleet := e.fleet
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	record := func() *events.Record { return e.record("rsz") }

	fleet("up", "--inventory", inv)
	steady := list(map[string]string{"fleet": "lab", "tier": "steady"})
	if len(steady) != 1 {
		t.Fatalf("%d steady boxes, want 1", len(steady))
	}

	port := e.startRouter(ctx)
	routerState := func(what string, want func(map[string]routerRelay) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var doc struct{ Relays []routerRelay }
			if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/relays", port)); err == nil {
				json.NewDecoder(resp.Body).Decode(&doc)
				resp.Body.Close()
			}
			rs := map[string]routerRelay{}
			for _, r := range doc.Relays {
				rs[r.URL] = r
			}
			if want(rs) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("router state %+v: not %s", doc.Relays, what)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	url := func(b lab.Box) string { return fmt.Sprintf("http://%s:4443/", b.Address) }
	start := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)

	// Two burst boxes, routed.
	fleet("events", "reconcile", "--events", evPath, "--now", at(start.Add(-9*time.Minute)))
	boxes := eventBoxes()
	if rec := record(); rec.Phase != events.Up || len(rec.Hosts) != 2 || len(boxes) != 2 {
		t.Fatalf("up: phase %s, %d hosts, %d boxes; want 2", rec.Phase, len(rec.Hosts), len(boxes))
	}
	first, second := boxes[0], boxes[1] // sorted by name: ...-1, ...-2
	if !strings.HasSuffix(first.Name, "-1") || !strings.HasSuffix(second.Name, "-2") {
		t.Fatalf("burst boxes %s, %s", first.Name, second.Name)
	}
	routerState("both burst relays routed", func(rs map[string]routerRelay) bool {
		return len(rs) == 3 && rs[url(first)].Healthy && rs[url(second)].Healthy && !rs[url(second)].Draining
	})

	// A listener on the second box, the one a resize to one box removes.
	lctx, stopListen := context.WithCancel(ctx)
	defer stopListen()
	tokOut, err := fleetCmd("token", "--inventory", inv, "--publish", "live/", "--state-dir", state, "--pulumi", cli).Output()
	if err != nil {
		t.Fatalf("fleet token: %v", err)
	}
	tokFile := filepath.Join(work, "publish.jwt")
	if err := os.WriteFile(tokFile, tokOut, 0o600); err != nil {
		t.Fatal(err)
	}
	pubCmd := exec.CommandContext(lctx, relayBin, "publish", "--name", "live/rsz", "--paced", "--trust-http-hash", "--token-file", tokFile, url(second))
	lisCmd := exec.CommandContext(lctx, relayBin, "listen", "--name", "live/rsz", "--trust-http-hash", url(second))
	pubCmd.Stdout, lisCmd.Stdout = io.Discard, io.Discard
	testutil.Start(t, "publisher", pubCmd)
	lis := testutil.Start(t, "listener", lisCmd)
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; ; n++ {
		fleet("events", "reconcile", "--events", evPath, "--now", at(start.Add(time.Duration(20+n)*time.Minute)))
		if s := record().Samples; len(s) > 0 && s[len(s)-1].Listeners >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the listener is never counted: %+v", record().Samples)
		}
	}

	// A new calibration sizes the event at one box: nothing is removed,
	// the listener keeps its box.
	if err := os.WriteFile(filepath.Join(work, "calibration.yaml"), []byte(rzCalibration), 0o644); err != nil {
		t.Fatal(err)
	}
	out := fleet("events", "reconcile", "--events", evPath, "--now", at(start.Add(30*time.Minute)))
	rec := record()
	if !strings.Contains(out, "action=hold") || rec.Suggested == nil || *rec.Suggested != 1 || len(rec.Hosts) != 2 || len(eventBoxes()) != 2 {
		t.Fatalf("after the calibration change: suggested %v, %d hosts, %d boxes\n%s", rec.Suggested, len(rec.Hosts), len(eventBoxes()), out)
	}
	if s := rec.Samples; s[len(s)-1].Listeners < 1 {
		t.Fatalf("the listener is gone after the calibration change: %+v", s)
	}
	routerState("both burst relays still routed", func(rs map[string]routerRelay) bool {
		return len(rs) == 3 && !rs[url(first)].Draining && !rs[url(second)].Draining
	})
	if lis.Exited() {
		t.Fatalf("the listener exited: %v\n%s", lis.Wait(), lis.Tail(10))
	}

	// fleet burst resize: the second box is drained (its listener told
	// to go), then removed once empty; the first is untouched.
	out = fleet("burst", "resize", "--event", "rsz", "--events", evPath, "--now", at(start.Add(31*time.Minute)))
	if !strings.Contains(out, "action=resize-drain") {
		t.Fatalf("resize did not drain:\n%s", out)
	}
	for n := 0; record().Shrink != nil; n++ {
		if n > 10 {
			t.Fatalf("the resize never finished: %+v", record().Shrink)
		}
		time.Sleep(2 * time.Second)
		out += fleet("events", "reconcile", "--events", evPath, "--now", at(start.Add(time.Duration(32+n)*time.Minute)))
	}
	if i, j := strings.Index(out, "action=resize-drain"), strings.Index(out, "action=resize-remove"); i < 0 || j < i {
		t.Fatalf("resize log out of order:\n%s", out)
	}
	rec = record()
	left := eventBoxes()
	if rec.Phase != events.Up || len(rec.Hosts) != 1 || rec.Plan.Boxes != 1 || len(left) != 1 ||
		left[0].Name != first.Name || left[0].Address != first.Address || left[0].Created != first.Created {
		t.Fatalf("after the resize: phase %s, %d hosts, boxes %v; want %s alone, untouched", rec.Phase, len(rec.Hosts), left, first.Name)
	}
	routerState("the first burst relay routed alone", func(rs map[string]routerRelay) bool {
		_, gone := rs[url(second)]
		return len(rs) == 2 && !gone && rs[url(first)].Healthy && !rs[url(first)].Draining
	})
	stopListen()
	fleet("events", "reconcile", "--events", evPath, "--now", at(start.Add(2*time.Hour)))
	if rec := record(); rec.Phase != events.Gone {
		t.Fatalf("after the event: phase %s", rec.Phase)
	}
	fleet("destroy", "--inventory", inv, "--yes")
}
