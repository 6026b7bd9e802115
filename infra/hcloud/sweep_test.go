package hcloud

import (
	"net/url"
	"strconv"
	"testing"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/backend/backendtest"
)

// cloud is what backendtest's shared tests need of hcloud: boxes are
// servers, listed by label selector.
var cloud = backendtest.Cloud{
	New: func(t *testing.T) (backend.Backend, *backendtest.API, func(string, map[string]string) string) {
		b, f := newTestBackend(t)
		return b, &f.API, func(name string, labels map[string]string) string {
			return strconv.FormatInt(f.addServer(name, labels), 10)
		}
	},
	Spec:     testSpec,
	Attempts: backendtest.FastRetry.Attempts,
	BoxPath:  "/servers/",
	ListFilter: func(method string, u *url.URL) (string, bool) {
		return u.Query().Get("label_selector"), method == "GET" && u.Path == "/servers"
	},
	SweepFilter: "event=finals,fleet=demo,tier=burst",
	Unavailable: "503 unavailable",
}

func TestSweepOrphans(t *testing.T)       { backendtest.SweepOrphans(t, cloud) }
func TestSweepDeleteRefused(t *testing.T) { backendtest.SweepDeleteRefused(t, cloud) }
