package wire_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/router"
	"github.com/relayfleet/relayfleet/relay/wire"
)

// roundTrip decodes data into v strictly (a field the type lacks is an
// error, so none is silently dropped), encodes v again and checks that
// the JSON is the same document.
func roundTrip(t *testing.T, what string, data []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, data)
	}
	again, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal(data, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(again, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("%s does not round-trip:\nserved  %s\nencoded %s", what, data, again)
	}
}

func startRelay(t *testing.T) *relay.Relay {
	t.Helper()
	r, err := relay.Start(context.Background(), relay.Config{Listen: "127.0.0.1:0", MaxSessions: 7, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestStatsRoundTrips: what a real relay serves on /stats decodes into
// wire.Stats with no field unknown, and encodes back to the same JSON.
func TestStatsRoundTrips(t *testing.T) {
	r := startRelay(t)
	data := testutil.Get(t, fmt.Sprintf("http://%s/stats", r.Addr()))
	var st wire.Stats
	roundTrip(t, "/stats", data, &st)
	if st.MaxSessions != 7 || st.Headroom != 7 || st.CertificateSHA256 != r.CertificateHash() {
		t.Fatalf("decoded max_sessions %d, headroom %d, certificate %q; want 7, 7, %q", st.MaxSessions, st.Headroom, st.CertificateSHA256, r.CertificateHash())
	}
	if _, err := wire.ParseStats(data, "headroom", "subscribers", "udp_drops_total"); err != nil {
		t.Fatal(err)
	}
}

// TestRouterAnswersRoundTrip: a real router's /route and /relays, polling
// a real relay, decode strictly into wire.Route and wire.RelaysState.
func TestRouterAnswersRoundTrip(t *testing.T) {
	r := startRelay(t)
	base := fmt.Sprintf("http://%s/", r.Addr())
	file := wire.RelaysFile{Relays: []wire.Relay{{URL: base, Stats: base + "stats"}}}
	data, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "relays.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(router.Options{File: path, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rt.PollOnce(context.Background())
	srv := httptest.NewServer(rt)
	t.Cleanup(srv.Close)

	var route wire.Route
	roundTrip(t, "/route", testutil.Get(t, srv.URL+"/route?broadcast=x"), &route)
	if route.URL != base || route.CertificateSHA256 != r.CertificateHash() {
		t.Fatalf("route %+v, want %s with the relay's certificate hash", route, base)
	}
	var state wire.RelaysState
	roundTrip(t, "/relays", testutil.Get(t, srv.URL+"/relays"), &state)
	if len(state.Relays) != 1 || !state.Relays[0].Healthy || state.Relays[0].Headroom != 7 || state.Relays[0].URL != base {
		t.Fatalf("relays %+v, want the one relay healthy with headroom 7", state)
	}
	if _, err := wire.ParseRelaysFile(data); err != nil {
		t.Fatal(err)
	}
}

func TestParseStats(t *testing.T) {
	st, err := wire.ParseStats([]byte(`{"headroom": 3, "subscribers": 2, "future_field": 1}`), "headroom")
	if err != nil || st.Headroom != 3 || st.Subscribers != 2 {
		t.Fatalf("ParseStats = %+v, %v", st, err)
	}
	for in, want := range map[string]string{
		`{"subscribers": 2}`: "no headroom field",
		`not json`:           "stats: invalid character",
		`[1]`:                "stats: json: cannot unmarshal array",
	} {
		if _, err := wire.ParseStats([]byte(in), "headroom"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseStats(%s) = %v, want %q", in, err, want)
		}
	}
}

func TestParseRelaysFile(t *testing.T) {
	for in, want := range map[string]string{
		`{"relays": [{"url": "http://a/", "stats": "http://a/stats", "weight": 2}]}`: `unknown field "weight"`,
		`{"relays": []} {}`: "data after the JSON object",
	} {
		if _, err := wire.ParseRelaysFile([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseRelaysFile(%s) = %v, want %q", in, err, want)
		}
	}
}
