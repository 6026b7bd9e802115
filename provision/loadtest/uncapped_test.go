package loadtest

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
)

// TestCheckUncapped: a load test whose listeners per relay process pass
// the fleet's per-address cap is refused, naming access.load_generators,
// when the fleet file lists no load generator; it goes on with a note
// when the list does not hold this machine's address (a NAT's may be),
// and quietly when it does or the cap leaves room.
func TestCheckUncapped(t *testing.T) {
	zero := 0
	local := netip.MustParseAddr("10.231.77.1")
	lab := inventories.Access{LoadGenerators: []string{"10.231.0.0/16"}}
	elsewhere := inventories.Access{LoadGenerators: []string{"198.51.100.7"}}
	for _, tc := range []struct {
		name       string
		a          inventories.Access
		perProcess int
		err, note  string
	}{
		{name: "within the default cap", perProcess: 64},
		{name: "past the default cap, no load generators", perProcess: 65,
			err: "fleet.yaml: access.load_generators: empty, and the fleet's relays admit 64 sessions from one address while this load test opens up to 65 a relay process from this machine (10.231.77.1): list its address there and run fleet converge"},
		{name: "no cap", a: inventories.Access{MaxSessionsPerAddress: &zero}, perProcess: 5000},
		{name: "listed", a: lab, perProcess: 5000},
		{name: "listed elsewhere", a: elsewhere, perProcess: 5000, note: "this machine's address toward the box, 10.231.77.1, is not in access.load_generators"},
	} {
		note, err := CheckUncapped("fleet.yaml", tc.a, local, tc.perProcess)
		switch {
		case tc.err != "":
			var ue *cli.UsageError
			if err == nil || err.Error() != tc.err || !errors.As(err, &ue) {
				t.Errorf("%s: err %v, want the usage error %q", tc.name, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.note == "" && note != "" || !strings.HasPrefix(note, tc.note):
			t.Errorf("%s: note %q, want %q", tc.name, note, tc.note)
		}
	}
	if got := LocalAddrToward("127.0.0.1"); got != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("LocalAddrToward(127.0.0.1) = %v", got)
	}
}
