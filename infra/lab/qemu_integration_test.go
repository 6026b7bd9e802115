//go:build labqemu && !lab

// The real-kernel flavour test boots the lab image with a kernel as a VM
// under qemu (software emulation unless RELAYFLEET_LAB_ACCEL=kvm:tcg) and
// checks that net.core buffer sysctls can be written, applied and read back
// as on a real server. Run it with `make lab-qemu` (root, qemu-system-x86).
//
//	RELAYFLEET_LAB_DIR     state directory (default /var/lib/relayfleet/lab-qemu-test)
//	RELAYFLEET_LAB_IMAGES  image cache (default /var/lib/relayfleet/lab/images)
package lab

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

func TestQEMUNetCoreBuffers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal(ErrNotRoot)
	}
	if runtime.GOARCH != "amd64" {
		testutil.Skipf(t, "the qemu flavour boots an amd64 kernel")
	}
	dir := os.Getenv(DirEnv)
	if dir == "" {
		dir = "/var/lib/relayfleet/lab-qemu-test"
	}
	images := os.Getenv("RELAYFLEET_LAB_IMAGES")
	if images == "" {
		images = filepath.Join(DefaultDir, "images")
	}
	l, err := New(Config{Dir: dir, ImageDir: images, Recipe: QEMURecipe(), BootTimeout: 20 * time.Minute, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := l.EnsureImage(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("measure: qemu image ready in %.1fs (0 when cached)", time.Since(start).Seconds())
	start = time.Now()
	vm, err := l.BootVM(ctx, Spec{Name: "vm1", Shape: Small}, QEMUConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("measure: vm1 disk and boot to ssh in %.1fs", time.Since(start).Seconds())
	defer func() {
		if err := l.StopVM(context.Background(), vm); err != nil {
			t.Error(err)
		}
	}()
	c, err := l.DialVM(ctx, vm)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	run := func(cmd, stdin string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if err := Run(ctx, c, cmd, strings.NewReader(stdin), &out, &errb); err != nil {
			t.Fatalf("%s: %v: %s", cmd, err, errb.String())
		}
		return strings.TrimSpace(out.String())
	}
	host, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	t.Logf("vm1: kernel %s (host %s), nproc %s, %s", run("uname -r", ""), strings.TrimSpace(string(host)), run("nproc", ""), run("grep MemTotal /proc/meminfo", ""))

	keys := []string{"net.core.rmem_default", "net.core.wmem_default", "net.core.rmem_max", "net.core.wmem_max"}
	var conf strings.Builder
	for _, k := range keys {
		conf.WriteString(k + " = 16777216\n")
	}
	run("cat > /etc/sysctl.d/60-relay.conf", conf.String())
	// Applied the way a booting server applies it.
	run("systemctl restart systemd-sysctl.service", "")
	for _, k := range keys {
		if got := run("sysctl -n "+k, ""); got != "16777216" {
			t.Errorf("%s = %s after systemd-sysctl, want 16777216", k, got)
		}
	}
	// And by hand, after a change.
	run("sysctl -w net.core.rmem_max=8388608 >/dev/null && sysctl -p /etc/sysctl.d/60-relay.conf", "")
	if got := run("cat /proc/sys/net/core/rmem_max", ""); got != "16777216" {
		t.Errorf("rmem_max = %s after sysctl -p, want 16777216", got)
	}
}
