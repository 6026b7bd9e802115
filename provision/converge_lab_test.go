//go:build lab

package provision_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/sysctl"
	"github.com/relayfleet/relayfleet/units"
	"golang.org/x/crypto/ssh"
)

// labFleet boots n lab boxes of a shape on a bridge of their own and
// returns them with an SSH pool pinned to their keys.
func labFleet(t *testing.T, n int, shape lab.Shape) ([]lab.Box, *provision.Pool) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("lab tests need root")
	}
	dir := filepath.Join(os.TempDir(), "relayfleet-converge-test")
	images := os.Getenv("RELAYFLEET_LAB_IMAGES")
	if images == "" {
		images = "/var/lib/relayfleet/lab/images" // shared with the lab and make lab-test
	}
	l, err := lab.New(lab.Config{Dir: dir, ImageDir: images, Bridge: "rfconv0", Subnet: mustPrefix("10.231.79.0/24"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := l.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	var boxes []lab.Box
	for i := range n {
		b, err := l.Create(ctx, lab.Spec{Name: fmt.Sprintf("cv%d", i+1), Shape: shape, Labels: map[string]string{"fleet": "converge-test"}})
		if err != nil {
			t.Fatal(err)
		}
		boxes = append(boxes, b)
	}
	t.Cleanup(func() {
		for _, b := range boxes {
			l.Delete(context.Background(), b.Name)
		}
		l.Cleanup(context.Background())
	})
	signer, err := l.Signer()
	if err != nil {
		t.Fatal(err)
	}
	pool := &provision.Pool{Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, Keys: &provision.HostKeys{File: l.KnownHostsPath()}}
	t.Cleanup(func() { pool.Close() })
	return boxes, pool
}

func buildRelay(t *testing.T) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "relay")
	cmd := exec.Command("go", "build", "-o", out, "github.com/relayfleet/relayfleet/cmd/relay")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func host(b lab.Box) provision.Host {
	return provision.Host{Name: b.Name, Address: b.SSHAddr(), User: "root"}
}

func plan(t *testing.T, b lab.Box, release string, reserve int64) *provision.Plan {
	t.Helper()
	p, err := provision.Desired(units.Layout{Cores: b.Cores, RAM: b.RAM, BasePort: 4443, Reserve: reserve, Binary: provision.DefaultRoot + "/current/relay"}, release)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// mainPIDs returns each relay instance's MainPID on a box.
func mainPIDs(t *testing.T, run provision.Runner) map[string]string {
	t.Helper()
	out, err := run.Run(context.Background(), `for u in $(systemctl list-units --plain --no-legend 'relay@*.service' | cut -d' ' -f1); do echo "$u $(systemctl show -p MainPID --value "$u")"; done`, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		if u, pid, ok := strings.Cut(line, " "); ok {
			m[u] = pid
		}
	}
	return m
}

func TestConvergeLabBoxes(t *testing.T) {
	boxes, pool := labFleet(t, 3, lab.Medium)
	binary := buildRelay(t)
	release := provision.Digest(binary)
	rel := provision.Releases{}
	ctx := context.Background()

	// Fresh boxes: everything is created, every instance starts.
	var wg sync.WaitGroup
	reports := make([]*provision.Report, len(boxes))
	errs := make([]error, len(boxes))
	for i, b := range boxes {
		wg.Go(func() {
			reports[i], errs[i] = provision.Converge(ctx, pool.Runner(host(b)), plan(t, b, release, 0), rel, binary, false)
		})
	}
	wg.Wait()
	for i, b := range boxes {
		if errs[i] != nil {
			journal(t, pool.Runner(host(b)))
			t.Fatalf("%s: %v", b.Name, errs[i])
		}
		r := reports[i]
		if len(r.Restarted) != b.Cores {
			t.Errorf("%s: started %v, want %d instances", b.Name, r.Restarted, b.Cores)
		}
		// net.core.*mem_* are not per network namespace: a lab box cannot
		// set them, and converge says so per key instead of failing.
		got := map[string]sysctl.Status{}
		for _, s := range r.Sysctl {
			got[s.Key] = s.Status
		}
		if got["net.core.rmem_max"] != sysctl.NotApplied {
			t.Errorf("%s: rmem_max %q, want not applied in a container", b.Name, got["net.core.rmem_max"])
		}
	}

	// Every relay answers on its port.
	b0 := boxes[0]
	run0 := pool.Runner(host(b0))
	out, err := run0.Run(ctx, `for p in 4443 4444; do exec 3<>/dev/tcp/127.0.0.1/$p; printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3; tail -n1 <&3; exec 3<&-; done`, nil)
	if err != nil || string(out) != "ok\nok\n" {
		t.Errorf("healthz of both relays: %q, %v", out, err)
	}

	// The hardening holds: systemd's exposure score for the relay unit
	// stays at or below 2.0 (docs/units.md records it).
	out, err = run0.Run(ctx, "systemd-analyze security --no-pager relay@4443.service | tail -n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd-analyze security relay@4443.service: %s", strings.TrimSpace(string(out)))
	if os.Getenv("SECURITY_DETAIL") != "" {
		detail, _ := run0.Run(ctx, "systemd-analyze security --no-pager relay@4443.service | grep -v '^  ✓'", nil)
		t.Logf("%s", detail)
	}
	var score float64
	if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "→ Overall exposure level for relay@4443.service: %f", &score); err != nil || score > 2.0 {
		t.Errorf("exposure %q (%v): want at most 2.0", out, err)
	}

	// Each box made its own reset secret, root's alone, and every relay
	// process got it as a credential. Only hashes are compared here.
	secretHash := func(run provision.Runner) string {
		t.Helper()
		out, err := run.Run(ctx, "stat -c '%s %a %U' "+units.ResetSecretFile+" && sha256sum "+units.ResetSecretFile+" | cut -d' ' -f1 && sha256sum /run/credentials/relay@4443.service/"+units.ResetSecretName+" | cut -d' ' -f1", nil)
		f := strings.Fields(string(out))
		if err != nil || len(f) != 5 || strings.Join(f[:3], " ") != "32 600 root" || f[3] != f[4] {
			t.Fatalf("reset secret: %v, %d fields (want 32 bytes 0600 root, the same as relay@4443's credential)", err, len(f))
		}
		return f[3]
	}
	secrets := map[string]bool{}
	for _, b := range boxes {
		secrets[secretHash(pool.Runner(host(b)))] = true
	}
	if len(secrets) != len(boxes) {
		t.Errorf("%d distinct reset secrets on %d boxes", len(secrets), len(boxes))
	}
	secret0 := secretHash(run0)

	// A second run on converged hosts changes nothing.
	for _, b := range boxes {
		r, err := provision.Converge(ctx, pool.Runner(host(b)), plan(t, b, release, 0), rel, binary, false)
		if err != nil || len(r.Changes) != 0 {
			t.Errorf("%s: re-run changed %v (%v)", b.Name, r.Changes, err)
		}
	}

	// A hand-edited drop-in restarts only its instance.
	before := mainPIDs(t, run0)
	if _, err := run0.Run(ctx, "echo '# edited by hand' >> /etc/systemd/system/relay@4444.service.d/10-relayfleet.conf", nil); err != nil {
		t.Fatal(err)
	}
	r, err := provision.Converge(ctx, run0, plan(t, b0, release, 0), rel, binary, false)
	if err != nil {
		t.Fatal(err)
	}
	after := mainPIDs(t, run0)
	if strings.Join(r.Restarted, ",") != "relay@4444.service" || after["relay@4443.service"] != before["relay@4443.service"] || after["relay@4444.service"] == before["relay@4444.service"] {
		t.Errorf("restarted %v; pids before %v after %v", r.Restarted, before, after)
	}

	// A unit parameter in the template (the memory reserve, hence
	// MemoryMax) restarts every instance of that box.
	r, err = provision.Converge(ctx, run0, plan(t, b0, release, 512<<20), rel, binary, false)
	if err != nil || len(r.Restarted) != 2 {
		t.Errorf("template change restarted %v (%v)", r.Restarted, err)
	}
	out, _ = run0.Run(ctx, "systemctl show -p MemoryMax --value relay@4443.service", nil)
	if want := fmt.Sprint((b0.RAM - 512<<20) / 2); strings.TrimSpace(string(out)) != want {
		t.Errorf("MemoryMax = %s, want %s", out, want)
	}
	// Restarts and converges keep the box's reset secret: a restarted
	// process resets its predecessor's connections with the same key.
	if secretHash(run0) != secret0 {
		t.Error("the reset secret changed across converges and restarts")
	}
}

func TestConvergeCutMidwayThenRerun(t *testing.T) {
	boxes, pool := labFleet(t, 1, lab.Small)
	b := boxes[0]
	binary := buildRelay(t)
	release := provision.Digest(binary)
	rel := provision.Releases{}
	run := pool.Runner(host(b))
	// Cut the connection while the binary is on its way.
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	_, err := provision.Converge(ctx, run, plan(t, b, release, 0), rel, binary, false)
	cancel()
	if err == nil {
		t.Log("converge finished before the cut; the re-run below still has to be a no-op")
	}
	r, err := provision.Converge(context.Background(), run, plan(t, b, release, 0), rel, binary, false)
	if err != nil {
		t.Fatalf("re-run after a cut: %v", err)
	}
	t.Logf("re-run applied %d changes", len(r.Changes))
	out, err := run.Run(context.Background(), "find /etc/systemd/system /etc/sysctl.d /opt/relayfleet -name '*.relayfleet.*' -o -name '.upload.*' | head", nil)
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("half-written files left: %q (%v)", out, err)
	}
	r, err = provision.Converge(context.Background(), run, plan(t, b, release, 0), rel, binary, true)
	if err != nil || len(r.Changes) != 0 {
		t.Errorf("--check after the re-run: %v (%v)", r.Changes, err)
	}
}

