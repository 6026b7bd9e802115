//go:build lab

package labtest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	infralab "github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/test/systest"
)

// The lab of TestLabUpSignal, its own.
const (
	sigLabDir = "/var/lib/relayfleet/lab-sig"
	sigBridge = "rfsig0"
	sigSubnet = "10.231.119.0/24"
)

// TestLabUpSignal: SIGTERM while fleet lab up boots its boxes ends it
// promptly (exit 143, one line), and the boxes it started are gone, with
// their bridge: fleet lab status lists none.
func TestLabUpSignal(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Skipf(t, "needs root (lab boxes)")
	}
	testutil.Require(t, "systemd-nspawn", "systemd-container")
	bin, _ := systest.Build(t)
	lab := []string{"--dir", sigLabDir, "--bridge", sigBridge, "--subnet", sigSubnet, "--images", labImages()}
	t.Cleanup(func() {
		if out, err := exec.Command(bin, append([]string{"lab", "down"}, lab...)...).CombinedOutput(); err != nil {
			t.Errorf("fleet lab down: %v\n%s", err, out)
		}
	})
	// Busy once the first box is made and boots.
	booting := func(int) bool {
		_, err := os.Stat(filepath.Join(sigLabDir, "boxes", "box1", "box.json"))
		return err == nil
	}
	systest.Interrupt(t, bin, "fleet lab up", append([]string{"lab", "up", "2"}, lab...), nil, booting, syscall.SIGTERM)

	out, err := exec.Command(bin, append([]string{"lab", "status", "--json"}, lab...)...).Output()
	if err != nil {
		t.Fatalf("fleet lab status: %v", err)
	}
	var boxes []infralab.BoxStatus
	if err := json.Unmarshal(out, &boxes); err != nil {
		t.Fatalf("fleet lab status --json: %v: %s", err, out)
	}
	if len(boxes) != 0 {
		t.Errorf("boxes left after the signal: %+v", boxes)
	}
	if err := exec.Command("ip", "link", "show", sigBridge).Run(); err == nil {
		t.Errorf("bridge %s left after the signal", sigBridge)
	}
}
