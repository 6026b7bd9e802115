package events

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/units"
)

// nobody is the uid of the files these tests give someone other than
// root.
const nobody = 65534

// rootFiles is an install whose every file is root's: the fleet binary
// and the relay beside it, the events file with its fleet and providers
// files, a state dir with a Pulumi plugin in its PULUMI_HOME, a Pulumi
// CLI, a lab dir, and the unit dir, all under dir.
type rootFiles struct {
	dir, fleet, relay, events, fleetFile, providers, state, plugin, pulumi, lab, units string
}

// newRootFiles makes a rootFiles; the service finds its Pulumi CLI
// (servicePulumiCandidates) for the test's length. It needs root, to
// chown.
func newRootFiles(t *testing.T) rootFiles {
	t.Helper()
	if os.Getuid() != 0 {
		testutil.Skipf(t, "needs root: the files it makes are given to uid %d", nobody)
	}
	dir := t.TempDir()
	f := rootFiles{
		dir:       dir,
		fleet:     filepath.Join(dir, "bin", "fleet"),
		relay:     filepath.Join(dir, "bin", "relay"),
		events:    filepath.Join(dir, "etc", "events.yaml"),
		fleetFile: filepath.Join(dir, "etc", "example.yaml"),
		providers: filepath.Join(dir, "etc", "providers.yaml"),
		state:     filepath.Join(dir, "state"),
		plugin:    filepath.Join(dir, "state", "pulumi-home", "plugins", "resource-x", "pulumi-resource-x"),
		pulumi:    filepath.Join(dir, "opt", "pulumi"),
		lab:       filepath.Join(dir, "lab"),
		units:     filepath.Join(dir, "units"),
	}
	for _, d := range []string{filepath.Dir(f.fleet), filepath.Dir(f.events), filepath.Dir(f.pulumi), f.lab, f.units, filepath.Dir(f.plugin)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, exe := range []string{f.fleet, f.relay, f.plugin, f.pulumi} {
		testutil.WriteFile(t, exe, []byte("#!/bin/sh\nexit 0\n"), 0o755)
	}
	for dst, src := range map[string]string{f.events: timerEventsFile, f.fleetFile: "../../inventories/example.yaml", f.providers: "../../inventories/providers.yaml"} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		testutil.WriteFile(t, dst, data, 0o644)
	}
	old := servicePulumiCandidates
	servicePulumiCandidates = func(string) []string { return []string{f.pulumi} }
	t.Cleanup(func() { servicePulumiCandidates = old })
	return f
}

// options installs f's files, without enabling the timer.
func (f rootFiles) options() TimerOptions {
	return TimerOptions{Reconciler: units.Reconciler{Fleet: f.fleet, Events: f.events, StateDir: f.state,
		ExtraArgs: []string{"--lab-dir", f.lab}}, UnitDir: f.units}
}

