package units

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/coreos/go-systemd/v22/unit"
)

// Names of the event reconciler's units.
const (
	ReconcilerService = "relayfleet-events.service"
	ReconcilerTimer   = "relayfleet-events.timer"
	// ExporterService runs fleet events exporter beside the timer.
	ExporterService = "relayfleet-events-exporter.service"
	// ReconcilerDir is where RenderReconciler's files go on the ops host.
	ReconcilerDir = "/etc/systemd/system"
)

// Reconciler defaults and limits.
const (
	DefaultReconcileInterval = time.Minute
	MinReconcileInterval     = 10 * time.Second
	// ReconcileTimeout bounds one run: a Pulumi up that creates or
	// destroys many boxes, each converged over SSH, takes minutes.
	ReconcileTimeout = 30 * time.Minute
	// DefaultExporterListen is where the events exporter serves /metrics.
	DefaultExporterListen = "127.0.0.1:9479"
)

// Reconciler is how the event reconciler (fleet events reconcile) runs on
// an ops host: a oneshot service started by a monotonic timer. systemd never
// starts a second run of a oneshot service while one is activating, and the
// reconciler takes a lock of its own as well.
type Reconciler struct {
	Fleet    string        // absolute path of the fleet binary
	Events   string        // absolute path of the events file
	StateDir string        // absolute path of the state directory (--state-dir)
	Interval time.Duration // how often; 0 = DefaultReconcileInterval
	User     string        // "" = root
	// EnvironmentFile is an optional file (mode 0600) holding HCLOUD_TOKEN,
	// DIGITALOCEAN_TOKEN and PULUMI_CONFIG_PASSPHRASE (or _FILE), and for a
	// shared s3:// backend the store's AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY (or AWS_SHARED_CREDENTIALS_FILE): the tokens
	// and keys are never on the command line or in the unit.
	EnvironmentFile string
	// ExtraArgs are further reconcile flags such as --lab-dir X, passed
	// as they are (quoted for systemd where they need it).
	ExtraArgs []string
	// ExporterListen is the events exporter's HOST:PORT ("" =
	// DefaultExporterListen).
	ExporterListen string
}

// Listen is where the events exporter serves /metrics.
func (r Reconciler) Listen() string {
	if r.ExporterListen == "" {
		return DefaultExporterListen
	}
	return r.ExporterListen
}

// StaleAfter is how old the last reconcile without an error may be
// before ReconcilerStale fires: two runs missed, and 30s for the one
// under way to finish (a run still going renews its lease, which holds
// the alert off).
func (r Reconciler) StaleAfter() time.Duration { return 2*r.interval() + 30*time.Second }

