//go:build linux

package cpupin_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/bench/cpupin"
)

// allowed is the CPU list /proc/PID/status reports for pid.
func allowed(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Cpus_allowed_list for %d", pid)
	return ""
}

// TestPinSplitsTheCPUs: after Pin, a child Start starts runs on the first
// CPU alone, and this process on the others; a nil Pinning (one CPU)
// starts the child as it is.
func TestPinSplitsTheCPUs(t *testing.T) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	p, err := cpupin.Pin()
	if err != nil {
		t.Fatal(err)
	}
	if all.Count() < 2 {
		if p != nil {
			t.Fatalf("Pin on %d CPU: %+v, want nil", all.Count(), p)
		}
		testutil.Skipf(t, "one CPU: nothing to split") // the nil case above is the test here; CI needs two to test the split
	}
	first := -1
	for i := 0; first < 0; i++ {
		if all.IsSet(i) {
			first = i
		}
	}
	cmd := exec.Command("sleep", "5")
	if err := p.Start(cmd); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if got, want := allowed(t, cmd.Process.Pid), strconv.Itoa(first); got != want {
		t.Errorf("child on CPUs %q, want %q alone", got, want)
	}
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatal(err)
	}
	if mine.IsSet(first) || mine.Count() != all.Count()-1 {
		t.Errorf("this thread on %d CPUs (CPU %d among them: %v), want the %d others", mine.Count(), first, mine.IsSet(first), all.Count()-1)
	}
	if !strings.Contains(p.Desc, "CPU "+strconv.Itoa(first)+" alone") {
		t.Errorf("Desc %q does not say where the relay runs", p.Desc)
	}
}
