package digitalocean

import (
	"errors"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/backend"
)

var sweepLabels = map[string]string{"fleet": "demo", "tier": "burst", "event": "finals"}

// sweepScenario makes fleet demo's boxes (two burst boxes of event finals,
// one of event other, one steady) and a finals burst box of fleet
// elsewhere. relay-burst-2 is an orphan: only the cloud knows it.
func sweepScenario(t *testing.T) (*Backend, *fakeAPI, map[string]string) {
	t.Helper()
	b, f := newTestBackend(t)
	ids := map[string]string{}
	for _, s := range []struct {
		name   string
		labels map[string]string
	}{
		{"relay-burst-1", sweepLabels},
		{"relay-other-1", map[string]string{"fleet": "demo", "tier": "burst", "event": "other"}},
		{"relay-steady-1", map[string]string{"fleet": "demo", "tier": "steady", "event": "none"}},
	} {
		box, err := b.Create(ctx(t), testSpec(t, s.name, s.labels))
		if err != nil {
			t.Fatal(err)
		}
		ids[s.name] = box.ID
	}
	ids["relay-burst-2"] = strconv.Itoa(f.addDroplet("relay-burst-2", Tags(sweepLabels)...))
	ids["else-burst-1"] = strconv.Itoa(f.addDroplet("else-burst-1", "fleet:elsewhere", "tier:burst", "event:finals"))
	return b, f, ids
}

func boxNames(boxes []backend.Box) []string {
	var out []string
	for _, b := range boxes {
		out = append(out, b.Name)
	}
	return out
}

func TestSweepOrphans(t *testing.T) {
	b, f, ids := sweepScenario(t)
	c := ctx(t)
	n := len(f.requests(""))
	found, err := backend.Sweep(c, b, sweepLabels)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := boxNames(found), []string{"relay-burst-1", "relay-burst-2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("found %v, want %v", got, want)
	}

	// The API saw two lists by the fleet's tag and a DELETE of each box.
	var lists, deletes []string
	for _, l := range f.requests("")[n:] {
		method, uri, _ := strings.Cut(l, " ")
		u, err := url.Parse(uri)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case method == "GET" && u.Path == "/v2/droplets" && u.Query().Get("page") == "1":
			lists = append(lists, u.Query().Get("tag_name"))
		case method == "DELETE":
			deletes = append(deletes, u.Path)
		}
	}
	if want := []string{"fleet:demo", "fleet:demo"}; !reflect.DeepEqual(lists, want) {
		t.Errorf("list tags %q, want %q", lists, want)
	}
	slices.Sort(deletes)
	want := []string{"/v2/droplets/" + ids["relay-burst-1"], "/v2/droplets/" + ids["relay-burst-2"]}
	slices.Sort(want)
	if !reflect.DeepEqual(deletes, want) {
		t.Errorf("deletes %v, want %v", deletes, want)
	}

	all, err := b.List(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := boxNames(all), []string{"else-burst-1", "relay-other-1", "relay-steady-1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}

	found, err = backend.Sweep(c, b, sweepLabels)
	if err != nil || len(found) != 0 {
		t.Errorf("second Sweep = %v, %v; want none", boxNames(found), err)
	}
}

func TestSweepDeleteRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults int
		status int
		file   string
		want   string
	}{
		{"403", 1, 403, "error_forbidden.json", "403 forbidden"},
		// Retried by backend.Retry's transport (fastRetry) until it gives up.
		{"503 that does not stop", fastRetry.Attempts, 503, "error_unavailable.json", "503 service_unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, f, ids := sweepScenario(t)
			stuck := ids["relay-burst-2"]
			for range tc.faults {
				f.addFault(fault{method: "DELETE", path: "/v2/droplets/" + stuck, status: tc.status, fixture: tc.file})
			}
			found, err := backend.Sweep(ctx(t), b, sweepLabels)
			if !errors.Is(err, backend.ErrRemain) {
				t.Fatalf("error %v, want ErrRemain", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "relay-burst-2 ("+stuck+")") || strings.Contains(msg, "relay-burst-1") ||
				!strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line naming relay-burst-2 only, with %q", msg, tc.want)
			}
			if len(found) != 2 {
				t.Errorf("found %v, want both", boxNames(found))
			}
			if len(f.faults) != 0 {
				t.Errorf("%d faults not hit", len(f.faults))
			}
			left, err := b.List(ctx(t), sweepLabels)
			if err != nil {
				t.Fatal(err)
			}
			if got := boxNames(left); !reflect.DeepEqual(got, []string{"relay-burst-2"}) {
				t.Errorf("left %v, want relay-burst-2", got)
			}
		})
	}
}
