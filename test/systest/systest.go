// Package systest is what the system tests (test/e2e, test/lab) share:
// fleet and relay built once per test binary, a command run with its
// output and exit code captured, and the lab's image cache and flags.
// Only tests import it (archtest.TestHelpers).
package systest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/relayfleet/relayfleet/infra/program"
)

// built is the one build of fleet and relay the tests of a test binary
// share (Build).
var built struct {
	once         sync.Once
	dir          string
	fleet, relay string
	err          error
}

// Main runs a system-test package's tests and returns their exit code,
// for TestMain to pass to os.Exit. It unsets what would point fleet
// elsewhere than the tests' own state: their stacks use the passphrase
// generated in their state dirs, and their boxes are reached with key
// files, never an ssh-agent (set here, once: parallel tests cannot
// t.Setenv). The shared build is removed when the tests end.
func Main(m *testing.M) int {
	os.Unsetenv(program.PassphraseEnv)
	os.Unsetenv("SSH_AUTH_SOCK")
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	return code
}

// Build builds fleet and relay (cmd/fleet, cmd/relay) once for all the
// tests, side by side (fleet finds relay beside itself), and returns the
// binaries; a failed build fails t.
func Build(t testing.TB) (fleetBin, relayBin string) {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "relayfleet-systest-bin-")
		if built.err != nil {
			return
		}
		for _, b := range []struct{ out, pkg string }{
			{filepath.Join(built.dir, "fleet"), "github.com/relayfleet/relayfleet/cmd/fleet"},
			{filepath.Join(built.dir, "relay"), "github.com/relayfleet/relayfleet/cmd/relay"},
		} {
			cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
			cmd.Stderr = os.Stderr
			if err := cmd.Run(); err != nil {
				built.err = fmt.Errorf("build %s: %v", b.pkg, err)
				return
			}
		}
		built.fleet, built.relay = filepath.Join(built.dir, "fleet"), filepath.Join(built.dir, "relay")
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.fleet, built.relay
}

// Output runs cmd and returns its stdout and stderr apart, and its exit
// code (an *exec.ExitError's, -1 for a signal); a command that cannot
// run fails t.
func Output(t testing.TB, cmd *exec.Cmd) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	code = exit(t, cmd)
	return out.String(), errOut.String(), code
}

// Combined runs cmd and returns its stdout and stderr together, as a
// terminal shows them, and its exit code, as Output does.
func Combined(t testing.TB, cmd *exec.Cmd) (out string, code int) {
	t.Helper()
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	code = exit(t, cmd)
	return b.String(), code
}

func exit(t testing.TB, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

// LabImages is the lab image cache the tests share: $RELAYFLEET_LAB_IMAGES,
// else the default lab's.
func LabImages() string {
	if d := os.Getenv("RELAYFLEET_LAB_IMAGES"); d != "" {
		return d
	}
	return "/var/lib/relayfleet/lab/images"
}

// LabFlags point fleet at a lab of its own: its directory, image cache,
// bridge and subnet.
func LabFlags(dir, images, bridge, subnet string) []string {
	return []string{"--lab-dir", dir, "--lab-images", images, "--lab-bridge", bridge, "--lab-subnet", subnet}
}

// LastLine is the last line of s, trimmed: a failed fleet command's
// one-line error.
func LastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
