package backendtest

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/backend"
)

// Cloud is what the shared tests need to know of one cloud's backend and
// its fake.
type Cloud struct {
	// New returns a backend that talks to a fresh fake, the fake's API,
	// and add, which stores a running box only the cloud knows (made
	// without Create) and returns its ID.
	New func(t *testing.T) (b backend.Backend, api *API, add func(name string, labels map[string]string) string)
	// Spec is a valid spec of a box called name with labels.
	Spec func(t *testing.T, name string, labels map[string]string) backend.Spec
	// Attempts is the tries in all of the backend's retry policy.
	Attempts int
	// BoxPath is the API path of a box less its ID: "/servers/".
	BoxPath string
	// ListFilter reports whether a request is the first page of a box
	// list, and the filter it was sent with (a tag, a label selector).
	ListFilter func(method string, u *url.URL) (filter string, ok bool)
	// SweepFilter is the filter a Sweep of SweepLabels lists with.
	SweepFilter string
	// Unavailable is how the backend words the error of a 503 with
	// testdata/error_unavailable.json: "503 unavailable".
	Unavailable string
}

// SweepLabels are the labels of the boxes the sweep tests sweep.
var SweepLabels = map[string]string{"fleet": "demo", "tier": "burst", "event": "finals"}

// sweepScenario makes fleet demo's boxes (two burst boxes of event finals,
// one of event other, one steady) and a finals burst box of fleet
// elsewhere. relay-burst-2 is an orphan: only the cloud knows it.
func sweepScenario(t *testing.T, c Cloud) (backend.Backend, *API, map[string]string) {
	t.Helper()
	b, api, add := c.New(t)
	ids := map[string]string{}
	for _, s := range []struct {
		name   string
		labels map[string]string
	}{
		{"relay-burst-1", SweepLabels},
		{"relay-other-1", map[string]string{"fleet": "demo", "tier": "burst", "event": "other"}},
		{"relay-steady-1", map[string]string{"fleet": "demo", "tier": "steady", "event": "none"}},
	} {
		box, err := b.Create(Ctx(t), c.Spec(t, s.name, s.labels))
		if err != nil {
			t.Fatal(err)
		}
		ids[s.name] = box.ID
	}
	ids["relay-burst-2"] = add("relay-burst-2", SweepLabels)
	ids["else-burst-1"] = add("else-burst-1", map[string]string{"fleet": "elsewhere", "tier": "burst", "event": "finals"})
	return b, api, ids
}

// BoxNames are the names of boxes, in order.
func BoxNames(boxes []backend.Box) []string {
	var out []string
	for _, b := range boxes {
		out = append(out, b.Name)
	}
	return out
}

// SweepOrphans checks that backend.Sweep finds and deletes the boxes with
// the labels, the orphan included, with two lists and a DELETE a box, and
// leaves the others; a second Sweep finds nothing.
func SweepOrphans(t *testing.T, c Cloud) {
	b, api, ids := sweepScenario(t, c)
	ctx := Ctx(t)
	n := len(api.Requests(""))
	found, err := backend.Sweep(ctx, b, SweepLabels)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := BoxNames(found), []string{"relay-burst-1", "relay-burst-2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("found %v, want %v", got, want)
	}

	// The API saw two lists by the sweep's filter and a DELETE of each box.
	var lists, deletes []string
	for _, l := range api.Requests("")[n:] {
		method, uri, _ := strings.Cut(l, " ")
		u, err := url.Parse(uri)
		if err != nil {
			t.Fatal(err)
		}
		if filter, ok := c.ListFilter(method, u); ok {
			lists = append(lists, filter)
		} else if method == "DELETE" {
			deletes = append(deletes, u.Path)
		}
	}
	if want := []string{c.SweepFilter, c.SweepFilter}; !reflect.DeepEqual(lists, want) {
		t.Errorf("list filters %q, want %q", lists, want)
	}
	slices.Sort(deletes)
	want := []string{c.BoxPath + ids["relay-burst-1"], c.BoxPath + ids["relay-burst-2"]}
	slices.Sort(want)
	if !reflect.DeepEqual(deletes, want) {
		t.Errorf("deletes %v, want %v", deletes, want)
	}

	all, err := b.List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := BoxNames(all), []string{"else-burst-1", "relay-other-1", "relay-steady-1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}

	found, err = backend.Sweep(ctx, b, SweepLabels)
	if err != nil || len(found) != 0 {
		t.Errorf("second Sweep = %v, %v; want none", BoxNames(found), err)
	}
}

// SweepDeleteRefused checks that a box whose DELETE the API refuses (403,
// or 503 past the retries) stays, and that Sweep's error wraps
// backend.ErrRemain and names it, and only it, on one line.
func SweepDeleteRefused(t *testing.T, c Cloud) {
	for _, tc := range []struct {
		name   string
		faults int
		status int
		file   string
		want   string
	}{
		{"403", 1, 403, "error_forbidden.json", "403 forbidden"},
		// Retried by backend.Retry's transport until it gives up.
		{"503 that does not stop", c.Attempts, 503, "error_unavailable.json", c.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, api, ids := sweepScenario(t, c)
			stuck := ids["relay-burst-2"]
			for range tc.faults {
				api.AddFault(Fault{Method: "DELETE", Path: c.BoxPath + stuck, Status: tc.status, Fixture: tc.file})
			}
			found, err := backend.Sweep(Ctx(t), b, SweepLabels)
			if !errors.Is(err, backend.ErrRemain) {
				t.Fatalf("error %v, want ErrRemain", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "relay-burst-2 ("+stuck+")") || strings.Contains(msg, "relay-burst-1") ||
				!strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line naming relay-burst-2 only, with %q", msg, tc.want)
			}
			if len(found) != 2 {
				t.Errorf("found %v, want both", BoxNames(found))
			}
			if n := api.FaultsLeft(); n != 0 {
				t.Errorf("%d faults not hit", n)
			}
			left, err := b.List(Ctx(t), SweepLabels)
			if err != nil {
				t.Fatal(err)
			}
			if got := BoxNames(left); !reflect.DeepEqual(got, []string{"relay-burst-2"}) {
				t.Errorf("left %v, want relay-burst-2", got)
			}
		})
	}
}