// chown gives path (not what a symlink points to) to uid.
func chown(t *testing.T, path string, uid int) {
	t.Helper()
	if err := os.Lchown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// TestInstallTimerRootFiles: the service runs as root what the files name
// (fleet events reconcile, its Pulumi CLI and plugins) and reads the rest;
// install refuses every one that someone else could change, naming the
// field, the path and its owner or mode, and says what to do. All
// root's, the install passes.
func TestInstallTimerRootFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup breaks one thing in f and changes o to match.
		setup func(t *testing.T, f rootFiles, o *TimerOptions)
		field string
		want  []string // in the error, after "PATH" is replaced with f.dir
	}{
		{"all root's", func(*testing.T, rootFiles, *TimerOptions) {}, "", nil},
		{"user's binary", func(t *testing.T, f rootFiles, _ *TimerOptions) { chown(t, f.fleet, nobody) },
			"Fleet", []string{"PATH/bin/fleet is owned by uid 65534 (nobody), not root", "install -o root -g root -m 0755 PATH/bin/fleet /usr/local/bin/fleet"}},
		{"group-writable binary", func(t *testing.T, f rootFiles, _ *TimerOptions) { chmod(t, f.fleet, 0o775) },
			"Fleet", []string{"PATH/bin/fleet is mode 0775, writable by others; chmod go-w PATH/bin/fleet"}},
		{"group-writable directory above the binary", func(t *testing.T, f rootFiles, _ *TimerOptions) { chmod(t, filepath.Dir(f.fleet), 0o775) },
			"Fleet", []string{"PATH/bin/fleet is under PATH/bin, mode 0775, writable by others, who could replace it; chmod go-w PATH/bin"}},
		{"user's directory above the binary", func(t *testing.T, f rootFiles, _ *TimerOptions) { chown(t, filepath.Dir(f.fleet), nobody) },
			"Fleet", []string{"PATH/bin/fleet is under PATH/bin, owned by uid 65534 (nobody), not root, who could replace it"}},
		{"symlink to a user's binary", func(t *testing.T, f rootFiles, o *TimerOptions) {
			theirs := filepath.Join(f.dir, "opt", "fleet")
			testutil.WriteFile(t, theirs, []byte("#!/bin/sh\n"), 0o755)
			chown(t, theirs, nobody)
			o.Fleet = filepath.Join(f.dir, "bin", "fleet-link")
			symlink(t, "../opt/fleet", o.Fleet)
		}, "Fleet", []string{"PATH/bin/fleet-link (PATH/opt/fleet) is owned by uid 65534 (nobody)"}},
		{"user's symlink", func(t *testing.T, f rootFiles, o *TimerOptions) {
			o.Fleet = filepath.Join(f.dir, "bin", "fleet-link")
			symlink(t, f.fleet, o.Fleet)
			chown(t, o.Fleet, nobody)
		}, "Fleet", []string{"PATH/bin/fleet-link is a symlink owned by uid 65534 (nobody), not root"}},
		{"symlinked directory into a user's", func(t *testing.T, f rootFiles, o *TimerOptions) {
			home := filepath.Join(f.dir, "home")
			if err := os.MkdirAll(filepath.Join(home, "etc"), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"events.yaml", "example.yaml"} {
				data, _ := os.ReadFile(filepath.Join(f.dir, "etc", name))
				testutil.WriteFile(t, filepath.Join(home, "etc", name), data, 0o644)
			}
			chown(t, home, nobody) // its etc and files are root's
			symlink(t, "home/etc", filepath.Join(f.dir, "etc-link"))
			o.Events = filepath.Join(f.dir, "etc-link", "events.yaml")
		}, "Events", []string{"PATH/etc-link/events.yaml is under PATH/home, owned by uid 65534 (nobody)"}},
		{"user's events file", func(t *testing.T, f rootFiles, _ *TimerOptions) { chown(t, f.events, nobody) },
			"Events", []string{"PATH/etc/events.yaml is owned by uid 65534 (nobody), not root", "/etc/relayfleet"}},
		{"user's providers file beside it", func(t *testing.T, f rootFiles, _ *TimerOptions) { chown(t, f.providers, nobody) },
			"Events", []string{"PATH/etc/providers.yaml is owned by uid 65534 (nobody)"}},
		{"user's fleet file", func(t *testing.T, f rootFiles, _ *TimerOptions) { chown(t, f.fleetFile, nobody) },
			"Events", []string{"PATH/etc/example.yaml is owned by uid 65534 (nobody)"}},
		{"a providers file others may put beside the events file", func(t *testing.T, f rootFiles, _ *TimerOptions) {
			os.Remove(f.providers) // else found first, in the same directory
			chmod(t, filepath.Dir(f.events), 0o777|os.ModeSticky)
		}, "Events", []string{"PATH/etc/events.yaml is in PATH/etc, mode 01777, where others could put the providers.yaml it reads if there; keep"}},
		{"user's state dir", func(t *testing.T, f rootFiles, _ *TimerOptions) { chown(t, f.state, nobody) },
			"StateDir", []string{"PATH/state is owned by uid 65534 (nobody), not root", "chown -R root:root PATH/state"}},
		{"user's plugin in the state dir", func(t *testing.T, f rootFiles, _ *TimerOptions) { chown(t, f.plugin, nobody) },
			"StateDir", []string{"PATH/state holds PATH/state/pulumi-home/plugins/resource-x/pulumi-resource-x, owned by uid 65534 (nobody)"}},
		// chown -R root:root leaves a link's target as it was: the link
		// is root's, what Pulumi runs through it is not.
		{"root's link in the state dir to a user's plugin", func(t *testing.T, f rootFiles, _ *TimerOptions) {
			theirs := filepath.Join(f.dir, "opt", "pulumi-resource-y")
			testutil.WriteFile(t, theirs, []byte("#!/bin/sh\n"), 0o755)
			chown(t, theirs, nobody)
			symlink(t, theirs, filepath.Join(filepath.Dir(f.plugin), "pulumi-resource-y"))
		}, "StateDir", []string{"PATH/state holds PATH/state/pulumi-home/plugins/resource-x/pulumi-resource-y, a link to PATH/opt/pulumi-resource-y, which is owned by uid 65534 (nobody)"}},
		// The links every run makes again (the Pulumi CLI, the provider
		// plugin) may point anywhere: the service links its own.
		{"a user's links the service makes again", func(t *testing.T, f rootFiles, _ *TimerOptions) {
			theirs := filepath.Join(f.dir, "opt", "fleet")
			testutil.WriteFile(t, theirs, []byte("#!/bin/sh\n"), 0o755)
			chown(t, theirs, nobody)
			for _, l := range program.RelinkedPaths(f.state) {
				if err := os.MkdirAll(filepath.Dir(l), 0o700); err != nil {
					t.Fatal(err)
				}
				symlink(t, theirs, l)
			}
		}, "", nil},
		{"group-writable PULUMI_HOME", func(t *testing.T, f rootFiles, _ *TimerOptions) {
			chmod(t, filepath.Join(f.state, "pulumi-home"), 0o770)
		}, "StateDir", []string{"PATH/state holds PATH/state/pulumi-home, mode 0770, writable by others; chmod go-w PATH/state/pulumi-home"}},
		{"a state dir others may make first", func(t *testing.T, f rootFiles, o *TimerOptions) {
			tmp := filepath.Join(f.dir, "tmp")
			os.Mkdir(tmp, 0o755)
			chmod(t, tmp, 0o777|os.ModeSticky)
			o.StateDir = filepath.Join(tmp, "state")
		}, "StateDir", []string{"PATH/tmp/state does not exist yet, and PATH/tmp, mode 01777, lets others make it first; give --state-dir a directory of root's, such as /var/lib/relayfleet/state"}},
		{"user's --pulumi after --", func(t *testing.T, f rootFiles, o *TimerOptions) {
			chown(t, f.pulumi, nobody)
			o.ExtraArgs = append(o.ExtraArgs, "--pulumi", f.pulumi)
		}, "ExtraArgs[3]", []string{"--pulumi: PATH/opt/pulumi is owned by uid 65534 (nobody), not root; give --pulumi a build of root's (install -o root -g root -m 0755 PATH/opt/pulumi /usr/local/bin/)"}},
		{"user's --pulumi=", func(t *testing.T, f rootFiles, o *TimerOptions) {
			chown(t, f.pulumi, nobody)
			o.ExtraArgs = []string{"--pulumi=" + f.pulumi}
		}, "ExtraArgs[0]", []string{"--pulumi: PATH/opt/pulumi is owned by uid 65534"}},
		{"a relative --pulumi", func(t *testing.T, f rootFiles, o *TimerOptions) { o.ExtraArgs = []string{"--pulumi", "bin/pulumi"} },
			"ExtraArgs[1]", []string{"--pulumi bin/pulumi: not an absolute path; the service runs in /"}},
		{"user's --lab-dir", func(t *testing.T, f rootFiles, _ *TimerOptions) { chown(t, f.lab, nobody) },
			"ExtraArgs[1]", []string{"--lab-dir: PATH/lab is owned by uid 65534 (nobody)"}},
		{"user's file:// --backend", func(t *testing.T, f rootFiles, o *TimerOptions) {
			chown(t, f.lab, nobody)
			o.ExtraArgs = []string{"--backend=file://" + f.lab + "?no_checksum=true"}
		}, "ExtraArgs[0]", []string{"--backend: PATH/lab is owned by uid 65534 (nobody)"}},
		{"user's Pulumi CLI found without --pulumi", func(t *testing.T, f rootFiles, _ *TimerOptions) { chown(t, f.pulumi, nobody) },
			"Pulumi", []string{"PATH/opt/pulumi is owned by uid 65534 (nobody)", "give a build of root's with --pulumi after --"}},
		{"user's relay beside the binary", func(t *testing.T, f rootFiles, _ *TimerOptions) { chown(t, f.relay, nobody) },
			"Relay", []string{"PATH/bin/relay is owned by uid 65534 (nobody)", "--relay-binary"}},
		{"user's relay, with --relay-binary given", func(t *testing.T, f rootFiles, o *TimerOptions) {
			chown(t, f.relay, nobody)
			o.ExtraArgs = append(o.ExtraArgs, "--relay-binary", f.fleet)
		}, "", nil},
		// A service run as a user may use that user's files: they choose
		// only what they run themselves.
		{"nobody's files for a service run as nobody", func(t *testing.T, f rootFiles, o *TimerOptions) {
			for _, p := range []string{f.fleet, f.events, f.state, f.pulumi} {
				chown(t, p, nobody)
			}
			o.User = "nobody"
		}, "", nil},
		{"someone else's for a service run as nobody", func(t *testing.T, f rootFiles, o *TimerOptions) {
			chown(t, f.events, nobody+1)
			o.User = "nobody"
		}, "Events", []string{"PATH/etc/events.yaml is owned by uid 65535", "not root or uid 65534 (nobody)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRootFiles(t)
			o := f.options()
			tc.setup(t, f, &o)
			written, err := InstallTimer(context.Background(), o)
			if tc.field == "" {
				if err != nil || len(written) != 3 {
					t.Fatalf("wrote %q: %v", written, err)
				}
				return
			}
			var te *TimerFieldError
			if !errors.As(err, &te) || te.Field != tc.field {
				t.Fatalf("error %v, want a TimerFieldError for %s", err, tc.field)
			}
			for _, w := range tc.want {
				if w = strings.ReplaceAll(w, "PATH", f.dir); !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q is more than one line", err)
			}
			if entries, _ := os.ReadDir(f.units); len(entries) != 0 {
				t.Errorf("refused, but wrote %v", entries)
			}
		})
	}
}

