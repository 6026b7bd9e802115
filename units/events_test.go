package units

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

func reconcilerGolden(t *testing.T, name string, files []File) {
	t.Helper()
	var got bytes.Buffer
	for _, f := range files {
		got.WriteString("=== " + f.Path + "\n")
		got.Write(f.Data)
	}
	testutil.Golden(t, filepath.Join("testdata", name), got.Bytes())
}

var defaultReconciler = Reconciler{
	Fleet:    "/usr/local/bin/fleet",
	Events:   "/etc/relayfleet/events.yaml",
	StateDir: "/var/lib/relayfleet/state",
}

func fullReconciler() Reconciler {
	r := defaultReconciler
	r.Interval = 90 * time.Second
	r.User = "relayfleet"
	r.EnvironmentFile = "/etc/relayfleet/tokens.env"
	r.ExtraArgs = []string{"--lab-dir", "/srv/relay fleet/lab"}
	return r
}

func TestRenderReconcilerGolden(t *testing.T) {
	for name, r := range map[string]Reconciler{
		"reconciler-default.golden": defaultReconciler,
		"reconciler-full.golden":    fullReconciler(),
	} {
		t.Run(name, func(t *testing.T) {
			files, err := RenderReconciler(r)
			if err != nil {
				t.Fatal(err)
			}
			if len(files) != 3 || files[0].Path != "/etc/systemd/system/"+ReconcilerService || files[1].Path != "/etc/systemd/system/"+ReconcilerTimer || files[2].Path != "/etc/systemd/system/"+ExporterService {
				t.Fatalf("files = %v", files)
			}
			reconcilerGolden(t, name, files)
		})
	}
}

func TestRenderReconcilerDefaults(t *testing.T) {
	files, err := RenderReconciler(defaultReconciler)
	if err != nil {
		t.Fatal(err)
	}
	service, timer := string(files[0].Data), string(files[1].Data)
	for _, want := range []string{
		"Type=oneshot\n",
		"User=root\n",
		"ExecStart=/usr/local/bin/fleet events reconcile --events /etc/relayfleet/events.yaml --state-dir /var/lib/relayfleet/state\n",
		"TimeoutStartSec=30min\n",
	} {
		if !strings.Contains(service, want) {
			t.Errorf("service lacks %q:\n%s", want, service)
		}
	}
	for _, bad := range []string{"EnvironmentFile", "NoNewPrivileges", "SystemCallFilter", "ProtectSystem", "PrivateTmp"} {
		if strings.Contains(service, bad) {
			t.Errorf("service has %s:\n%s", bad, service)
		}
	}
	for _, want := range []string{"OnBootSec=1min\n", "OnUnitActiveSec=1min\n", "AccuracySec=1s\n", "WantedBy=timers.target\n"} {
		if !strings.Contains(timer, want) {
			t.Errorf("timer lacks %q:\n%s", want, timer)
		}
	}
}

func TestRenderReconcilerRejects(t *testing.T) {
	for _, tc := range []struct {
		mutate func(*Reconciler)
		want   string
	}{
		{func(r *Reconciler) { r.Events = "x" }, `units: reconciler Events "x": not an absolute path`},
		{func(r *Reconciler) { r.Events = "" }, `reconciler Events "": empty`},
		{func(r *Reconciler) { r.Fleet = "fleet" }, `reconciler Fleet "fleet": not an absolute path`},
		{func(r *Reconciler) { r.Fleet = `/opt/"fleet"` }, `reconciler Fleet`},
		{func(r *Reconciler) { r.StateDir = "state" }, `reconciler StateDir "state": not an absolute path`},
		{func(r *Reconciler) { r.StateDir = "/s\nExecStartPre=/bin/sh" }, `reconciler StateDir "/s\nExecStartPre=/bin/sh": contains a newline`},
		{func(r *Reconciler) { r.EnvironmentFile = "tokens.env" }, `reconciler EnvironmentFile "tokens.env": not an absolute path`},
		{func(r *Reconciler) { r.EnvironmentFile = "/etc/my tokens" }, `reconciler EnvironmentFile "/etc/my tokens": contains whitespace`},
		{func(r *Reconciler) { r.Interval = 5 * time.Second }, `reconciler Interval 5s: under the minimum of 10s`},
		{func(r *Reconciler) { r.Interval = 10*time.Second + time.Microsecond }, `reconciler Interval`},
		{func(r *Reconciler) { r.User = "root\nExecStartPre=/bin/sh" }, `reconciler User`},
		{func(r *Reconciler) { r.User = "%u" }, `reconciler User "%u": not a user name`},
		{func(r *Reconciler) { r.ExtraArgs = []string{"--lab-dir", "   "} }, `reconciler ExtraArgs[1] "   ": empty or only whitespace`},
		{func(r *Reconciler) { r.ExtraArgs = []string{""} }, `reconciler ExtraArgs[0] "": empty`},
		{func(r *Reconciler) { r.ExtraArgs = []string{"--x\nExecStartPre=/bin/sh"} }, `reconciler ExtraArgs[0] "--x\nExecStartPre=/bin/sh": contains a newline`},
		{func(r *Reconciler) { r.ExtraArgs = []string{"a\tb\x00"} }, `reconciler ExtraArgs[0]`},
		{func(r *Reconciler) { r.ExtraArgs = []string{"--events=/tmp/other.yaml"} }, `reconciler ExtraArgs[0] "--events=/tmp/other.yaml": set the reconciler's Events or StateDir instead`},
		{func(r *Reconciler) { r.ExtraArgs = []string{"-state-dir", "/x"} }, `reconciler ExtraArgs[0] "-state-dir"`},
		{func(r *Reconciler) { r.ExporterListen = "9479" }, `reconciler ExporterListen "9479": not a HOST:PORT`},
		{func(r *Reconciler) { r.ExporterListen = "127.0.0.1:9479 --x" }, `reconciler ExporterListen`},
	} {
		r := defaultReconciler
		tc.mutate(&r)
		_, err := RenderReconciler(r)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("RenderReconciler(%+v) = %v, want an error with %q", r, err, tc.want)
		}
	}
}

