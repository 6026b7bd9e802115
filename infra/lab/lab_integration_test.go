//go:build lab

// The lab integration tests boot real lab boxes: root, systemd-nspawn
// (systemd-container) and debootstrap are needed. Run them with
// `make lab-test`. They use their own state directory, bridge and subnet,
// and share the image cache with the default lab so that only the first
// run builds the image:
//
//	RELAYFLEET_LAB_DIR     state directory (default /var/lib/relayfleet/lab-test)
//	RELAYFLEET_LAB_IMAGES  image cache (default /var/lib/relayfleet/lab/images)
package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

const (
	testBridge = "rflabt0"
	box1       = "lt1"
	box2       = "lt2"
	box3       = "lt3" // created and crashed by TestCrashLeftoversAreCleanedUp
)

var (
	testLab    *Lab
	testSubnet = netip.MustParsePrefix("10.231.78.0/24")
	testShape  = Small
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "lab tests: root is needed to run lab boxes (systemd-nspawn, bridges, cgroups)")
		return 1
	}
	dir := os.Getenv(DirEnv)
	if dir == "" {
		dir = "/var/lib/relayfleet/lab-test"
	}
	images := os.Getenv("RELAYFLEET_LAB_IMAGES")
	if images == "" {
		images = filepath.Join(DefaultDir, "images")
	}
	logf := func(format string, args ...any) {
		fmt.Printf("%s lab: %s\n", time.Now().UTC().Format("15:04:05.0"), fmt.Sprintf(format, args...))
	}
	l, err := New(Config{Dir: dir, ImageDir: images, Bridge: testBridge, Subnet: testSubnet, Logf: logf})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testLab = l
	ctx := context.Background()
	if err := deleteAll(ctx, l); err != nil { // leftovers of an earlier run
		fmt.Fprintln(os.Stderr, "lab tests: clean slate:", err)
		return 1
	}
	t0 := time.Now()
	if _, err := l.EnsureImage(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "lab tests:", err)
		return 1
	}
	logf("measure: image ready in %.1fs (0 when cached)", time.Since(t0).Seconds())
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, name := range []string{box1, box2} {
		start := time.Now()
		if _, errs[i] = l.Start(ctx, Spec{Name: name, Shape: testShape, Labels: map[string]string{"fleet": "labtest", "tier": []string{"steady", "burst"}[i]}}); errs[i] != nil {
			continue
		}
		wg.Go(func() {
			if errs[i] = l.Wait(ctx, name); errs[i] == nil {
				logf("measure: %s ssh ready %.2fs after Start", name, time.Since(start).Seconds())
			}
		})
	}
	wg.Wait()
	code := 0
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "lab tests: boot:", err)
		code = 1
	} else {
		time.Sleep(2 * time.Second) // let the boxes settle before measuring them
		for _, name := range []string{box1, box2} {
			b, _ := l.Get(ctx, name)
			stat, _ := os.ReadFile(filepath.Join(cgroupRoot, "memory", l.cgroupRel(name), "memory.stat"))
			logf("measure: %s idle: memory cgroup usage %.1f MiB (rss %.1f MiB), overlay upper dir %.1f MiB",
				name, mib(b.MemoryUsed), mib(statField(stat, "total_rss")), mib(diskUsage(filepath.Join(l.boxDir(name), "upper"))))
		}
		code = m.Run()
	}
	if err := deleteAll(ctx, l); err != nil {
		fmt.Fprintln(os.Stderr, "lab tests: teardown:", err)
		return 1
	}
	if l.bridgeExists() {
		fmt.Fprintf(os.Stderr, "lab tests: bridge %s left after the last box was deleted\n", testBridge)
		return 1
	}
	if ms, _ := mountsUnder(l.Dir()); len(ms) > 0 {
		fmt.Fprintf(os.Stderr, "lab tests: mounts left: %v\n", ms)
		return 1
	}
	if pids := cgroupPIDs(l.cgroupGroup()); len(pids) > 0 {
		fmt.Fprintf(os.Stderr, "lab tests: processes left in the lab's cgroups: %v\n", pids)
		return 1
	}
	return code
}

