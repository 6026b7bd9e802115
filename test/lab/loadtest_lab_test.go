//go:build lab

package labtest

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision/loadtest"
)

// TestLoadtestLab measures a small lab box, converged with the relay of
// this checkout, on a lab of its own (bridge rflt0), with small steps:
// the load generator shares this machine's CPU with the box.
func TestLoadtestLab(t *testing.T) {
	// RELAYFLEET_LOADTEST_RELAY names a relay build to use instead of
	// this checkout's.
	lf := upLabFleet(t, labFleetSpec{LabDir: "/var/lib/relayfleet/lab-loadtest", Bridge: "rflt0", Subnet: "10.231.85.0/24",
		Relay: os.Getenv("RELAYFLEET_LOADTEST_RELAY"), Inventory: `version: 1
name: loadtest
access:
  load_generators: [10.231.0.0/16]
steady:
  - name: lt
    provider: lab
    shape: small
    count: 1
    processes: auto
    base_port: 4443
`})
	ctx := context.Background()
	dir, inv, relay := lf.Dir, lf.Inv, lf.Relay
	box := lf.hosts(t)[0]

	stdout, errOut, code := loadtestCLI(t, lf.args("--target", box.Name, "--steps", "50,100,150", "--step-duration", "6s",
		"--relay-binary", relay)...)
	t.Logf("fleet loadtest:\n%s", stdout)
	if code != 0 {
		// What the sampler reads on the box, to see why.
		ts, done := lf.targets(t)
		raw, rerr := ts[0].Run.Run(ctx, loadtest.SampleScript([]int{4443})+"systemctl show -p ControlGroup relay@4443.service; cat /proc/self/cgroup; ls /sys/fs/cgroup", nil)
		t.Logf("sample on the box (%v):\n%s", rerr, raw)
		done()
		t.Fatalf("fleet loadtest: exit %d: %s", code, errOut)
	}

	cal, err := inventories.LoadCalibration(filepath.Join(dir, inventories.CalibrationFile))
	if err != nil {
		t.Fatal(err)
	}
	calText, _ := os.ReadFile(filepath.Join(dir, inventories.CalibrationFile))
	t.Logf("calibration.yaml:\n%s", calText)
	if cal.Source != inventories.SourceLoadtest || cal.MeasuredOn == "" || cal.ListenersPerCore <= 0 {
		t.Errorf("calibration %+v", cal)
	}
	// fleet plan reads it beside the inventory.
	if got := inventories.Beside(inv, inventories.CalibrationFile); got != filepath.Join(dir, inventories.CalibrationFile) {
		t.Errorf("Beside = %s", got)
	}

	svg, err := os.ReadFile(filepath.Join(dir, loadtest.SVGFile))
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		if _, err := dec.Token(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Errorf("loadtest.svg does not parse: %v", err)
			}
			break
		}
	}

	var doc loadtest.Doc
	data, err := os.ReadFile(filepath.Join(dir, loadtest.JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Steps) != 3 || doc.Fit == nil {
		t.Fatalf("loadtest.json: %s", data)
	}
	for i, s := range doc.Steps {
		if s.Error != "" || s.Listeners < s.Target*9/10 || s.CPUCores <= 0 || s.RSSBytes <= 0 || s.BitrateBps <= 0 {
			t.Errorf("step %d: %+v", i, s)
		}
	}
	if first, last := doc.Steps[0], doc.Steps[len(doc.Steps)-1]; last.CPUCores <= first.CPUCores {
		t.Errorf("CPU does not rise with listeners: %.4f cores at %d, %.4f at %d", first.CPUCores, first.Listeners, last.CPUCores, last.Listeners)
	}
	for _, s := range doc.Steps {
		t.Logf("step %d listeners: %.4f cores (%s), %d bytes, %d lost, %d late, %d rcvbuf errors, %.0f bit/s over %.1fs", s.Listeners, s.CPUCores, s.CPUFrom, s.RSSBytes, s.FramesLost, s.LateFrames, s.RcvbufErrors, s.BitrateBps, s.Seconds)
	}
	if keep := os.Getenv("RELAYFLEET_LOADTEST_KEEP"); keep != "" {
		testutil.WriteFile(t, filepath.Join(keep, loadtest.SVGFile), svg, 0o644)
		testutil.WriteFile(t, filepath.Join(keep, loadtest.JSONFile), data, 0o644)
		testutil.WriteFile(t, filepath.Join(keep, inventories.CalibrationFile), calText, 0o644)
	}

	// One process, BOX:PORT, into another directory; a port with no relay
	// is bad input. The steps start above the last run's: the relay keeps
	// the memory of a larger load for a while. They span 200 listeners
	// over 4 s each: with 100 over 3 s, the noise of this shared 2-core
	// machine once gave a falling CPU fit (0.13 cores at 150 listeners is
	// the scale of what is measured).
	one := t.TempDir()
	stdout, errOut, code = loadtestCLI(t, lf.args("--target", box.Name+":4443", "--steps", "200,300,400", "--step-duration", "4s",
		"--relay-binary", relay, "--out", one, "--json")...)
	if code != 0 {
		t.Fatalf("--target %s:4443: exit %d: %s\n%s", box.Name, code, errOut, stdout)
	}
	var doc1 loadtest.Doc
	if err := json.Unmarshal([]byte(stdout), &doc1); err != nil || len(doc1.Steps) != 3 || doc1.Fit == nil || doc1.Files["calibration"] != filepath.Join(one, inventories.CalibrationFile) {
		t.Errorf("--json: %v\n%s", err, stdout)
	}
	if _, err := inventories.LoadCalibration(filepath.Join(one, inventories.CalibrationFile)); err != nil {
		t.Error(err)
	}
	_, errOut, code = loadtestCLI(t, lf.args("--target", box.Name+":4999", "--steps", "20,40,60", "--relay-binary", relay)...)
	if code != cli.ExitUsage || !strings.Contains(errOut, "flag --target: "+box.Name+" has no active relay@4999.service (active: relay@4443.service)") {
		t.Errorf("--target %s:4999: exit %d, %s", box.Name, code, errOut)
	}
}

// loadtestCLI runs fleet loadtest args.
func loadtestCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return fleet(t, append([]string{"loadtest"}, args...)...)
}
