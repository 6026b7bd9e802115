//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/capacity"
	"github.com/relayfleet/relayfleet/test/systest"
)

// The set-up the end-to-end tests share: the Pulumi CLI, fleet and relay
// built once for all the tests, a fresh work directory per test, and
// e2eLab, one test's own lab with the fleet command pointed at it.

// TestMain runs the tests (systest.Main): no passphrase or ssh-agent
// from the environment, the shared build removed at the end.
func TestMain(m *testing.M) {
	os.Exit(systest.Main(m))
}

// e2eBuildSetup finds the Pulumi CLI, builds fleet and relay (once) and
// makes a fresh work directory; it needs no root.
func e2eBuildSetup(t *testing.T) (cli, work, fleetBin, relayBin string) {
	t.Helper()
	cli, err := program.FindPulumi("")
	if err != nil {
		t.Fatalf("%v (make pulumi)", err)
	}
	work = t.TempDir()
	fleetBin, relayBin = systest.Build(t)
	return cli, work, fleetBin, relayBin
}

// e2eSetup checks for root and the Pulumi CLI, builds fleet and relay
// (once) and makes a fresh work directory.
func e2eSetup(t *testing.T) (cli, images, work, fleetBin, relayBin string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("e2e: root is needed for lab boxes")
	}
	cli, work, fleetBin, relayBin = e2eBuildSetup(t)
	return cli, systest.LabImages(), work, fleetBin, relayBin
}