// TestInstallTimerStateDirLeftToMake: a state dir that does not exist yet,
// where only root can make it, is left for the service to make.
func TestInstallTimerStateDirLeftToMake(t *testing.T) {
	f := newRootFiles(t)
	o := f.options()
	o.StateDir = filepath.Join(f.dir, "var", "lib", "state")
	if _, err := InstallTimer(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "var")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("made the state dir: %v", err)
	}
}

// TestInstallTimerDefaultFleetMessage: for the default --fleet-binary,
// the running fleet command, in a user's checkout, the message names the
// path, its owner, and says to install the binary as root's.
func TestInstallTimerDefaultFleetMessage(t *testing.T) {
	f := newRootFiles(t)
	alice := filepath.Join(f.dir, "home", "alice")
	bin := filepath.Join(alice, "relayfleet", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	chown(t, alice, nobody)
	r := f.options().Reconciler
	r.Fleet = filepath.Join(bin, "fleet")
	testutil.WriteFile(t, r.Fleet, []byte("#!/bin/sh\n"), 0o755)
	err := checkFiles(r, f.fleetFile, newTrust(0, ""), true, false)
	want := "reconciler Fleet: " + r.Fleet + " is under " + alice + ", owned by uid 65534 (nobody), not root, who could replace it; " +
		"--fleet-binary defaults to this fleet command; install it as root's (install -o root -g root -m 0755 " + r.Fleet + " /usr/local/bin/fleet) and give --fleet-binary /usr/local/bin/fleet"
	if err == nil || err.Error() != want {
		t.Errorf("error\n%v\nwant\n%s", err, want)
	}
}
