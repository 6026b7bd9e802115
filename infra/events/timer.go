package events

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/atomicfile"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/units"
)

// TimerOptions are how InstallTimer puts the reconciler's systemd service
// and timer (units.RenderReconciler) on this host.
type TimerOptions struct {
	// Reconciler is the units' input as given: its paths may be
	// relative; Fleet "" is the running binary, StateDir "" is
	// program.DefaultStateDir.
	units.Reconciler
	// UnitDir is where the unit files go ("" = units.ReconcilerDir).
	UnitDir string
	// Enable runs systemctl daemon-reload and enable --now on the timer.
	Enable bool
	// Systemctl is the systemctl binary ("" = systemctl on $PATH).
	Systemctl string
	// Owner is a uid trusted, besides root and User, to own what the
	// service runs or reads and every directory above it (checkFiles):
	// 0 for a real install, where root alone is. Tests that cannot
	// chown to root give their own uid.
	Owner uint32
}

// TimerFieldError is a TimerOptions field that is bad input: Field is a
// units.Reconciler field's name or UnitDir. RenderReconciler's refusals
// come as *units.FieldError.
type TimerFieldError struct {
	Field string
	Err   error
}

func (e *TimerFieldError) Error() string { return "reconciler " + e.Field + ": " + e.Err.Error() }

func (e *TimerFieldError) Unwrap() error { return e.Err }