func writeInventory(t *testing.T, path string, count int, shape string) {
	t.Helper()
	data, err := os.ReadFile("../../inventories/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(data), "    count: 2\n", "    count: "+string(rune('0'+count))+"\n", 1)
	s = strings.Replace(s, "    shape: small\n    count:", "    shape: "+shape+"\n    count:", 1)
	if !strings.Contains(s, "count: "+string(rune('0'+count))) {
		t.Fatal("lab.yaml has no steady count: 2 to change")
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// lastLine is a fleet command's one-line error (systest.LastLine).
func lastLine(s string) string { return systest.LastLine(s) }

// e2eLab is one end-to-end test's world: e2eSetup's binaries and work
// directory, a state directory in it, the test's own lab (its own
// directory, bridge and subnet), and the fleet command pointed at them.
//
// Tests on labs of their own run side by side (t.Parallel; make e2e's
// -parallel): a lab's boxes, bridge, subnet, cgroups and veth ends are its
// own (infra/lab names the nspawn machine after the bridge), a state
// directory is the test's, and every address the test serves on is the
// lab's or a free loopback port. A test that sets the process's
// environment (t.Setenv) cannot: it runs alone, before the others.
type e2eLab struct {
	t                      *testing.T
	cli, images, work      string
	fleetBin, relayBin     string
	state                  string // work/state
	inv                    string // when set, --inventory of every fleet run
	lab                    *lab.Lab
	labDir, bridge, subnet string
	owned                  map[string]string // the labels of the boxes the test owns; nil: all of the lab's
	failed                 string            // what fatalf said
}

// newE2ELab runs e2eSetup and opens the lab at dir on bridge and subnet.
// It deletes the boxes carrying owned (nil: every box) that an
// interrupted run left there, and, when the test ends, those it leaves,
// then cleans the lab up.
func newE2ELab(t *testing.T, dir, bridge, subnet string, owned map[string]string) *e2eLab {
	t.Helper()
	e := &e2eLab{t: t, labDir: dir, bridge: bridge, subnet: subnet, owned: owned}
	// Registered first, so it runs last: CI shows the last lines before
	// "--- FAIL", which the processes' logs otherwise fill.
	t.Cleanup(func() {
		if t.Failed() && e.failed != "" {
			t.Logf("FAILED: %s", e.failed)
		}
	})
	e.cli, e.images, e.work, e.fleetBin, e.relayBin = e2eSetup(t)
	e.state = filepath.Join(e.work, "state")
	l, err := lab.New(lab.Config{Dir: dir, ImageDir: e.images, Bridge: bridge, Subnet: netip.MustParsePrefix(subnet)})
	if err != nil {
		t.Fatal(err)
	}
	e.lab = l
	for _, b := range e.boxes(owned) { // left by an interrupted run
		l.Delete(context.Background(), b.Name)
	}
	t.Cleanup(func() {
		for _, b := range e.boxes(owned) {
			l.Delete(context.Background(), b.Name)
		}
		l.Cleanup(context.Background())
	})
	return e
}

// fatalf fails the test as t.Fatalf does, and repeats the message after
// every cleanup's output (see newE2ELab).
func (e *e2eLab) fatalf(format string, args ...any) {
	e.t.Helper()
	e.failed = fmt.Sprintf(format, args...)
	e.t.Fatal(e.failed)
}

// slogLines is what a fleet command logged (its slog lines), without the
// Pulumi CLI's output around them: short enough for a failure message.
func slogLines(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, " level=") {
			keep = append(keep, strings.TrimSpace(l))
		}
	}
	return strings.Join(keep, "\n")
}

// boxes lists the lab's boxes carrying labels (nil: all).
func (e *e2eLab) boxes(labels map[string]string) []lab.Box {
	e.t.Helper()
	bs, err := e.lab.List(context.Background(), labels)
	if err != nil {
		e.t.Fatal(err)
	}
	return bs
}

// labFlags point fleet at the lab.
func (e *e2eLab) labFlags() []string {
	return systest.LabFlags(e.labDir, e.images, e.bridge, e.subnet)
}

// withFlags is args with the flags that point fleet at this test's state,
// Pulumi CLI and lab (and inventory, when e.inv is set), and the relay
// binary but for destroy. "events report" gets none: it reads what its
// args name.
func (e *e2eLab) withFlags(args ...string) []string {
	if len(args) > 1 && args[0] == "events" && args[1] == "report" {
		return args
	}
	args = append(args, "--state-dir", e.state, "--pulumi", e.cli)
	args = append(args, e.labFlags()...)
	if e.inv != "" {
		args = append(args, "--inventory", e.inv)
	}
	if args[0] != "destroy" {
		args = append(args, "--relay-binary", e.relayBin)
	}
	return args
}

// cmd is fleet with args as they are, the empty passphrase in its
// environment and a process group of its own (a test can stop or kill it
// and its Pulumi CLI together).
func (e *e2eLab) cmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.fleetBin, args...)
	cmd.Env = append(os.Environ(), "PULUMI_CONFIG_PASSPHRASE=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// run runs fleet with withFlags(args), stdin when not nil, for at most 20
// minutes, and returns its output and exit code; a fleet that does not
// start fails the test.
func (e *e2eLab) run(stdin io.Reader, args ...string) (string, int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := e.cmd(ctx, e.withFlags(args...)...)
	cmd.Stdin = stdin
	start := time.Now()
	out, code := systest.Combined(e.t, cmd)
	e.t.Logf("fleet %s: exit %d after %.1fs\n%s", strings.Join(args[:min(len(args), 5)], " "), code, time.Since(start).Seconds(), out)
	return out, code
}

// fleet is run without stdin; an exit other than 0 fails the test.
func (e *e2eLab) fleet(args ...string) string {
	e.t.Helper()
	out, code := e.run(nil, args...)
	if code != 0 {
		e.t.Fatalf("fleet %s: exit %d: %s", args[0], code, lastLine(out))
	}
	return out
}

// e2eSmallBoxCapacity is what one lab/small box carries by the shipped
// calibration, as fleet plan and fleet events size it: tests that want a
// given number of burst boxes size their peak with it, so that they follow
// the calibration when the relay's measurements move it.
func e2eSmallBoxCapacity(t *testing.T) int {
	t.Helper()
	cat, err := inventories.LoadCatalogue(inventories.Embedded(inventories.ProvidersFile))
	if err != nil {
		t.Fatal(err)
	}
	cal, err := inventories.LoadCalibration(inventories.Embedded(inventories.CalibrationFile))
	if err != nil {
		t.Fatal(err)
	}
	_, sh, err := cat.Lookup("lab/small")
	if err != nil {
		t.Fatal(err)
	}
	return capacity.PerBox(capacity.Box{Cores: sh.Cores, RAM: sh.RAM, Processes: 1, Uplink: sh.Uplink}, cal).Capacity
}

// e2eEventFile is an events file for the fleet in lab.yaml with one event,
// name, on 2026-12-01 from 20:00 to 21:00 UTC, broadcast live/NAME, of
// peak listeners and at most two small burst boxes.
func e2eEventFile(name string, peak int) string {
	return fmt.Sprintf(`version: 1
fleet: lab.yaml
events:
  - name: %s
    start: 2026-12-01T20:00:00Z
    end: 2026-12-01T21:00:00Z
    peak_listeners: %d
    broadcast: live/%s
    burst:
      provider: lab
      shape: small
      max: 2
    lead_time: 10m
    drain_time: 5m
`, name, peak, name)
}

// record is the event's record in the state directory; none fails the
// test.
func (e *e2eLab) record(event string) *events.Record {
	e.t.Helper()
	rec, ok, err := events.ReadRecord(e.state, event)
	if err != nil || !ok {
		e.t.Fatalf("no record: %v", err)
	}
	return rec
}

// startRouter runs the real router on the relays file fleet keeps, on a
// free loopback port, until ctx ends or the test does, and returns the
// port.
func (e *e2eLab) startRouter(ctx context.Context) int {
	e.t.Helper()
	port := freePort(e.t)
	testutil.Start(e.t, "router", exec.CommandContext(ctx, e.relayBin, "router", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--relays", filepath.Join(e.state, program.RelaysFile), "--poll", "200ms", "--log-level", "warn"))
	return port
}