// userRE is a conservative user name (or a numeric uid) for User=.
var userRE = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_.-]{0,31}|[0-9]{1,10})$`)

func (r Reconciler) interval() time.Duration {
	if r.Interval == 0 {
		return DefaultReconcileInterval
	}
	return r.Interval
}

// FieldError is a Reconciler field that RenderReconciler refuses.
type FieldError struct {
	Field  string // Fleet, Events, StateDir, Interval, User, EnvironmentFile or ExtraArgs[i]
	Value  string // the value, as the message shows it
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("units: reconciler %s %s: %s", e.Field, e.Value, e.Reason)
}

func fieldErr(field string, value any, reason string) error {
	v := fmt.Sprint(value)
	if s, ok := value.(string); ok {
		v = strconv.Quote(s)
	}
	return &FieldError{Field: field, Value: v, Reason: reason}
}

func (r Reconciler) validate() error {
	for _, f := range []struct{ name, path string }{
		{"Fleet", r.Fleet}, {"Events", r.Events}, {"StateDir", r.StateDir}, {"EnvironmentFile", r.EnvironmentFile},
	} {
		if f.name == "EnvironmentFile" && f.path == "" {
			continue
		}
		if err := checkArg(f.path); err != nil {
			return fieldErr(f.name, f.path, err.Error())
		}
		if !strings.HasPrefix(f.path, "/") {
			return fieldErr(f.name, f.path, "not an absolute path")
		}
	}
	// systemd refuses quotes and backslashes in the executable's path, and
	// would not expand $$ in it.
	if strings.ContainsAny(r.Fleet, "\"'\\$") {
		return fieldErr("Fleet", r.Fleet, "systemd wants no quote, backslash or $ in the executable's path")
	}
	// EnvironmentFile= takes the rest of the line as one path; keep it to
	// paths that need no thought about how systemd trims it.
	if strings.IndexFunc(r.EnvironmentFile, unicode.IsSpace) >= 0 {
		return fieldErr("EnvironmentFile", r.EnvironmentFile, "contains whitespace")
	}
	if iv := r.interval(); iv < MinReconcileInterval {
		return fieldErr("Interval", iv, "under the minimum of "+MinReconcileInterval.String())
	} else if iv%time.Millisecond != 0 {
		return fieldErr("Interval", iv, "not a whole number of milliseconds")
	}
	if l := r.Listen(); strings.IndexFunc(l, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }) >= 0 {
		return fieldErr("ExporterListen", l, "not a HOST:PORT")
	} else if _, port, err := net.SplitHostPort(l); err != nil || port == "" {
		return fieldErr("ExporterListen", l, "not a HOST:PORT")
	}
	if r.User != "" && !userRE.MatchString(r.User) {
		return fieldErr("User", r.User, "not a user name")
	}
	for i, a := range r.ExtraArgs {
		if err := checkArg(a); err != nil {
			return fieldErr(fmt.Sprintf("ExtraArgs[%d]", i), a, err.Error())
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "events" || name == "state-dir") {
			return fieldErr(fmt.Sprintf("ExtraArgs[%d]", i), a, "set the reconciler's Events or StateDir instead")
		}
	}
	return nil
}

// checkArg rejects what cannot be one argument of a unit file line:
// control characters (newlines would inject directives) and blank text.
func checkArg(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("empty or only whitespace")
	}
	if strings.ContainsAny(s, "\n\r") {
		return errors.New("contains a newline")
	}
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return errors.New("contains a control character")
	}
	return nil
}

// execQuote writes one ExecStart= argument the way systemd reads it back:
// % and $ doubled (systemd resolves specifiers in each word, and expands
// $VAR when it runs the command), and an argument with whitespace, quotes
// or backslashes, or a lone ";" (a command separator unless quoted), put
// in double quotes with C escapes for '\' and '"'.
func execQuote(s string) string {
	s = strings.ReplaceAll(s, "%", "%%")
	s = strings.ReplaceAll(s, "$", "$$")
	if s != "" && s != ";" && !strings.ContainsAny(s, " \t\"'\\") {
		return s
	}
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	return `"` + s + `"`
}

// systemdSpan writes d in systemd's time span format ("1min", "30s",
// "1h 30min", "1500ms").
func systemdSpan(d time.Duration) string {
	var parts []string
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "min"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if n := d / u.d; n > 0 {
			parts = append(parts, fmt.Sprintf("%d%s", n, u.name))
			d -= n * u.d
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, " ")
}

// exporterShared are the reconcile flags the exporter takes too (where
// the Pulumi backend and the lab are); ExtraArgs keeps only these for it.
var exporterShared = map[string]bool{"backend": true, "pulumi": true, "ssh-key": true, "lab-dir": true, "lab-images": true, "lab-bridge": true, "lab-subnet": true}

// exporterArgs are the ExtraArgs the exporter takes: the shared flags,
// as --flag=value or --flag value. Every other reconcile flag takes a
// value but --json.
func exporterArgs(extra []string) []string {
	var out []string
	for i := 0; i < len(extra); i++ {
		a := extra[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takesNext := !hasValue && name != "json" && i+1 < len(extra)
		if exporterShared[name] {
			out = append(out, a)
			if takesNext {
				out = append(out, extra[i+1])
			}
		}
		if takesNext {
			i++
		}
	}
	return out
}

// RenderReconciler returns relayfleet-events.service,
// relayfleet-events.timer and relayfleet-events-exporter.service, under
// /etc/systemd/system/.
func RenderReconciler(r Reconciler) ([]File, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	args := []string{r.Fleet, "events", "reconcile", "--events", r.Events, "--state-dir", r.StateDir}
	args = append(args, r.ExtraArgs...)
	for i := range args {
		args[i] = execQuote(args[i])
	}
	user := r.User
	if user == "" {
		// Named even for root: with User= set, systemd gives the process
		// HOME, USER, LOGNAME and SHELL, and Pulumi (~/.pulumi, the
		// make pulumi build under ~/.cache) needs HOME.
		user = "root"
	}
	opts := []*unit.UnitOption{
		opt("Unit", "Description", "relayfleet event reconcile: burst boxes up before events, destroyed after"),
		opt("Unit", "After", "network-online.target"),
		opt("Unit", "Wants", "network-online.target"),
		opt("Service", "Type", "oneshot"),
		opt("Service", "User", user),
	}
	if r.EnvironmentFile != "" {
		// "-": a missing file is not fatal here; the reconciler reports
		// the missing token itself, in the journal, in one line.
		opts = append(opts, opt("Service", "EnvironmentFile", "-"+strings.ReplaceAll(r.EnvironmentFile, "%", "%%")))
	}
	opts = append(opts,
		opt("Service", "ExecStart", strings.Join(args, " ")),
		opt("Service", "TimeoutStartSec", systemdSpan(ReconcileTimeout)),
		opt("Service", "SyslogIdentifier", "relayfleet-events"),
		// Hardening, kept modest on purpose. The reconciler runs Pulumi
		// (which writes ~/.pulumi and the state directory and starts
		// plugin processes), SSH, and for lab events systemd-nspawn as
		// root: it mounts overlays, creates bridges and cgroups, and
		// leaves box launchers running after this run ends. So:
		//   - no NoNewPrivileges, SystemCallFilter, LockPersonality,
		//     RestrictNamespaces, RestrictSUIDSGID or other seccomp
		//     options: seccomp filters are inherited by the nspawn
		//     containers (and break their systemd), and for a non-root
		//     User= they imply NoNewPrivileges, which breaks sudo;
		//   - no ProtectSystem, ProtectHome, PrivateTmp, PrivateDevices,
		//     ProtectKernel*, ProtectControlGroups or ProtectClock: each
		//     gives the service its own mount namespace or device policy,
		//     so lab mounts would be invisible to the host's own fleet lab
		//     commands, and nspawn would lose /dev/net/tun, loop devices
		//     and the writable cgroup hierarchies;
		//   - the default KillMode=control-group stays: a run that times
		//     out takes its Pulumi plugins with it, while lab launchers
		//     move themselves into the lab's own cgroups (every hierarchy)
		//     and survive the end of the run.
		//   - no OOMScoreAdjust, Nice or IO class either: lab boxes would
		//     inherit them.
		// What is left: the files it creates are private (state,
		// passphrase, keys).
		opt("Service", "UMask", "0077"),
	)
	service, err := render(ReconcilerDir+"/"+ReconcilerService, opts)
	if err != nil {
		return nil, err
	}
	timer, err := render(ReconcilerDir+"/"+ReconcilerTimer, []*unit.UnitOption{
		opt("Unit", "Description", "relayfleet event reconcile every "+systemdSpan(r.interval())),
		// Monotonic timers: a run missed while the host was down is
		// made up for by OnBootSec, so Persistent= is not needed.
		opt("Timer", "OnBootSec", "1min"),
		opt("Timer", "OnUnitActiveSec", systemdSpan(r.interval())),
		opt("Timer", "AccuracySec", "1s"),
		opt("Timer", "Unit", ReconcilerService),
		opt("Install", "WantedBy", "timers.target"),
	})
	if err != nil {
		return nil, err
	}
	exporter, err := renderExporter(r)
	if err != nil {
		return nil, err
	}
	return []File{service, timer, exporter}, nil
}

// renderExporter is the events exporter's service: a long-running
// fleet events exporter with the reconciler's files, user and
// environment file, restarted when it stops. It runs no boxes (it lists
// them and reads the Pulumi backend), so it is hardened further than
// the reconciler.
func renderExporter(r Reconciler) (File, error) {
	args := []string{r.Fleet, "events", "exporter", "--events", r.Events, "--state-dir", r.StateDir,
		"--listen", r.Listen(), "--stale-after", r.StaleAfter().String()}
	args = append(args, exporterArgs(r.ExtraArgs)...)
	for i := range args {
		args[i] = execQuote(args[i])
	}
	user := r.User
	if user == "" {
		user = "root" // HOME for Pulumi, as for the reconciler
	}
	opts := []*unit.UnitOption{
		opt("Unit", "Description", "relayfleet events exporter: the reconciler's heartbeat and every burst box, on /metrics"),
		opt("Unit", "After", "network-online.target"),
		opt("Unit", "Wants", "network-online.target"),
		opt("Service", "Type", "simple"),
		opt("Service", "User", user),
	}
	if r.EnvironmentFile != "" {
		opts = append(opts, opt("Service", "EnvironmentFile", "-"+strings.ReplaceAll(r.EnvironmentFile, "%", "%%")))
	}
	opts = append(opts,
		opt("Service", "ExecStart", strings.Join(args, " ")),
		opt("Service", "Restart", "always"),
		opt("Service", "RestartSec", "5s"),
		opt("Service", "SyslogIdentifier", "relayfleet-events-exporter"),
		opt("Service", "UMask", "0077"),
		opt("Service", "NoNewPrivileges", "yes"),
		opt("Service", "PrivateTmp", "yes"),
		opt("Service", "ProtectKernelTunables", "yes"),
		opt("Service", "ProtectKernelModules", "yes"),
		opt("Service", "ProtectControlGroups", "yes"),
		opt("Service", "RestrictSUIDSGID", "yes"),
		opt("Service", "LockPersonality", "yes"),
		opt("Install", "WantedBy", "multi-user.target"),
	)
	return render(ReconcilerDir+"/"+ExporterService, opts)
}
