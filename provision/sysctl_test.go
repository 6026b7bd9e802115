package provision

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/sysctl"
	"github.com/relayfleet/relayfleet/units"
)

// kernelBox runs commands in a local shell against a simulated kernel:
// /proc/sys is a directory tree of the test's, and sysctl -p loads a file
// into it as the real one does, lowering a key as readily as raising it.
type kernelBox struct{ root string }

var sysctlLoadRE = regexp.MustCompile(`sysctl -q -p '([^']+)'`)

func (k kernelBox) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	if m := sysctlLoadRE.FindStringSubmatch(cmd); m != nil {
		data, err := os.ReadFile(m[1])
		if err != nil {
			return nil, err
		}
		vals, err := sysctl.Parse(data)
		if err != nil {
			return nil, err
		}
		for key, v := range vals {
			os.WriteFile(filepath.Join(k.root, sysctl.ProcPath(key)), []byte(v+"\n"), 0o644)
		}
		return nil, nil
	}
	c := exec.CommandContext(ctx, "bash", "-c", strings.ReplaceAll(cmd, "'/proc/sys/", "'"+k.root+"/proc/sys/"))
	c.Stdin = stdin
	return c.Output()
}

func (k kernelBox) set(t *testing.T, key, value string) {
	t.Helper()
	p := filepath.Join(k.root, sysctl.ProcPath(key))
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(value+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (k kernelBox) get(t *testing.T, key string) string {
	t.Helper()
	data, _ := os.ReadFile(filepath.Join(k.root, sysctl.ProcPath(key)))
	return strings.TrimSpace(string(data))
}

// TestApplySysctlNeverLowers: an operator set rmem_max above relayfleet's
// floor; converging the relay profile keeps that value in the kernel and
// writes it to the file (which the next boot loads), and raises only the
// keys below their floors.
func TestApplySysctlNeverLowers(t *testing.T) {
	k := kernelBox{root: t.TempDir()}
	prof := sysctl.Relay()
	prof.File = filepath.Join(k.root, "etc/sysctl.d/60-relay.conf")
	for _, s := range prof.Settings {
		k.set(t, s.Key, "212992")
	}
	k.set(t, "net.core.rmem_max", "67108864") // the operator's own tuning
	res, err := ApplySysctl(context.Background(), k, prof)
	if err != nil {
		t.Fatal(err)
	}
	if got := k.get(t, "net.core.rmem_max"); got != "67108864" {
		t.Errorf("rmem_max = %s after converging, want the operator's 67108864 kept", got)
	}
	if got := k.get(t, "net.core.wmem_max"); got != "16777216" {
		t.Errorf("wmem_max = %s, want raised to the floor 16777216", got)
	}
	data, err := os.ReadFile(prof.File)
	if err != nil {
		t.Fatal(err)
	}
	file, _ := sysctl.Parse(data)
	if file["net.core.rmem_max"] != "67108864" || file["net.core.wmem_max"] != "16777216" {
		t.Errorf("the file sets rmem_max = %s, wmem_max = %s: want the operator's 67108864 and the floor 16777216", file["net.core.rmem_max"], file["net.core.wmem_max"])
	}
	for _, r := range res {
		if r.Status == sysctl.NotApplied {
			t.Errorf("%s not applied: %+v", r.Key, r)
		}
	}
}

// TestPlanForBoxIsStable: the per-box plan holds the larger values, and a
// box that already has that file is not told to change it.
func TestPlanForBoxIsStable(t *testing.T) {
	p, err := Desired(units.Layout{Cores: 2, RAM: 4 << 30, BasePort: 4443, Binary: DefaultRoot + "/current/relay"}, strings.Repeat("a", 64))
	if err != nil {
		t.Fatal(err)
	}
	floorHash := p.State.Files[p.Profile.File]
	current := map[string]string{"net.core.rmem_max": "67108864"}
	q, err := p.ForBox(current)
	if err != nil {
		t.Fatal(err)
	}
	if p.State.Files[p.Profile.File] != floorHash {
		t.Error("ForBox changed the plan it was called on")
	}
	file, _ := sysctl.Parse(q.Content[p.Profile.File])
	if file["net.core.rmem_max"] != "67108864" {
		t.Errorf("per-box file sets rmem_max = %s, want 67108864", file["net.core.rmem_max"])
	}
	actual := HostState{Files: map[string]string{p.Profile.File: q.State.Files[p.Profile.File]}, Sysctl: current}
	for _, c := range Diff(q.State, actual) {
		if c.What == p.Profile.File {
			t.Errorf("a box holding the per-box file is told to %s", c)
		}
	}
}
