package digitalocean

import (
	"net/url"
	"strconv"
	"testing"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/backend/backendtest"
)

// cloud is what backendtest's shared tests need of DigitalOcean: boxes
// are droplets, listed by tag, two a page.
var cloud = backendtest.Cloud{
	New: func(t *testing.T) (backend.Backend, *backendtest.API, func(string, map[string]string) string) {
		b, f := newTestBackend(t)
		return b, &f.API, func(name string, labels map[string]string) string {
			return strconv.Itoa(f.addDroplet(name, Tags(labels)...))
		}
	},
	Spec:     testSpec,
	Attempts: backendtest.FastRetry.Attempts,
	BoxPath:  "/v2/droplets/",
	ListFilter: func(method string, u *url.URL) (string, bool) {
		return u.Query().Get("tag_name"), method == "GET" && u.Path == "/v2/droplets" && u.Query().Get("page") == "1"
	},
	SweepFilter: "fleet:demo",
	Unavailable: "503 service_unavailable",
}

func TestSweepOrphans(t *testing.T)       { backendtest.SweepOrphans(t, cloud) }
func TestSweepDeleteRefused(t *testing.T) { backendtest.SweepDeleteRefused(t, cloud) }
