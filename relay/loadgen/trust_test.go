package loadgen_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/loadgen"
)

// TestRunRefusesClearTextTrust: a relay's certificate hash fetched in
// clear text from another host, or a router answering in clear text from
// another host, is refused before any listener starts.
func TestRunRefusesClearTextTrust(t *testing.T) {
	base := loadgen.Options{Broadcast: "live", Listeners: 1, Duration: time.Second, Logger: testutil.Logger()}
	o := base
	o.URL = "http://192.0.2.10:4443/"
	if _, err := loadgen.Run(context.Background(), o); !errors.Is(err, client.ErrHashOverHTTP) {
		t.Fatalf("http:// relay on another host: %v, want ErrHashOverHTTP", err)
	}
	o = base
	o.Router = "http://192.0.2.10:8080"
	if _, err := loadgen.Run(context.Background(), o); !errors.Is(err, client.ErrClearTextRouter) {
		t.Fatalf("http:// router on another host: %v, want ErrClearTextRouter", err)
	}
}

// TestRunPinsTheRoutersHash: listeners pin the certificate hash the router
// answers, not what the relay says over HTTP; a router naming another
// certificate gets no listener connected.
func TestRunPinsTheRoutersHash(t *testing.T) {
	origin := startRelayAndPublisher(t, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"url": "http://%s/", "certificate_sha256": %q}`, origin.Addr(), strings.Repeat("ab", 32))
	}))
	defer srv.Close()
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		Router: srv.URL, Broadcast: "live", Listeners: 3, Duration: 200 * time.Millisecond, Late: time.Hour, Logger: testutil.Logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Connected != 0 || rep.Failed != 3 {
		t.Fatalf("report %+v: want every listener refused by the pin", rep)
	}
}
