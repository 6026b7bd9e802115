//go:build lab

package labtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/sysctl"
	"github.com/relayfleet/relayfleet/test/systest"
)

// The lab of TestRolloutInterruptedLab: its own directory, bridge and
// subnet, so that it runs beside the other lab tests.
const (
	cutLabDir  = "/var/lib/relayfleet/lab-safb"
	cutBridge  = "rfsafb0"
	cutSubnet  = "10.231.103.0/24"
	cutFleet   = "safb-cut"
	cutBoxName = "safbcut1"
)

// TestRolloutInterruptedLab: a fleet rollout stopped mid-way leaves no box
// on mixed releases or with a process draining, once re-run.
//
//   - Ctrl-C (SIGINT) while the second process drains: the rollout rolls the
//     box back on a fresh context; a re-run then moves every process.
//   - Ctrl-C, then the rollout killed before its rollback ran (the
//     terminal closed, the laptop slept): current already points at the new
//     release, one process runs it, the other runs the old one and is
//     draining. fleet status marks it STALE; a re-run of the rollout
//     resumes and moves it.
//   - The same cut, repaired by fleet converge instead: it restarts the
//     stale process (moved out first) and nothing is left draining.
func TestRolloutInterruptedLab(t *testing.T) {
	t.Parallel() // its own lab; it measures nothing
	if os.Geteuid() != 0 {
		t.Fatal("lab tests need root")
	}
	dir := t.TempDir()
	fleetBin, v1 := systest.Build(t)
	// Other builds: the same relay with a marker after its ELF sections.
	data, err := os.ReadFile(v1)
	if err != nil {
		t.Fatal(err)
	}
	builds := map[string]string{"v1": v1}
	digest := map[string]string{"v1": provision.Digest(data)}
	for _, v := range []string{"v2", "v3", "v4"} {
		b := append(append([]byte{}, data...), []byte("\nrelayfleet-cut-test-"+v+"\n")...)
		builds[v] = filepath.Join(dir, "relay-"+v)
		digest[v] = provision.Digest(b)
		if err := os.WriteFile(builds[v], b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	name := map[string]string{}
	for v, d := range digest {
		name[d] = v
	}

	// The fleet, up on v1.
	lf := upLabFleet(t, labFleetSpec{LabDir: cutLabDir, Bridge: cutBridge, Subnet: cutSubnet, Relay: v1, Inventory: fmt.Sprintf(`version: 1
name: %s
access:
  public_listen: [live/]
  load_generators: [10.231.0.0/16]
steady:
  - name: cut
    provider: lab
    shape: medium
    count: 1
    processes: 2
    base_port: 4443
`, cutFleet)})
	ctx := context.Background()
	targets, done := lf.targets(t)
	t.Cleanup(done)
	run := targets[0].Run
	boxAddr := lf.hosts(t)[0].Address

	// sysctl floors on a real kernel: keys of the box's own network
	// namespace, one set above its floor (the operator's), one below.
	sysctlFloorsLab(t, run)

	insts, err := provision.ActiveInstances(ctx, run)
	if err != nil || len(insts) != 2 {
		t.Fatalf("relay instances %v, %v; want 2", insts, err)
	}

	// boxState says what current points at, what each process runs and
	// which drain, by build name.
	type boxState struct {
		current  string
		runs     map[string]string
		draining []string
	}
	read := func() boxState {
		t.Helper()
		cur, _, err := provision.Releases{}.Current(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		runs, err := provision.Releases{}.Running(ctx, run, insts)
		if err != nil {
			t.Fatal(err)
		}
		dr, err := provision.DrainingInstances(ctx, run, insts)
		if err != nil {
			t.Fatal(err)
		}
		s := boxState{current: name[cur], runs: map[string]string{}, draining: dr}
		for i, r := range runs {
			s.runs[i] = name[r]
			if s.runs[i] == "" {
				s.runs[i] = "?" + r
			}
		}
		return s
	}
	// allOn fails the test unless current and every process are on v and
	// none drains.
	allOn := func(what, v string) {
		t.Helper()
		s := read()
		ok := s.current == v && len(s.draining) == 0
		for _, inst := range insts {
			ok = ok && s.runs[inst] == v
		}
		if !ok {
			t.Errorf("%s: current %s, processes run %v, draining %v; want all on %s, none draining", what, s.current, s.runs, s.draining, v)
		}
	}
	allOn("after up", "v1")
	// The relay profile's file on the box: each key at the larger of its
	// floor and what the kernel has.
	vals, err := provision.ReadSysctl(ctx, run, sysctl.Relay())
	if err != nil {
		t.Fatal(err)
	}
	conf, err := run.Run(ctx, "cat "+sysctl.Relay().File, nil)
	if err != nil {
		t.Fatal(err)
	}
	file, err := sysctl.Parse(conf)
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range sysctl.Relay().Settings {
		has := sysctl.Setting{Key: set.Key, Value: vals[set.Key], AtLeast: true}
		if !set.Satisfied(file[set.Key]) || (vals[set.Key] != "" && !has.Satisfied(file[set.Key])) {
			t.Errorf("%s sets %s = %s: want at least the floor %s and the kernel's %s", sysctl.Relay().File, set.Key, file[set.Key], set.Value, vals[set.Key])
		}
	}

	// rolloutCut starts fleet rollout to build v as its own process and
	// sends it sig once the first process runs v and the second drains;
	// kill, when set, follows at once with SIGKILL (before the rollback can
	// run). It returns the rollout's output.
	rolloutCut := func(v string, sig syscall.Signal, kill bool) string {
		t.Helper()
		p := testutil.Start(t, "rollout-"+v, exec.Command(fleetBin, append([]string{"rollout"}, lf.args("--relay-binary", builds[v], "--canary-bake", "0s",
			"--router-poll", "3s", "--rebalance=false")...)...)) // no router: each drained process waits 6 s before its shed
		deadline := time.Now().Add(3 * time.Minute)
		for {
			s := read()
			if s.runs[insts[0]] == v && len(s.draining) == 1 && s.draining[0] == insts[1] {
				t.Logf("cut with %v (kill %v): current %s, processes run %v, draining %v", sig, kill, s.current, s.runs, s.draining)
				break
			}
			if p.Exited() {
				t.Fatalf("the rollout ended before the cut: %v\n%s", p.Wait(), p.Log())
			}
			if time.Now().After(deadline) {
				p.Cmd.Process.Kill()
				t.Fatalf("the rollout never reached its second process: %+v\n%s", s, p.Log())
			}
			time.Sleep(100 * time.Millisecond)
		}
		p.Cmd.Process.Signal(sig)
		if kill {
			p.Cmd.Process.Kill()
		}
		select {
		case <-p.Done():
			t.Logf("fleet rollout %s, cut: %v\n%s", v, p.Wait(), p.Log())
		case <-time.After(5 * time.Minute):
			p.Cmd.Process.Kill()
			t.Fatalf("the rollout did not end after %v:\n%s", sig, p.Log())
		}
		if kill {
			// A killed rollout leaves the fleet's lease held: the next
			// command is refused naming it, until fleet unlock finds its
			// holder dead and clears it.
			_, errOut, code := fleet(t, append([]string{"converge"}, lf.args()...)...)
			if code == 0 || !strings.Contains(errOut, `locked by "fleet rollout"`) {
				t.Errorf("a command after the killed rollout: exit %d, %q; want refused, naming the rollout's lease", code, errOut)
			}
			out, errOut, code := fleet(t, "unlock", "--inventory", lf.Inv, "--state-dir", lf.State)
			t.Logf("fleet unlock: exit %d\n%s%s", code, out, errOut)
			if code != 0 {
				t.Fatalf("fleet unlock after the killed rollout: exit %d", code)
			}
		}
		return p.Log()
	}
	rollout := func(v string) string {
		t.Helper()
		out, errOut, code := fleet(t, append([]string{"rollout"}, lf.args("--relay-binary", builds[v], "--canary-bake", "0s", "--router-poll", "500ms", "--rebalance=false")...)...)
		t.Logf("fleet rollout %s: exit %d\n%s%s", v, code, out, errOut)
		if code != 0 {
			t.Fatalf("re-run of the rollout to %s: exit %d", v, code)
		}
		return out
	}

	// 1. Ctrl-C: rolled back on a fresh context, then a re-run moves all.
	out := rolloutCut("v2", syscall.SIGINT, false)
	if !strings.Contains(out, "rolled back to") {
		t.Errorf("Ctrl-C: the rollout did not roll back:\n%s", out)
	}
	allOn("after Ctrl-C", "v1")
	rollout("v2")
	allOn("after the re-run", "v2")

	// 2. Ctrl-C, then killed before the rollback: status reports the
	// stale process; a re-run resumes.
	rolloutCut("v3", syscall.SIGINT, true)
	s := read()
	if s.current != "v3" || s.runs[insts[1]] == "v3" {
		t.Fatalf("the cut left current %s, processes on %v: want current on v3 and %s behind", s.current, s.runs, insts[1])
	}
	out, _, code := fleet(t, append([]string{"status", "--json"}, lf.args()...)...)
	var st struct {
		Boxes []provision.BoxReport `json:"boxes"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || len(st.Boxes) != 1 {
		t.Fatalf("fleet status --json: exit %d, %v\n%s", code, err, out)
	}
	stale := 0
	for _, p := range st.Boxes[0].Processes {
		if p.Stale {
			stale++
			if p.Unit != insts[1] || !p.Draining || p.Release != digest["v2"] {
				t.Errorf("stale process %+v: want %s, on v2, draining", p, insts[1])
			}
		}
	}
	if stale != 1 {
		t.Errorf("fleet status: %d stale processes, want 1: %+v", stale, st.Boxes[0].Processes)
	}
	text, _, _ := fleet(t, append([]string{"status"}, lf.args()...)...)
	t.Logf("fleet status after the cut:\n%s", text)
	if !strings.Contains(text, "STALE") || !strings.Contains(text, "1 process not on the current release, 1 draining") {
		t.Errorf("fleet status does not show the process left behind:\n%s", text)
	}
	out = rollout("v3")
	if !strings.Contains(out, "resumed") {
		t.Errorf("the re-run did not say it resumed:\n%s", out)
	}
	allOn("after the resumed rollout", "v3")

	// 3. The same cut, repaired by converge: the cut rollout recorded
	// nothing, so converge puts the fleet's release (v3, the last
	// rollout that completed) back on every process, the one the cut
	// moved to v4 included; v4 given by hand is refused.
	rolloutCut("v4", syscall.SIGINT, true)
	_, errOut, code := fleet(t, append([]string{"converge"}, lf.args("--relay-binary", builds["v4"])...)...)
	if code != 2 || !strings.Contains(errOut, "fleet rollout") {
		t.Errorf("converge to the cut rollout's build by hand: exit %d, %q; want 2, pointing to fleet rollout", code, errOut)
	}
	out, errOut, code = fleet(t, append([]string{"converge"}, lf.args()...)...)
	t.Logf("fleet converge after the cut: exit %d\n%s%s", code, out, errOut)
	if code != 0 {
		t.Errorf("converge after the cut: exit %d, want it to restart the process the cut moved", code)
	}
	allOn("after converge", "v3")
	out, _, code = fleet(t, append([]string{"converge", "--check"}, lf.args()...)...)
	if code != 0 {
		t.Errorf("converge --check after the repair: exit %d\n%s", code, out)
	}

	// 4. The box as a static server with a stock sshd: RSA, ECDSA and
	// Ed25519 host keys. Brought up (a stack of its own) by address with
	// its RSA key pinned, then converged through that stack.
	if _, err := run.Run(ctx, `ssh-keygen -A >/dev/null && printf 'HostKey /etc/ssh/ssh_host_rsa_key\nHostKey /etc/ssh/ssh_host_ecdsa_key\n' >/etc/ssh/sshd_config.d/zz-stock.conf && systemctl reload ssh`, nil); err != nil {
		t.Fatal(err)
	}
	keys, err := run.Run(ctx, "cat /etc/ssh/ssh_host_rsa_key.pub", nil)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey := strings.Join(strings.Fields(string(keys))[:2], " ")
	static := filepath.Join(dir, "static.yaml")
	if err := os.WriteFile(static, fmt.Appendf(nil, `version: 1
name: %s
access:
  public_listen: [live/]
  load_generators: [10.231.0.0/16]
steady:
  - name: roots
    provider: static
    shape: hetzner-robot/ax42
    processes: 2
    base_port: 4443
    hosts:
      - {address: %q, user: root, host_key: %q}
`, cutFleet, boxAddr, rsaKey), 0o644); err != nil {
		t.Fatal(err)
	}
	staticArgs := []string{"--inventory", static, "--relay-binary", builds["v4"], "--ssh-key", lf.Lab.AdminKeyPath(), "--state-dir", filepath.Join(dir, "static-state")}
	out, errOut, code = fleet(t, append([]string{"up", "--yes", "--pulumi", lf.pulumi}, staticArgs...)...)
	if code != 0 {
		t.Fatalf("fleet up of the box as a static host, its RSA key pinned: exit %d\n%s%s", code, tail(out, 8), errOut)
	}
	out, errOut, code = fleet(t, append([]string{"converge"}, staticArgs...)...)
	t.Logf("fleet converge of the box as a static host, its RSA key pinned (of 3): exit %d\n%s%s", code, out, errOut)
	if code != 0 || !strings.Contains(out, "converged, nothing to change") {
		t.Errorf("converge to a stock sshd pinned to its RSA key: exit %d", code)
	}
}

// sysctlFloorsLab converges a profile of two keys of the box's own network
// namespace (writable in a lab box) as floors: somaxconn, which an
// operator set to 8192, above its floor of 1024, and tcp_max_syn_backlog,
// at 512, below its floor of 4096. The operator's value stays in the
// kernel and goes into the file; the other is raised; loading the file
// again (as the next boot does) lowers nothing.
func sysctlFloorsLab(t *testing.T, run provision.Runner) {
	t.Helper()
	ctx := context.Background()
	prof := sysctl.Profile{Name: "floors-test", File: "/etc/sysctl.d/61-relayfleet-floors-test.conf", Settings: []sysctl.Setting{
		{Key: "net.core.somaxconn", Value: "1024", Reason: "test floor", AtLeast: true},
		{Key: "net.ipv4.tcp_max_syn_backlog", Value: "4096", Reason: "test floor", AtLeast: true},
	}}
	if _, err := run.Run(ctx, "sysctl -q -w net.core.somaxconn=8192 net.ipv4.tcp_max_syn_backlog=512", nil); err != nil {
		t.Fatal(err)
	}
	res, err := provision.ApplySysctl(ctx, run, prof)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sysctl floors: %+v", res)
	check := func(when string) {
		t.Helper()
		vals, err := provision.ReadSysctl(ctx, run, prof)
		if err != nil {
			t.Fatal(err)
		}
		conf, err := run.Run(ctx, "cat "+prof.File, nil)
		if err != nil {
			t.Fatal(err)
		}
		file, _ := sysctl.Parse(conf)
		if vals["net.core.somaxconn"] != "8192" || file["net.core.somaxconn"] != "8192" {
			t.Errorf("%s: somaxconn %s in the kernel, %s in the file; want the operator's 8192 in both", when, vals["net.core.somaxconn"], file["net.core.somaxconn"])
		}
		if vals["net.ipv4.tcp_max_syn_backlog"] != "4096" || file["net.ipv4.tcp_max_syn_backlog"] != "4096" {
			t.Errorf("%s: tcp_max_syn_backlog %s in the kernel, %s in the file; want the floor 4096 in both", when, vals["net.ipv4.tcp_max_syn_backlog"], file["net.ipv4.tcp_max_syn_backlog"])
		}
	}
	check("after converging the floors")
	if _, err := run.Run(ctx, "sysctl -q -p "+prof.File, nil); err != nil {
		t.Fatal(err)
	}
	check("after sysctl -p of the file")
	run.Run(ctx, "rm -f "+prof.File, nil)
}