func deleteAll(ctx context.Context, l *Lab) error {
	boxes, err := l.List(ctx, nil)
	if err != nil {
		return err
	}
	for _, b := range boxes {
		if err := l.Delete(ctx, b.Name); err != nil {
			return err
		}
	}
	return l.Cleanup(ctx)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func statField(stat []byte, key string) int64 {
	for line := range strings.Lines(string(stat)) {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func diskUsage(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// sh runs a shell command on a box as root and returns its stdout, trimmed.
func sh(t *testing.T, box, cmd string) string {
	t.Helper()
	return shIn(t, box, cmd, "")
}

func shIn(t *testing.T, box, cmd, stdin string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if err := testLab.Run(testCtx(t, 2*time.Minute), box, cmd, strings.NewReader(stdin), &out, &errb); err != nil {
		t.Fatalf("%s: %s: %v: %s", box, cmd, err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// show is `systemctl show` of the given properties of a unit.
func show(t *testing.T, box, unit string, props ...string) map[string]string {
	t.Helper()
	out := sh(t, box, "systemctl show "+unit+" -p "+strings.Join(props, " -p "))
	m := map[string]string{}
	for line := range strings.Lines(out) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		m[k] = v
	}
	return m
}

func TestPinnedHostKey(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	for _, name := range []string{box1, box2} {
		b, err := testLab.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		hk, err := ParseHostKey(b.HostKey)
		if err != nil {
			t.Fatal(err)
		}
		signer, err := testLab.Signer()
		if err != nil {
			t.Fatal(err)
		}
		c, err := Dial(ctx, b.SSHAddr(), signer, hk)
		if err != nil {
			t.Fatalf("%s: dial with the pinned host key: %v", name, err)
		}
		var out bytes.Buffer
		err = Run(ctx, c, "hostname; cat /etc/ssh/ssh_host_ed25519_key.pub", nil, &out, nil)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if lines[0] != name {
			t.Errorf("hostname %q, want %q", lines[0], name)
		}
		if got := strings.Fields(lines[1]); len(got) < 2 || !strings.HasPrefix(b.HostKey, got[0]+" "+got[1]) {
			t.Errorf("box host key %q is not the one relayfleet generated %q", lines[1], b.HostKey)
		}
	}
	// known_hosts for the ssh command line client has both boxes.
	kh, err := os.ReadFile(testLab.KnownHostsPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{box1, box2} {
		b, _ := testLab.Get(ctx, name)
		if !strings.Contains(string(kh), b.Address.String()+" ssh-ed25519 ") {
			t.Errorf("known_hosts lacks %s", name)
		}
	}
}

func TestWrongHostKeyIsRefused(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	b, err := testLab.Get(ctx, box1)
	if err != nil {
		t.Fatal(err)
	}
	_, otherPub, err := newKey("someone-else")
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := ParseHostKey(otherPub)
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := testLab.Signer()
	c, err := Dial(ctx, b.SSHAddr(), signer, wrong)
	if err == nil {
		c.Close()
		t.Fatal("the handshake succeeded with a wrong pinned host key")
	}
	if !errors.Is(err, ErrHostKeyMismatch) {
		t.Errorf("err = %v, want ErrHostKeyMismatch", err)
	}
	start := time.Now()
	if err := WaitSSH(ctx, b.SSHAddr(), signer, wrong, 30*time.Second); !errors.Is(err, ErrHostKeyMismatch) {
		t.Errorf("WaitSSH = %v, want ErrHostKeyMismatch", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("WaitSSH retried a host key mismatch for %s", time.Since(start))
	}
}

func TestBoxShape(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	// nproc and Go's runtime.NumCPU() inside the box match the shape.
	src := filepath.Join(t.TempDir(), "main.go")
	testutil.WriteFile(t, src, []byte("package main\n\nimport (\n\t\"fmt\"\n\t\"runtime\"\n)\n\nfunc main() { fmt.Println(runtime.NumCPU()) }\n"), 0o644)
	bin := filepath.Join(t.TempDir(), "numcpu")
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go is not on PATH: %v", err)
	}
	build := exec.CommandContext(ctx, gobin, "build", "-o", bin, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build numcpu: %v: %s", err, out)
	}
	numcpu, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(testShape.Cores)
	for _, name := range []string{box1, box2} {
		if got := sh(t, name, "nproc"); got != want {
			t.Errorf("%s: nproc = %s, want %s", name, got, want)
		}
		shIn(t, name, "cat > /usr/local/bin/numcpu && chmod 755 /usr/local/bin/numcpu", string(numcpu))
		if got := sh(t, name, "numcpu"); got != want {
			t.Errorf("%s: runtime.NumCPU() = %s, want %s", name, got, want)
		}
		if got := sh(t, name, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes"); got != strconv.FormatInt(testShape.RAM, 10) {
			t.Errorf("%s: memory limit %s, want %d", name, got, testShape.RAM)
		}
		if got := sh(t, name, "systemctl is-system-running --wait"); got != "running" {
			t.Errorf("%s: systemctl is-system-running = %s; failed units: %s", name, got, sh(t, name, "systemctl --failed --no-legend"))
		}
	}
	// Two small boxes on a host with more CPUs are spread over them.
	a, _ := testLab.Get(ctx, box1)
	b, _ := testLab.Get(ctx, box2)
	if host, _ := hostCPUs(); len(host) >= 2 && a.CPUs == b.CPUs {
		t.Errorf("both boxes on cpu %s", a.CPUs)
	}
	// Boxes reach each other and the host, nothing else.
	if out := sh(t, box1, fmt.Sprintf("timeout 3 bash -c '</dev/tcp/%s/22' && echo open", b.Address)); out != "open" {
		t.Errorf("%s cannot reach %s:22", box1, box2)
	}
	if out := sh(t, box1, "ip route"); strings.Contains(out, "default") {
		t.Errorf("box has a default route: %s", out)
	}
}

// TestNetCoreSysctlsAreHostWide pins the known difference docs/testing.md's
// "Lab boxes" names: net.core.rmem_* and wmem_* are not per network namespace, so a
// lab box reads the host's values and cannot change them (the qemu flavour
// can).
func TestNetCoreSysctlsAreHostWide(t *testing.T) {
	host, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		t.Fatal(err)
	}
	if got := sh(t, box1, "cat /proc/sys/net/core/rmem_max"); got != strings.TrimSpace(string(host)) {
		t.Errorf("box rmem_max %s, host %s", got, host)
	}
	out := sh(t, box1, "sysctl -w net.core.rmem_max=16777216 2>&1; echo rc=$?")
	if strings.HasSuffix(out, "rc=0") && sh(t, box1, "cat /proc/sys/net/core/rmem_max") == "16777216" && strings.TrimSpace(string(host)) != "16777216" {
		t.Errorf("a lab box changed net.core.rmem_max: %s", out)
	}
	t.Logf("sysctl -w net.core.rmem_max in a lab box: %s", strings.ReplaceAll(out, "\n", "; "))
}

func TestList(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	all, err := testLab.List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 2 || all[0].Name != box1 || all[1].Name != box2 {
		t.Fatalf("List(nil) = %v", all)
	}
	burst, err := testLab.List(ctx, map[string]string{"fleet": "labtest", "tier": "burst"})
	if err != nil {
		t.Fatal(err)
	}
	if len(burst) != 1 || burst[0].Name != box2 || burst[0].State != StateRunning || burst[0].MemoryUsed <= 0 {
		t.Errorf("List(tier=burst) = %+v", burst)
	}
	none, _ := testLab.List(ctx, map[string]string{"fleet": "other"})
	if len(none) != 0 {
		t.Errorf("List(fleet=other) = %v", none)
	}
}

const hogUnit = `[Unit]
Description=relayfleet lab test: memory hog %i
StartLimitIntervalSec=0

[Service]
# Idles until /run/hog-%i.go appears, then grows without bound (tail keeps
# the endless line of /dev/zero in memory).
ExecStart=/bin/sh -c 'while :; do if [ -e /run/hog-%i.go ]; then rm -f /run/hog-%i.go; exec tail /dev/zero; fi; sleep 0.2; done'
MemoryMax=64M
Restart=always
RestartSec=500ms
`

// TestMemoryMaxIsolation is the story's isolation claim: two instances of a
// templated unit with MemoryMax=; one is driven past its ceiling, is
// OOM-killed by the kernel and restarted, the other keeps running untouched.
func TestMemoryMaxIsolation(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	shIn(t, box1, "cat > /etc/systemd/system/hog@.service && systemctl daemon-reload && systemctl restart hog@a hog@b", hogUnit)
	props := []string{"ActiveState", "MainPID", "NRestarts", "MemoryMax", "Result"}
	testutil.WaitForEvery(t, 10*time.Second, 200*time.Millisecond, "hog@a and hog@b active", func() bool {
		return show(t, box1, "hog@a", props...)["ActiveState"] == "active" && show(t, box1, "hog@b", props...)["ActiveState"] == "active"
	})
	a0, b0 := show(t, box1, "hog@a", props...), show(t, box1, "hog@b", props...)
	if a0["MemoryMax"] != "67108864" {
		t.Fatalf("hog@a MemoryMax = %s", a0["MemoryMax"])
	}
	// The limit reaches the kernel: the unit's memory cgroup has it.
	if got := sh(t, box1, "cat /sys/fs/cgroup/memory/system.slice/system-hog.slice/hog@a.service/memory.limit_in_bytes"); got != "67108864" {
		t.Fatalf("hog@a's memory cgroup limit = %s: MemoryMax= is not enforced", got)
	}
	_, mark := kernelOOMKills(t, ctx, box1, "hog@a.service", -1)

	sh(t, box1, "touch /run/hog-a.go")
	var a1 map[string]string
	testutil.WaitForEvery(t, 60*time.Second, 200*time.Millisecond, "hog@a OOM-killed and restarted", func() bool {
		a1 = show(t, box1, "hog@a", props...)
		n, _ := strconv.Atoi(a1["NRestarts"])
		return n > 0 && a1["ActiveState"] == "active"
	})
	if a1["MainPID"] == a0["MainPID"] {
		t.Errorf("hog@a MainPID unchanged (%s) after its restart", a1["MainPID"])
	}
	journal := sh(t, box1, "journalctl -u hog@a --no-pager -o cat")
	if !strings.Contains(journal, "code=killed, status=9/KILL") && !strings.Contains(journal, "oom-kill") {
		t.Errorf("hog@a's journal shows no kill:\n%s", journal)
	}
	// On cgroup v1 systemd cannot tell an OOM kill from another SIGKILL
	// (Result=signal); the kernel log names the memory cgroup that hit its
	// limit. Lines are counted after the mark: the ring buffer drops old
	// lines as new ones come, so a count of all of them need not grow.
	if n, _ := kernelOOMKills(t, ctx, box1, "hog@a.service", mark); n == 0 {
		t.Errorf("the kernel log shows no OOM kill in hog@a's memory cgroup after [%.6f]", mark)
	}
	b1 := show(t, box1, "hog@b", props...)
	if b1["MainPID"] != b0["MainPID"] || b1["NRestarts"] != b0["NRestarts"] || b1["ActiveState"] != "active" {
		t.Errorf("hog@b was touched: before %v, after %v", b0, b1)
	}
	if n, _ := kernelOOMKills(t, ctx, box1, "hog@b.service", mark); n != 0 {
		t.Error("the kernel OOM-killed in hog@b")
	}
	t.Logf("hog@a: NRestarts %s -> %s, MainPID %s -> %s; hog@b unchanged (MainPID %s, NRestarts %s)",
		a0["NRestarts"], a1["NRestarts"], a0["MainPID"], a1["MainPID"], b1["MainPID"], b1["NRestarts"])
	sh(t, box1, "systemctl stop hog@a hog@b")
}

// kernelOOMKills counts the kernel's OOM kills in a unit's memory cgroup of
// a box, from the host's kernel log, in lines stamped after since (seconds
// since boot, as dmesg prints them); last is the log's newest stamp.
func kernelOOMKills(t *testing.T, ctx context.Context, box, unit string, since float64) (n int, last float64) {
	t.Helper()
	out, err := exec.CommandContext(ctx, "dmesg").Output()
	if err != nil {
		t.Fatalf("dmesg: %v", err)
	}
	needle := "oom_memcg=/" + testLab.cgroupRel(box) + "/system.slice/"
	for line := range strings.Lines(string(out)) {
		rest, ok := strings.CutPrefix(line, "[")
		stamp, _, closed := strings.Cut(rest, "]")
		if !ok || !closed {
			continue
		}
		at, err := strconv.ParseFloat(strings.TrimSpace(stamp), 64)
		if err != nil {
			continue
		}
		last = max(last, at)
		if at > since && strings.Contains(line, needle) && strings.Contains(line, "/"+unit+",") {
			n++
		}
	}
	return n, last
}

// TestCrashLoopKeepsRestarting: with StartLimitIntervalSec=0 a unit that
// crashes at once keeps being restarted; with systemd's default start limit
// the same unit gives up.
func TestCrashLoopKeepsRestarting(t *testing.T) {
	const unit = `[Unit]
Description=relayfleet lab test: crash loop%s

[Service]
ExecStart=/bin/false
Restart=always
RestartSec=100ms
`
	shIn(t, box2, "cat > /etc/systemd/system/crashloop.service", fmt.Sprintf(unit, "\nStartLimitIntervalSec=0"))
	shIn(t, box2, "cat > /etc/systemd/system/crashlimited.service && systemctl daemon-reload", fmt.Sprintf(unit, ""))
	start := time.Now()
	sh(t, box2, "systemctl start crashloop crashlimited")
	var s map[string]string
	testutil.WaitForEvery(t, 10*time.Second, 200*time.Millisecond, "more than 5 restarts", func() bool {
		s = show(t, box2, "crashloop", "NRestarts", "ActiveState")
		n, _ := strconv.Atoi(s["NRestarts"])
		return n > 5
	})
	took := time.Since(start)
	time.Sleep(time.Second)
	s = show(t, box2, "crashloop", "NRestarts", "ActiveState", "SubState")
	if st := s["ActiveState"]; st != "activating" && st != "active" {
		t.Errorf("crashloop is %s after %s restarts, want activating or active", st, s["NRestarts"])
	}
	lim := show(t, box2, "crashlimited", "NRestarts", "ActiveState", "Result")
	if n, _ := strconv.Atoi(lim["NRestarts"]); lim["ActiveState"] != "failed" || n > 5 {
		t.Errorf("the control unit with the default start limit: %v, want failed after at most 5 restarts", lim)
	}
	if j := sh(t, box2, "journalctl -u crashlimited --no-pager -o cat"); !strings.Contains(j, "Start request repeated too quickly") {
		t.Errorf("the control unit's journal does not show the start limit:\n%s", j)
	}
	t.Logf("crashloop: 6 restarts in %.1fs, now %s restarts and %s/%s; control: %v", took.Seconds(), s["NRestarts"], s["ActiveState"], s["SubState"], lim)
	sh(t, box2, "systemctl stop crashloop; systemctl reset-failed crashlimited")
}

func TestCreateExistingAndDeleteMissing(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	before, err := testLab.Get(ctx, box1)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	again, err := testLab.Create(ctx, Spec{Name: box1, Shape: testShape})
	if err != nil {
		t.Fatalf("Create of a box that exists: %v", err)
	}
	if again.Address != before.Address || again.HostKey != before.HostKey || again.PID != before.PID {
		t.Errorf("Create of a running box changed it: %+v -> %+v", before, again)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Create of a running box took %s", d)
	}
	if err := testLab.Delete(ctx, "nosuchbox"); err != nil {
		t.Errorf("Delete of a box that does not exist: %v", err)
	}
	if _, err := testLab.Get(ctx, "nosuchbox"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of a box that does not exist: %v, want ErrNotFound", err)
	}
}

// TestCrashLeftoversAreCleanedUp kills a box's launcher with SIGKILL, as a
// crash would: the box's systemd and its services keep running in its
// cgroups and its overlay stays mounted. Cleanup removes all of it, Create
// starts the box again with its pinned host key, and Delete is idempotent.
func TestCrashLeftoversAreCleanedUp(t *testing.T) {
	ctx := testCtx(t, 5*time.Minute)
	start := time.Now()
	b, err := testLab.Create(ctx, Spec{Name: box3, Shape: testShape, Labels: map[string]string{"fleet": "labtest"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("measure: %s created and ssh ready in %.2fs (while 2 boxes run)", box3, time.Since(start).Seconds())
	if err := syscall.Kill(b.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForEvery(t, 10*time.Second, 200*time.Millisecond, "launcher gone", func() bool {
		got, _ := testLab.Get(ctx, box3)
		return got.State == StateStopped
	})
	ms, _ := mountsUnder(testLab.boxDir(box3))
	left := cgroupPIDs(testLab.cgroupRel(box3))
	users := overlayUsers(filepath.Join(testLab.boxDir(box3), "upper"))
	t.Logf("after kill -9 of the launcher: %d host mounts, %d processes left in the box's cgroups, overlay mounted in %d mount namespaces", len(ms), len(left), len(users))
	if len(left) == 0 {
		t.Error("the crash left no process: the test does not test the cleanup")
	}
	if len(ms) == 0 {
		t.Error("the crash left no mount: the test does not test the cleanup")
	}

	if err := testLab.Cleanup(ctx); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if ms, _ := mountsUnder(testLab.boxDir(box3)); len(ms) > 0 {
		t.Errorf("mounts left after Cleanup: %v", ms)
	}
	if pids := cgroupPIDs(testLab.cgroupRel(box3)); len(pids) > 0 {
		t.Errorf("processes left after Cleanup: %v", pids)
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "memory", testLab.cgroupRel(box3))); err == nil {
		t.Error("the box's memory cgroup is left after Cleanup")
	}
	for _, pid := range left {
		if st, _, ok := procStat(pid); ok && st != 'Z' {
			t.Errorf("process %d of the crashed box is alive", pid)
		}
	}
	if users := overlayUsers(filepath.Join(testLab.boxDir(box3), "upper")); len(users) > 0 {
		t.Errorf("the box's overlay is still mounted in the mount namespace of %v", users)
	}
	if !testLab.bridgeExists() {
		t.Error("Cleanup removed the bridge while boxes run")
	}

	again, err := testLab.Create(ctx, Spec{Name: box3, Shape: testShape})
	if err != nil {
		t.Fatalf("Create after the crash: %v", err)
	}
	if again.HostKey != b.HostKey || again.Address != b.Address {
		t.Errorf("the box came back with another host key or address")
	}
	if got := sh(t, box3, "hostname"); got != box3 {
		t.Errorf("hostname %q", got)
	}

	for i := range 2 {
		if err := testLab.Delete(ctx, box3); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	if _, err := testLab.Get(ctx, box3); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(testLab.boxDir(box3)); err == nil {
		t.Error("the box's directory is left after Delete")
	}
	if pids := cgroupPIDs(testLab.cgroupRel(box3)); len(pids) > 0 {
		t.Errorf("processes left after Delete: %v", pids)
	}
}

// TestHalfBuiltImageIsRemoved: a build that died inside debootstrap leaves
// a temporary directory with proc mounted in it; the next build unmounts
// and removes it without following the mount.
func TestHalfBuiltImageIsRemoved(t *testing.T) {
	l, err := New(Config{Dir: t.TempDir(), ImageDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(l.cfg.ImageDir, "0123456789abcdef.tmp")
	if err := os.MkdirAll(filepath.Join(tmp, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("proc", filepath.Join(tmp, "proc"), "proc", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmountAll(tmp) })
	if err := l.removeStaleImageBuilds(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); err == nil {
		t.Error("the half-built image is still there")
	}
	if ms, _ := mountsUnder(tmp); len(ms) > 0 {
		t.Errorf("mounts left: %v", ms)
	}
}

// TestTwoLabsOneBoxName: a box of the same name in another lab (another
// directory, bridge and subnet) boots beside this lab's and both answer,
// each at its own address, as two tests' fleets side by side make them
// (make e2e). The host end of a box's veth pair is named after its nspawn
// machine name, so with machine names taken from box names alone the
// second box's veth clashed with the first's and it did not boot.
func TestTwoLabsOneBoxName(t *testing.T) {
	ctx := testCtx(t, 5*time.Minute)
	other, err := New(Config{Dir: "/var/lib/relayfleet/lab-twin", ImageDir: testLab.cfg.ImageDir, Bridge: "rftwin0", Subnet: netip.MustParsePrefix("10.231.76.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	if err := deleteAll(ctx, other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := deleteAll(context.Background(), other); err != nil {
			t.Error(err)
		}
	})
	twin, err := other.Start(ctx, Spec{Name: box1, Shape: testShape, Labels: map[string]string{"fleet": "labtest"}})
	if err != nil {
		t.Fatalf("a second %s in another lab: %v", box1, err)
	}
	if err := other.Wait(ctx, box1); err != nil {
		t.Fatalf("a second %s in another lab: %v", box1, err)
	}
	first, err := testLab.Get(ctx, box1)
	if err != nil {
		t.Fatal(err)
	}
	if twin.Address == first.Address {
		t.Fatalf("both %s at %s", box1, twin.Address)
	}
	for _, c := range []struct {
		l    *Lab
		want netip.Addr
	}{{testLab, first.Address}, {other, twin.Address}} {
		var out, errb bytes.Buffer
		if err := c.l.Run(ctx, box1, "hostname; ip -4 -o addr show host0", nil, &out, &errb); err != nil {
			t.Fatalf("%s in %s: %v: %s", box1, c.l.Dir(), err, errb.String())
		}
		if !strings.HasPrefix(out.String(), box1+"\n") || !strings.Contains(out.String(), c.want.String()+"/") {
			t.Errorf("%s in %s says %q, want its name and %s", box1, c.l.Dir(), out.String(), c.want)
		}
	}
}