// journal logs the relay units' recent journal, to say why one failed.
func journal(t *testing.T, run provision.Runner) {
	out, _ := run.Run(context.Background(), "journalctl --no-pager -n 40 -u 'relay@*' 2>&1", nil)
	t.Logf("journal:\n%s", out)
}

func TestRolloutLabBox(t *testing.T) {
	boxes, pool := labFleet(t, 1, lab.Medium)
	b := boxes[0]
	run := pool.Runner(host(b))
	ctx := context.Background()
	good := buildRelay(t)
	rel := provision.Releases{}
	p := plan(t, b, provision.Digest(good), 0)
	if _, err := provision.Converge(ctx, run, p, rel, good, false); err != nil {
		journal(t, run)
		t.Fatal(err)
	}
	instances := p.State.Instances

	// A broken build: the first instance fails its restart, the box goes
	// back to the good release, and the second instance never stops.
	before := mainPIDs(t, run)
	broken := []byte("#!/bin/sh\necho broken build >&2\nexit 1\n")
	r, err := provision.Rollout(ctx, run, rel, broken, instances, nil, nil, nil)
	if err == nil || !r.RolledBack || !strings.Contains(err.Error(), "rolled back to") {
		t.Fatalf("rollout of a broken build: %+v, %v", r, err)
	}
	cur, _, _ := rel.Current(ctx, run)
	if cur != provision.Digest(good) {
		t.Errorf("current release %s after rollback, want the good one", cur)
	}
	after := mainPIDs(t, run)
	if after[instances[1]] != before[instances[1]] {
		t.Errorf("%s was restarted during a failed rollout: %v -> %v", instances[1], before, after)
	}
	for _, inst := range instances {
		if err := provision.HealthzOnBox(ctx, run, inst); err != nil {
			t.Errorf("after rollback: %v", err)
		}
	}

	// A good new build (the same relay with bytes appended: another
	// release) rolls through every instance.
	newer := append(append([]byte{}, good...), []byte("relayfleet-test-build-2")...)
	r, err = provision.Rollout(ctx, run, rel, newer, instances, nil, nil, nil)
	if err != nil || r.RolledBack || len(r.Restarted) != len(instances) {
		t.Fatalf("rollout: %+v, %v", r, err)
	}
	if cur, prev, _ := rel.Current(ctx, run); cur != provision.Digest(newer) || prev != provision.Digest(good) {
		t.Errorf("current %s previous %s", cur, prev)
	}
	final := mainPIDs(t, run)
	for _, inst := range instances {
		if final[inst] == after[inst] {
			t.Errorf("%s was not restarted on the new build", inst)
		}
	}

	// Draining, as a rollout does before each restart: the process stops
	// admitting (headroom 0 for the router) and admits again after.
	for _, on := range []bool{true, false} {
		if err := provision.DrainOnBox(ctx, run, instances[0], on); err != nil {
			t.Fatal(err)
		}
		st, err := provision.Status(ctx, run, sysctl.Relay(), rel)
		if err != nil {
			t.Fatal(err)
		}
		p := st.Processes[0]
		if p.Draining != on || p.Admitting == on || (on && p.Headroom != 0) {
			t.Errorf("drain %v: %+v", on, p)
		}
	}
}