func timerErr(field string, format string, args ...any) error {
	return &TimerFieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// InstallTimer checks o against this host (the files exist, the fleet
// binary is executable, the user exists when the timer is enabled, and
// what the service runs or reads is root's alone, or its User's:
// checkFiles), writes the service and the timer into o.UnitDir and, with
// o.Enable, reloads systemd and enables the timer. It returns the paths
// written, also when a later step fails. A state dir that does not exist
// yet is left for the service to make, once checked that no one else can
// make it first.
func InstallTimer(ctx context.Context, o TimerOptions) ([]string, error) {
	r := o.Reconciler
	var err error
	if r.Events, err = installPath("Events", r.Events); err != nil {
		return nil, err
	}
	cat, err := inventories.LoadCatalogue(inventories.Beside(r.Events, inventories.ProvidersFile))
	if err != nil {
		return nil, err
	}
	evs, fleet, err := inventories.LoadEvents(r.Events, cat)
	if err != nil {
		return nil, err
	}

	stateDefault := r.StateDir == ""
	if stateDefault {
		if r.StateDir, err = program.DefaultStateDir(); err != nil {
			return nil, &TimerFieldError{"StateDir", err}
		}
	}
	if r.StateDir, err = filepath.Abs(r.StateDir); err != nil {
		return nil, &TimerFieldError{"StateDir", err}
	}

	fleetDefault := r.Fleet == ""
	if fleetDefault {
		if r.Fleet, err = os.Executable(); err != nil {
			return nil, timerErr("Fleet", "%v; give the fleet binary's path", err)
		}
	}
	if r.Fleet, err = installPath("Fleet", r.Fleet); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(r.Fleet); err != nil || fi.Mode().Perm()&0o111 == 0 {
		return nil, timerErr("Fleet", "%s is not executable", r.Fleet)
	}

	if r.Interval != 0 && r.Interval < units.MinReconcileInterval {
		return nil, timerErr("Interval", "at least %s, got %s", units.MinReconcileInterval, r.Interval)
	}

	if r.User != "" && o.Enable {
		if _, err := user.Lookup(r.User); err != nil {
			return nil, &TimerFieldError{"User", err}
		}
	}

	if r.EnvironmentFile != "" {
		if r.EnvironmentFile, err = installPath("EnvironmentFile", r.EnvironmentFile); err != nil {
			return nil, err
		}
	}

	if fleet != nil && inventories.IsRemoteBackend(fleet.State.Backend) {
		if err := checkSharedEnv(r.EnvironmentFile, fleet.State.Backend); err != nil {
			return nil, err
		}
	}

	files, err := units.RenderReconciler(r)
	if err != nil {
		return nil, err
	}
	if err := checkFiles(r, evs.FleetPath, newTrust(o.Owner, r.User), fleetDefault, stateDefault); err != nil {
		return nil, err
	}

	dir := o.UnitDir
	if dir == "" {
		dir = units.ReconcilerDir
	}
	if fi, err := os.Stat(dir); err != nil {
		return nil, &TimerFieldError{"UnitDir", err}
	} else if !fi.IsDir() {
		return nil, timerErr("UnitDir", "%s is not a directory", dir)
	}

	var written []string
	for _, f := range files {
		path := filepath.Join(dir, filepath.Base(f.Path))
		if err := atomicfile.Write(path, f.Data, 0o644); err != nil {
			return written, err
		}
		written = append(written, path)
	}
	if o.Enable {
		// The exporter is restarted, not only started: a new install may
		// have changed its command line.
		for _, args := range [][]string{{"daemon-reload"}, {"enable", "--now", units.ReconcilerTimer}, {"enable", units.ExporterService}, {"restart", units.ExporterService}} {
			if err := systemctl(ctx, o.Systemctl, args...); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// checkSharedEnv checks that the timer of a fleet on a shared backend
// gets what it needs to use it through its environment file, never its
// command line: the team's passphrase (the reconciler refuses to
// generate one for a shared backend) and, for s3://, the store's
// credentials (variables, or a shared credentials file).
func checkSharedEnv(envFile, backend string) error {
	what := fmt.Sprintf("the fleet file's state.backend %s is shared: the timer needs an environment file with %s= (or %s=)",
		program.RedactURL(backend), program.PassphraseFileEnv, program.PassphraseEnv)
	s3 := strings.HasPrefix(backend, "s3:")
	if s3 {
		what += " and the store's credentials (AWS_SHARED_CREDENTIALS_FILE=, or AWS_ACCESS_KEY_ID= and AWS_SECRET_ACCESS_KEY=)"
	}
	if envFile == "" {
		return timerErr("EnvironmentFile", "none given; %s", what)
	}
	data, err := os.ReadFile(envFile)
	if err != nil {
		return &TimerFieldError{"EnvironmentFile", err}
	}
	keys := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") && strings.TrimSpace(v) != "" {
			keys[strings.TrimSpace(k)] = true
		}
	}
	pass := keys[program.PassphraseFileEnv] || keys[program.PassphraseEnv]
	creds := !s3 || keys["AWS_SHARED_CREDENTIALS_FILE"] || keys["AWS_PROFILE"] || (keys["AWS_ACCESS_KEY_ID"] && keys["AWS_SECRET_ACCESS_KEY"])
	if !pass || !creds {
		return timerErr("EnvironmentFile", "%s lacks them; %s", envFile, what)
	}
	return nil
}

// fileOwner is the uid that owns a file.
func fileOwner(fi os.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid
	}
	return ^uint32(0)
}

// installPath checks that path names a file (not a directory) and returns
// it absolute; errors name the field.
func installPath(field, path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", &TimerFieldError{field, err}
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", &TimerFieldError{field, err}
	}
	if fi.IsDir() {
		return "", timerErr(field, "%s is a directory", abs)
	}
	return abs, nil
}

// systemctl runs systemctl ARGS; a failure carries its output, on one
// line.
func systemctl(ctx context.Context, path string, args ...string) error {
	if path == "" {
		path = "systemctl"
	}
	cmd := exec.CommandContext(ctx, path, args...)
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

// WriteInstalled says, after InstallTimer(o) succeeded, whether the timer
// runs and how to watch it.
func WriteInstalled(w io.Writer, o TimerOptions) {
	if !o.Enable {
		fmt.Fprintf(w, "not enabled (--no-enable); to start them: systemctl daemon-reload && systemctl enable --now %s %s\n", units.ReconcilerTimer, units.ExporterService)
	} else {
		fmt.Fprintf(w, "enabled and started %s: fleet events reconcile runs every %s\n", units.ReconcilerTimer, o.Interval)
		fmt.Fprintf(w, "enabled and started %s: /metrics on http://%s (fleet monitor --events-exporter %s scrapes it)\n", units.ExporterService, o.Listen(), o.Listen())
	}
	fmt.Fprintf(w, "watch it: systemctl list-timers %s\n", units.ReconcilerTimer)
	fmt.Fprintf(w, "its runs: journalctl -u %s\n", units.ReconcilerService)
}
