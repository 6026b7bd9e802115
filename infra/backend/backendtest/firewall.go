package backendtest

import (
	"encoding/json"
	"net/netip"
	"slices"
	"testing"

	"github.com/relayfleet/relayfleet/infra/backend"
)

// The admin range and relay ports the firewall tests ask for.
var (
	Admin = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	Ports = [2]uint16{4443, 4446}
)

// EnsureFirewall has b ensure firewall name for the boxes with labels,
// with ports and admin, and checks that it succeeded and that what it
// wrote to the API (see API.Writes) is writes, in order; it returns the
// firewall's id.
func EnsureFirewall(t *testing.T, b backend.Firewaller, api *API, name string, labels map[string]string, ports [2]uint16, admin []netip.Prefix, writes ...string) string {
	t.Helper()
	n := len(api.Writes())
	id, err := b.EnsureFirewall(Ctx(t), name, labels, ports, admin)
	if err != nil {
		t.Fatalf("EnsureFirewall %s %v: %v", name, labels, err)
	}
	if w := api.Writes()[n:]; !slices.Equal(w, writes) {
		t.Errorf("EnsureFirewall %s %v wrote %v, want %v", name, labels, w, writes)
	}
	return id
}

// DeleteFirewall deletes firewall id, checks with exists that it is
// gone, and deletes it again, which is no error.
func DeleteFirewall(t *testing.T, b backend.Firewaller, id string, exists func() bool) {
	t.Helper()
	if err := b.DeleteFirewall(Ctx(t), id); err != nil {
		t.Fatal(err)
	}
	if exists() {
		t.Error("firewall not deleted")
	}
	if err := b.DeleteFirewall(Ctx(t), id); err != nil {
		t.Errorf("second DeleteFirewall: %v", err)
	}
}

// FirewallRefusal is a case of FirewallRefusals.
type FirewallRefusal struct {
	Name   string
	Labels map[string]string
	Admin  []netip.Prefix
	Want   string // the error, to the letter
}

// FirewallRefusals checks that b refuses to ensure firewall "fw" for each
// case, with the case's error, and sends no request to the API.
func FirewallRefusals(t *testing.T, b backend.Firewaller, api *API, cases []FirewallRefusal) {
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			_, err := b.EnsureFirewall(Ctx(t), "fw", tc.Labels, [2]uint16{4443, 4443}, tc.Admin)
			if err == nil || err.Error() != tc.Want {
				t.Errorf("err = %v, want %q", err, tc.Want)
			}
		})
	}
	if l := api.Requests(""); len(l) != 0 {
		t.Errorf("requests sent for a refused firewall: %v", l)
	}
}

// Recode is v, a value of a fake's JSON state, decoded as a T (through
// JSON); what does not decode is left zero.
func Recode[T any](v any) T {
	var out T
	b, _ := json.Marshal(v)
	json.Unmarshal(b, &out)
	return out
}