// TestRenderExporter: the exporter's service runs fleet events exporter
// with the reconciler's files, its listen address, a staleness threshold
// of two intervals and 30s, and of the reconcile flags after -- only
// those the exporter takes (where the Pulumi backend and the lab are).
func TestRenderExporter(t *testing.T) {
	r := defaultReconciler
	r.Interval = 20 * time.Second
	r.ExporterListen = "10.0.0.1:9000"
	r.ExtraArgs = []string{"--lab-dir", "/lab", "--lease-ttl", "5m", "--json", "--backend=file:///b", "--now", "2030-01-01T00:00:00Z", "--pulumi", "/p"}
	files, err := RenderReconciler(r)
	if err != nil {
		t.Fatal(err)
	}
	want := "ExecStart=/usr/local/bin/fleet events exporter --events /etc/relayfleet/events.yaml --state-dir /var/lib/relayfleet/state --listen 10.0.0.1:9000 --stale-after 1m10s --lab-dir /lab --backend=file:///b --pulumi /p\n"
	if got := string(files[2].Data); !strings.Contains(got, want) || !strings.Contains(got, "Restart=always\n") {
		t.Fatalf("exporter service lacks %q or Restart=always:\n%s", want, got)
	}
}

func TestExecQuote(t *testing.T) {
	for in, want := range map[string]string{
		"--lab-dir":        "--lab-dir",
		"/srv/lab":         "/srv/lab",
		"/srv/relay fleet": `"/srv/relay fleet"`,
		`a"b`:              `"a\"b"`,
		`a\b`:              `"a\\b"`,
		"it's":             `"it's"`,
		"50%":              "50%%",
		"$HOME":            "$$HOME",
		"${HOME} x":        `"$${HOME} x"`,
		";":                `";"`,
		"a;b":              "a;b",
	} {
		if got := execQuote(in); got != want {
			t.Errorf("execQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestSystemdSpan(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute:                           "1min",
		30 * time.Second:                      "30s",
		90 * time.Second:                      "1min 30s",
		2*time.Hour + 5*time.Minute:           "2h 5min",
		10*time.Second + 500*time.Millisecond: "10s 500ms",
		30 * time.Minute:                      "30min",
	} {
		if got := systemdSpan(d); got != want {
			t.Errorf("systemdSpan(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestRenderReconcilerVerify has systemd-analyze verify read the rendered
// units, pointed at a real executable (verify checks ExecStart's).
func TestRenderReconcilerVerify(t *testing.T) {
	analyze := testutil.Require(t, "systemd-analyze", "systemd")
	dir := t.TempDir()
	fleet := filepath.Join(dir, "bin dir", "fleet")
	if err := os.MkdirAll(filepath.Dir(fleet), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fleet, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	odd := fullReconciler()
	odd.ExtraArgs = []string{"--note=50% off $HOME", ";", `a "quoted" \ word`, "it's"}
	for name, r := range map[string]Reconciler{"default": defaultReconciler, "full": fullReconciler(), "odd-args": odd} {
		t.Run(name, func(t *testing.T) {
			r.Fleet = fleet
			r.User = "" // verify resolves User=; root exists everywhere
			files, err := RenderReconciler(r)
			if err != nil {
				t.Fatal(err)
			}
			unitDir := filepath.Join(dir, name)
			if err := os.MkdirAll(unitDir, 0o755); err != nil {
				t.Fatal(err)
			}
			var paths []string
			for _, f := range files {
				p := filepath.Join(unitDir, filepath.Base(f.Path))
				if err := os.WriteFile(p, f.Data, 0o644); err != nil {
					t.Fatal(err)
				}
				paths = append(paths, p)
			}
			out, err := exec.Command(analyze, append([]string{"verify", "--man=no"}, paths...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
			}
			// verify exits 0 on some warnings; any line about our units is one.
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, "relayfleet-events") {
					t.Errorf("systemd-analyze verify: %s", line)
				}
			}
		})
	}
	// The negative check: verify does notice a missing executable, so the
	// test above would catch a mangled ExecStart path.
	if err := os.Remove(fleet); err != nil {
		t.Fatal(err)
	}
	files, err := RenderReconciler(Reconciler{Fleet: fleet, Events: "/e", StateDir: "/s"})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, ReconcilerService)
	testutil.WriteFile(t, p, files[0].Data, 0o644)
	if out, err := exec.Command(analyze, "verify", "--man=no", p).CombinedOutput(); err == nil {
		t.Errorf("systemd-analyze verify passed a service whose executable is gone:\n%s", out)
	}
}