// APIErrorWants is how a backend words the API's refusals of APIErrors'
// calls on box 7, to the letter.
type APIErrorWants struct {
	Unauthorized string // GET, 401 with testdata/error_unauthorized.json
	Forbidden    string // DELETE, 403 with error_forbidden.json
	Unavailable  string // GET, 503 with error_unavailable.json on every try
	RateLimited  string // GET, 429 with error_rate_limit.json on every try
}

// APIErrors checks that a refusal of the API comes back as want says, one
// line, without the token, and that a 503 or a 429 that does not stop is
// tried as often as the retry policy allows (a 429's Retry-After capped at
// its Max).
func APIErrors(t *testing.T, c Cloud, want APIErrorWants) {
	get := func(ctx context.Context, b backend.Backend) error { _, err := b.Get(ctx, "7"); return err }
	del := func(ctx context.Context, b backend.Backend) error { return b.Delete(ctx, "7") }
	for _, tc := range []struct {
		name  string
		fault Fault
		tries int
		call  func(context.Context, backend.Backend) error
		want  string
	}{
		{"unauthorized", Fault{Method: "GET", Status: 401, Fixture: "error_unauthorized.json"}, 1, get, want.Unauthorized},
		{"forbidden delete", Fault{Method: "DELETE", Status: 403, Fixture: "error_forbidden.json"}, 1, del, want.Forbidden},
		{"503 that does not stop", Fault{Method: "GET", Status: 503, Fixture: "error_unavailable.json"}, c.Attempts, get, want.Unavailable},
		{"429 that does not stop", Fault{Method: "GET", Status: 429, Fixture: "error_rate_limit.json", Header: http.Header{"Retry-After": {"1"}}}, c.Attempts, get, want.RateLimited},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, api, _ := c.New(t)
			tc.fault.Path = c.BoxPath + "7"
			for range tc.tries {
				api.AddFault(tc.fault)
			}
			sent := 0
			if tc.tries > 1 {
				sent = tc.tries
			}
			CheckError(t, api, tc.call(Ctx(t), b), tc.want, sent)
		})
	}
}

// CreateRetry is a case of CreateRetries.
type CreateRetry struct {
	Name   string
	Faults []Fault // the API answers with these
	Posts  int     // the create POSTs the backend sends
	// Racing makes a box of the same name and fleet, without Create,
	// before Create starts: another Create that won the race.
	Racing bool
}

// CreateRetries checks that Create of box relay-1 of fleet demo gets
// through the API's faults: the box runs, with an IPv4 address, after
// Posts create POSTs, every fault was served, and the cloud holds that
// one box.
func CreateRetries(t *testing.T, c Cloud, cases []CreateRetry) {
	create := "POST " + strings.TrimSuffix(c.BoxPath, "/")
	labels := map[string]string{"fleet": "demo"}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			b, api, add := c.New(t)
			for _, fl := range tc.Faults {
				api.AddFault(fl)
			}
			if tc.Racing {
				add("relay-1", labels)
			}
			box, err := b.Create(Ctx(t), c.Spec(t, "relay-1", labels))
			if err != nil {
				t.Fatal(err)
			}
			if box.Status != backend.StatusRunning || !box.IPv4.IsValid() {
				t.Errorf("box %+v", box)
			}
			if n := len(api.Requests(create)); n != tc.Posts {
				t.Errorf("%d %s, want %d", n, create, tc.Posts)
			}
			if n := api.FaultsLeft(); n != 0 {
				t.Errorf("%d faults not hit", n)
			}
			if all, err := b.List(Ctx(t), nil); err != nil || len(all) != 1 {
				t.Errorf("boxes %v, %v; want relay-1 alone", BoxNames(all), err)
			}
		})
	}
}
