//go:build lab

package labtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

// TestConvergeStaticHost adopts a lab box as a static server, the way a
// dedicated root server is listed in an inventory: by address, user and
// host key, brought up with fleet up and reached with an SSH key file.
// fleet converge and status then find it in the stack; a wrong host key in
// the inventory is refused by the next up before anything runs.
func TestConvergeStaticHost(t *testing.T) {
	t.Parallel() // its own lab; it measures nothing
	var box lab.Box
	lf := upLabFleet(t, labFleetSpec{LabDir: filepath.Join(os.TempDir(), "relayfleet-static-test"), Bridge: "rfstat0", Subnet: "10.231.83.0/24",
		Static: func(t *testing.T, l *lab.Lab) string {
			b, err := l.Create(context.Background(), lab.Spec{Name: "root1", Shape: lab.Small})
			if err != nil {
				t.Fatal(err)
			}
			box = b
			return fmt.Sprintf(`version: 1
name: adopted
steady:
  - name: roots
    provider: static
    shape: hetzner-robot/ax42
    hosts:
      - {address: %q, user: root, host_key: %q}
`, box.Address.String(), strings.TrimSpace(box.HostKey))
		}})
	hosts := lf.hosts(t)
	if len(hosts) != 1 || hosts[0].Backend != "static" || hosts[0].Address != box.Address.String() || hosts[0].HostKey != strings.TrimSpace(box.HostKey) {
		t.Fatalf("stack hosts %+v, want the adopted box %s", hosts, box.Address)
	}
	args := lf.args("--relay-binary", lf.Relay)
	out, errOut, code := fleet(t, append([]string{"converge"}, args...)...)
	if code != 0 || !strings.Contains(out, "converged, nothing to change") || !strings.Contains(out, hosts[0].Name) {
		t.Fatalf("converge after up: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = fleet(t, append([]string{"status"}, lf.args()...)...)
	if code != 0 || !strings.Contains(out, "relay@4443.service") {
		t.Errorf("status: exit %d\n%s%s", code, out, errOut)
	}
	// A wrong pinned key in the inventory is refused before anything runs.
	other := testKey(t)
	testutil.WriteFile(t, lf.Inv, []byte(strings.Replace(string(must(os.ReadFile(lf.Inv))), strings.Fields(box.HostKey)[1], strings.Fields(strings.TrimSpace(string(sshPublic(other))))[1], 1)), 0o644)
	out, errOut, code = lf.up(t)
	if code == 0 || !strings.Contains(out+errOut, "host key") {
		t.Errorf("up with a wrong host key: exit %d, %s%s", code, tail(out, 5), errOut)
	}
}
