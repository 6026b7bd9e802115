package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/atomicfile"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/units"
)

// systemctlPath is the systemctl fleet events install runs; tests replace it.
var systemctlPath = "systemctl"

// reconcilerFlags names the flag behind each units.Reconciler field.
var reconcilerFlags = map[string]string{
	"Fleet":           "--fleet-binary",
	"Events":          "--events",
	"StateDir":        "--state-dir",
	"Interval":        "--interval",
	"User":            "--user",
	"EnvironmentFile": "--environment-file",
}

// installFlags are the flags of fleet events install.
type installFlags struct {
	events, stateDir, fleetBinary, user, envFile, unitDir string
	interval                                              time.Duration
	noEnable                                              bool
}

// eventsInstallCommand is fleet events install [-- RECONCILE-FLAGS].
func eventsInstallCommand(ios *cli.IOStreams) *cobra.Command {
	var f installFlags
	cmd := &cobra.Command{
		Use:   "install",
		Short: "the systemd timer that runs reconcile every minute",
		Long: `Write the systemd service and timer that run fleet events reconcile every
--interval on this host, then enable the timer. Arguments after -- are
further reconcile flags (such as --lab-dir DIR), passed as they are.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && cmd.ArgsLenAtDash() != 0 {
				return usagef("unexpected argument %q (reconcile flags go after --)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runEventsInstall(cmd.Context(), &f, args, ios.Out)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.events, "events", "", "events file the reconciler follows (required)")
	fs.StringVar(&f.stateDir, "state-dir", "", "state directory the reconciler uses (default $"+program.StateDirEnv+", else ~/.local/state/relayfleet of the user running install)")
	fs.StringVar(&f.fleetBinary, "fleet-binary", "", "the fleet binary the timer runs (default: this one)")
	fs.DurationVar(&f.interval, "interval", units.DefaultReconcileInterval, "how often the reconciler runs (at least "+units.MinReconcileInterval.String()+")")
	cli.Ranged(fs, "interval", cli.Durations(units.MinReconcileInterval, 24*time.Hour))
	fs.StringVar(&f.user, "user", "", "user the reconciler runs as (default root; lab events need root)")
	fs.StringVar(&f.envFile, "environment-file", "", "file with HCLOUD_TOKEN=, DIGITALOCEAN_TOKEN=, PULUMI_CONFIG_PASSPHRASE= lines: root's, mode 0600, in directories only root can write (systemd reads it for a service run as root)")
	fs.StringVar(&f.unitDir, "unit-dir", units.ReconcilerDir, "where the unit files are written")
	fs.BoolVar(&f.noEnable, "no-enable", false, "write the unit files only: no systemctl daemon-reload, no enable --now")
	return cmd
}

// runEventsInstall writes the systemd service and timer that run fleet
// events reconcile every --interval on this host, then enables the timer;
// extra are the arguments after --.
func runEventsInstall(ctx context.Context, f *installFlags, extra []string, stdout io.Writer) error {
	var err error
	if f.events == "" {
		return usagef("flag --events: required")
	}
	eventsPath, err := installPath("--events", f.events)
	if err != nil {
		return err
	}
	cat, err := inventories.LoadCatalogue(inventories.Beside(eventsPath, inventories.ProvidersFile))
	if err != nil {
		return err
	}
	if _, _, err := inventories.LoadEvents(eventsPath, cat); err != nil {
		return err
	}

	state := f.stateDir
	if state == "" {
		if state, err = program.DefaultStateDir(); err != nil {
			return usagef("flag --state-dir: %v", err)
		}
	}
	if state, err = filepath.Abs(state); err != nil {
		return usagef("flag --state-dir: %v", err)
	}

	fleetPath := f.fleetBinary
	if fleetPath == "" {
		if fleetPath, err = os.Executable(); err != nil {
			return usagef("flag --fleet-binary: %v; give the fleet binary's path", err)
		}
	}
	if fleetPath, err = installPath("--fleet-binary", fleetPath); err != nil {
		return err
	}
	if fi, err := os.Stat(fleetPath); err != nil || fi.Mode().Perm()&0o111 == 0 {
		return usagef("flag --fleet-binary: %s is not executable", fleetPath)
	}

	if f.interval < units.MinReconcileInterval {
		return usagef("flag --interval: at least %s, got %s", units.MinReconcileInterval, f.interval)
	}

	if f.user != "" && !f.noEnable {
		if _, err := user.Lookup(f.user); err != nil {
			return usagef("flag --user: %v", err)
		}
	}

	env := f.envFile
	if env != "" {
		if env, err = installPath("--environment-file", env); err != nil {
			return err
		}
		if err := rootOnly(env, envFileOwner); err != nil {
			return usagef("flag --environment-file: %v", err)
		}
	}

	if fi, err := os.Stat(f.unitDir); err != nil {
		return usagef("flag --unit-dir: %v", err)
	} else if !fi.IsDir() {
		return usagef("flag --unit-dir: %s is not a directory", f.unitDir)
	}

	files, err := units.RenderReconciler(units.Reconciler{
		Fleet: fleetPath, Events: eventsPath, StateDir: state, Interval: f.interval,
		User: f.user, EnvironmentFile: env, ExtraArgs: extra,
	})
	var fe *units.FieldError
	if errors.As(err, &fe) {
		name, ok := reconcilerFlags[fe.Field]
		if !ok {
			name = "arguments after --" // ExtraArgs[i]
		} else {
			name = "flag " + name
		}
		return usagef("%s: %s: %s", name, fe.Value, fe.Reason)
	}
	if err != nil {
		return err
	}

	for _, file := range files {
		path := filepath.Join(f.unitDir, filepath.Base(file.Path))
		if err := atomicfile.Write(path, file.Data, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s\n", path)
	}
	if f.noEnable {
		fmt.Fprintf(stdout, "not enabled (--no-enable); to start it: systemctl daemon-reload && systemctl enable --now %s\n", units.ReconcilerTimer)
	} else {
		for _, args := range [][]string{{"daemon-reload"}, {"enable", "--now", units.ReconcilerTimer}} {
			if err := installSystemctl(ctx, args...); err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "enabled and started %s: fleet events reconcile runs every %s\n", units.ReconcilerTimer, f.interval)
	}
	fmt.Fprintf(stdout, "watch it: systemctl list-timers %s\n", units.ReconcilerTimer)
	fmt.Fprintf(stdout, "its runs: journalctl -u %s\n", units.ReconcilerService)
	return nil
}

// envFileOwner is the owner the environment file and the directories
// above it must have: root, whom systemd reads it as. Tests that cannot
// chown set their own uid.
var envFileOwner uint32 = 0

// rootOnly checks that the reconciler's environment file is owner's
// (root's) and mode 0600 or tighter, and that no one else can replace it:
// every directory above it is owner's and writable by no one else, unless
// sticky (as /tmp is: others cannot rename or delete root's entries).
// Whoever can write the file chooses the environment of a service that
// runs as root, PATH and the Pulumi binary with it.
func rootOnly(path string, owner uint32) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	uid := fileOwner(fi)
	switch {
	case uid != owner:
		return fmt.Errorf("%s is owned by uid %d, not %d (root); whoever owns it chooses what the root service runs: chown root:root %s && chmod 600 %s", path, uid, owner, path, path)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s is mode %#o, readable beyond its owner; it holds tokens: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		di, err := os.Stat(dir)
		if err != nil {
			return err
		}
		sticky := di.Mode()&os.ModeSticky != 0
		switch {
		case fileOwner(di) != owner:
			return fmt.Errorf("%s is in %s, owned by uid %d, not %d (root), who could replace it: keep it in a directory of root's, such as /etc/relayfleet", path, dir, fileOwner(di), owner)
		case di.Mode().Perm()&0o022 != 0 && !sticky:
			return fmt.Errorf("%s is in %s, mode %#o, writable by others, who could replace it: chmod go-w %s", path, dir, di.Mode().Perm(), dir)
		}
		if dir == filepath.Dir(dir) {
			return nil
		}
	}
}

// fileOwner is the uid that owns a file.
func fileOwner(fi os.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid
	}
	return ^uint32(0)
}

// installPath checks that path names a file (not a directory) and returns
// it absolute; errors name the flag.
func installPath(flagName, path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", usagef("flag %s: %v", flagName, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", usagef("flag %s: %v", flagName, err)
	}
	if fi.IsDir() {
		return "", usagef("flag %s: %s is a directory", flagName, abs)
	}
	return abs, nil
}

// installSystemctl runs systemctl ARGS; a failure carries its output, on one
// line.
func installSystemctl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, systemctlPath, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.Join(strings.Fields(out.String()), " ")
		if msg != "" {
			return fmt.Errorf("systemctl %s: %v: %s", strings.Join(args, " "), err, msg)
		}
		return fmt.Errorf("systemctl %s: %v", strings.Join(args, " "), err)
	}
	return nil
}
