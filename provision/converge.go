package provision

import (
	"github.com/relayfleet/relayfleet/internal/text"

	"bytes"
	"context"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/sysctl"
	"github.com/relayfleet/relayfleet/units"
)

const unitDir = "/etc/systemd/system"

// Probe reads a host's actual state: the hashes of the files the plan
// manages and of any relayfleet drop-in on the box, the relay instances
// that are active, the sysctl values and the active release.
func Probe(ctx context.Context, run Runner, plan *Plan, rel Releases) (HostState, error) {
	paths := make([]string, 0, len(plan.State.Files))
	for p := range plan.State.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var quoted []string
	for _, p := range paths {
		quoted = append(quoted, text.ShellQuote(p))
	}
	script := fmt.Sprintf(`for f in %s %s/relay@*.service.d/10-relayfleet.conf; do [ -f "$f" ] && sha256sum "$f"; done
echo '== units'
systemctl list-units --type=service --all --plain --no-legend --no-pager 'relay@*.service' 2>/dev/null || true
`, strings.Join(quoted, " "), unitDir)
	out, err := run.Run(ctx, script, nil)
	if err != nil {
		return HostState{}, fmt.Errorf("probe: %w", err)
	}
	st := HostState{Files: map[string]string{}}
	files, unitList, _ := strings.Cut(string(out), "== units\n")
	st.Files = parseHashes(files)
	for _, p := range paths {
		if _, ok := st.Files[p]; ok && private(p) {
			// A secret readable by others is not converged: rewrite it.
			ok, err := isPrivate(ctx, run, p)
			if err != nil {
				return HostState{}, fmt.Errorf("probe: %w", err)
			}
			if !ok {
				st.Files[p] = "not-private"
			}
		}
	}
	st.Instances = parseActiveUnits(unitList)
	if plan.State.ResetSecret != "" {
		if st.ResetSecret, err = ProbeResetSecret(ctx, run, units.ResetSecretFile); err != nil {
			return HostState{}, fmt.Errorf("probe: %w", err)
		}
	}
	if st.Sysctl, err = ReadSysctl(ctx, run, plan.Profile); err != nil {
		return HostState{}, err
	}
	if st.SysctlRefused, err = ReadRefused(ctx, run); err != nil {
		return HostState{}, err
	}
	if st.Release, _, err = rel.Current(ctx, run); err != nil {
		return HostState{}, err
	}
	if st.Running, err = rel.Running(ctx, run, st.Instances); err != nil {
		return HostState{}, fmt.Errorf("probe: %w", err)
	}
	if st.ReleaseDropIns, err = releaseDropInReleases(ctx, run); err != nil {
		return HostState{}, fmt.Errorf("probe: %w", err)
	}
	if st.Draining, err = DrainingInstances(ctx, run, st.Instances); err != nil {
		return HostState{}, fmt.Errorf("probe: %w", err)
	}
	if st.RolloutDrained, err = rel.RolloutDrained(ctx, run); err != nil {
		return HostState{}, fmt.Errorf("probe: %w", err)
	}
	return st, nil
}

// parseHashes reads sha256sum output.
func parseHashes(s string) map[string]string {
	m := map[string]string{}
	for line := range strings.SplitSeq(s, "\n") {
		sum, p, ok := strings.Cut(line, "  ")
		if ok && shaRE.MatchString(sum) {
			m[p] = sum
		}
	}
	return m
}

// parseActiveUnits reads `systemctl list-units --plain --no-legend`:
// UNIT LOAD ACTIVE SUB DESCRIPTION; an instance counts as running only when
// it is active or reloading: one stuck activating (a crash loop in
// auto-restart) is not converged, and converge says so.
func parseActiveUnits(s string) []string {
	var us []string
	for line := range strings.SplitSeq(s, "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "● "))
		if len(f) < 3 || !strings.HasPrefix(f[0], "relay@") {
			continue
		}
		switch f[2] {
		case "active", "reloading":
			us = append(us, f[0])
		}
	}
	sort.Strings(us)
	return us
}

// Report is what Apply did on one host.
type Report struct {
	Changes []Change
	Sysctl  []sysctl.Result
	// Refused are sysctl keys this box's kernel does not take (with the
	// value it refused), found by this or an earlier run since boot.
	Refused map[string]string
	// Restarted lists the instances restarted or started, in order.
	Restarted []string
	Release   string
}

// Apply makes the host match the plan, doing only what changes lists:
// release upload, unit files (verified by systemd-analyze in a staging
// directory before they replace the old ones, then daemon-reload), sysctl
// (applied and read back), the release switch, and instance starts,
// restarts (one at a time, each waited for) and stops. An instance it
// starts or restarts loses its release drop-in first (dropin.go), and a
// ChangeDropIn removes one without a restart. binary is the relay build
// the plan's release names.
func Apply(ctx context.Context, run Runner, plan *Plan, changes []Change, rel Releases, binary []byte) (*Report, error) {
	r := &Report{Changes: changes, Release: plan.State.Release}
	has := func(kind string) bool {
		return slices.ContainsFunc(changes, func(c Change) bool { return c.Kind == kind })
	}
	if has(ChangeRelease) {
		// Upload first (nothing runs it yet); switch after the units.
		if Digest(binary) != plan.State.Release {
			return r, fmt.Errorf("apply: the relay binary given is %s, the plan wants %s", text.ShortSHA(Digest(binary)), text.ShortSHA(plan.State.Release))
		}
		if _, _, err := rel.Install(ctx, run, binary); err != nil {
			return r, err
		}
	}
	var unitFiles []string
	for _, c := range changes {
		if c.Kind == ChangeFile && strings.HasPrefix(c.What, unitDir+"/") {
			unitFiles = append(unitFiles, c.What)
		}
	}
	if len(unitFiles) > 0 {
		if err := verifyUnits(ctx, run, plan, rel); err != nil {
			return r, err
		}
	}
	for _, c := range changes {
		switch c.Kind {
		case ChangeFile:
			if private(c.What) {
				if err := writePrivate(ctx, run, c.What, plan.Content[c.What]); err != nil {
					return r, err
				}
				continue
			}
			if _, err := WriteFile(ctx, run, c.What, plan.Content[c.What], 0o644); err != nil {
				return r, err
			}
		case ChangeRemove:
			if _, err := run.Run(ctx, fmt.Sprintf("rm -f %s && rmdir --ignore-fail-on-non-empty %s", text.ShellQuote(c.What), text.ShellQuote(path.Dir(c.What))), nil); err != nil {
				return r, fmt.Errorf("remove %s: %w", c.What, err)
			}
		case ChangeSecret:
			// Before any relay starts: the unit loads it as a credential.
			if _, err := EnsureResetSecret(ctx, run, c.What); err != nil {
				return r, err
			}
		}
	}
	// Release drop-ins go before any instance starts: a start or restart
	// would run the drop-in's release (a cut-off rollout's), not current.
	// (restartMoved clears them itself, after its move.)
	var dropInsOf []string
	for _, c := range changes {
		switch c.Kind {
		case ChangeDropIn, ChangeStart, ChangeRestart:
			dropInsOf = append(dropInsOf, c.What)
		}
	}
	reload := len(unitFiles) > 0 || has(ChangeRemove) || has(ChangeDropIn)
	if len(dropInsOf) > 0 {
		removed, err := removeReleaseDropIns(ctx, run, dropInsOf)
		if err != nil {
			return r, err
		}
		reload = reload || len(removed) > 0
	}
	if reload {
		if err := daemonReload(ctx, run); err != nil {
			return r, err
		}
	}
	if has(ChangeSysctl) {
		res, err := ApplySysctl(ctx, run, plan.Profile)
		if err != nil {
			return r, err
		}
		r.Sysctl = res
	}
	if has(ChangeRelease) {
		if _, err := rel.Activate(ctx, run, plan.State.Release); err != nil {
			return r, err
		}
	}
	for _, c := range changes {
		var cmd string
		switch c.Kind {
		case ChangeStop:
			cmd = "systemctl disable --now " + text.ShellQuote(c.What)
		case ChangeStart:
			cmd = "systemctl enable --now " + text.ShellQuote(units.TargetName) + " " + text.ShellQuote(c.What)
		case ChangeRestart:
			cmd = "systemctl restart " + text.ShellQuote(c.What)
		case ChangeStale:
			// One drained on purpose (a drain follows) gets no mark.
			mark := !slices.Contains(changes, Change{Kind: ChangeDrain, What: c.What})
			if err := restartMoved(ctx, run, rel, c.What, mark); err != nil {
				return r, err
			}
			r.Restarted = append(r.Restarted, c.What)
			continue
		case ChangeUndrain:
			if err := DrainOnBox(ctx, run, c.What, false); err != nil {
				return r, err
			}
			if err := rel.ClearRolloutDrain(ctx, run, c.What); err != nil {
				return r, err
			}
			continue
		case ChangeDrain:
			if err := DrainOnBox(ctx, run, c.What, true); err != nil {
				return r, err
			}
			continue
		default:
			continue
		}
		if _, err := run.Run(ctx, cmd, nil); err != nil {
			return r, fmt.Errorf("%s %s: %w", c.Kind, c.What, err)
		}
		if c.Kind != ChangeStop {
			if err := waitActive(ctx, run, c.What, 30*time.Second); err != nil {
				return r, err
			}
			r.Restarted = append(r.Restarted, c.What)
		}
	}
	if has(ChangeRelease) {
		if _, err := rel.Prune(ctx, run); err != nil {
			return r, err
		}
	}
	return r, nil
}

// restartMoved restarts an instance make before break, as a rollout
// does: its listeners are moved out first (Move with the relay's own
// endpoints; no router to ask, so it waits two router polls), then it
// restarts and must answer its health check. Like a rollout's, its drain
// is marked (drainmark.go) until the restarted process admits, unless mark
// is false (an instance drained on purpose, which stays draining). When
// the move of a marked one fails, it is made admitting again, on a fresh
// context if ctx was cancelled.
func restartMoved(ctx context.Context, run Runner, rel Releases, inst string, mark bool) error {
	if mark {
		if err := rel.MarkRolloutDrain(ctx, run, inst); err != nil {
			return err
		}
	}
	if _, err := (Move{Run: run}).Out(ctx, inst); err != nil {
		if !mark {
			return fmt.Errorf("move %s out: %w", inst, err) // it stays draining, as it was
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if uerr := DrainOnBox(uctx, run, inst, false); uerr != nil {
			return fmt.Errorf("move %s out: %w; undrain: %v", inst, err, uerr)
		}
		if cerr := rel.ClearRolloutDrain(uctx, run, inst); cerr != nil {
			return fmt.Errorf("move %s out: %w; %v", inst, err, cerr)
		}
		return fmt.Errorf("move %s out: %w", inst, err)
	}
	// A release drop-in a cut-off rollout left would restart it on that
	// release again, not on current.
	if _, err := clearReleaseDropIns(ctx, run); err != nil {
		return err
	}
	if err := restartChecked(ctx, run, inst, HealthzOnBox); err != nil {
		return err
	}
	if !mark {
		return nil
	}
	return rel.ClearRolloutDrain(ctx, run, inst)
}

// writePrivate writes a secret file: its directory 0700 and the file 0600,
// both owned by root, the content written atomically through stdin (never
// a command line) and never echoed.
func writePrivate(ctx context.Context, run Runner, p string, data []byte) error {
	dir := path.Dir(p)
	if _, err := run.Run(ctx, fmt.Sprintf("install -d -m 0700 -o root -g root %[1]s && chown root:root %[1]s && chmod 0700 %[1]s", text.ShellQuote(dir)), nil); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	if _, err := WriteFile(ctx, run, p, data, 0o600); err != nil {
		return err
	}
	if _, err := run.Run(ctx, fmt.Sprintf("chown root:root %[1]s && chmod 0600 %[1]s", text.ShellQuote(p)), nil); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// isPrivate reports whether a secret file and its directory are root's
// alone (0600 and 0700).
func isPrivate(ctx context.Context, run Runner, p string) (bool, error) {
	out, err := run.Run(ctx, fmt.Sprintf("stat -c '%%a %%U %%G' %s %s", text.ShellQuote(p), text.ShellQuote(path.Dir(p))), nil)
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", p, err)
	}
	return strings.Join(strings.Fields(string(out)), " ") == "600 root root 700 root root", nil
}

// verifyUnits checks the plan's unit files with systemd-analyze verify in a
// staging directory, an instance of the template included, before any of
// them replaces a file systemd uses. The staged template runs the plan's
// release directly, since current may not point at it yet.
func verifyUnits(ctx context.Context, run Runner, plan *Plan, rel Releases) error {
	root, err := rel.root()
	if err != nil {
		return err
	}
	tmpl := bytes.ReplaceAll(plan.Content[unitDir+"/"+units.TemplateName],
		[]byte(root+"/current/relay"), []byte(root+"/releases/"+plan.State.Release+"/relay"))
	target := plan.Content[unitDir+"/"+units.TargetName]
	if len(tmpl) == 0 || target == nil || len(plan.State.Instances) == 0 {
		return fmt.Errorf("verify: the plan has no relay units")
	}
	inst := plan.State.Instances[0]
	stage, err := run.Run(ctx, "mktemp -d /tmp/relayfleet-verify.XXXXXX", nil)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	dir := strings.TrimSpace(string(stage))
	defer run.Run(context.WithoutCancel(ctx), "rm -rf "+text.ShellQuote(dir), nil)
	for name, data := range map[string][]byte{units.TemplateName: tmpl, units.TargetName: target} {
		if _, err := WriteFile(ctx, run, dir+"/"+name, data, 0o644); err != nil {
			return fmt.Errorf("verify: %w", err)
		}
	}
	cmd := fmt.Sprintf("cd %s && cp %s %s && systemd-analyze verify --man=no %s/%s %s/%s 2>&1",
		text.ShellQuote(dir), units.TemplateName, text.ShellQuote(inst), text.ShellQuote(dir), text.ShellQuote(inst), text.ShellQuote(dir), units.TargetName)
	out, err := run.Run(ctx, cmd, nil)
	if err != nil {
		return fmt.Errorf("systemd-analyze verify refused the relay units: %s", firstLine(string(out), err))
	}
	return nil
}

func firstLine(out string, err error) string {
	if s := strings.TrimSpace(out); s != "" {
		line, _, _ := strings.Cut(s, "\n")
		return line
	}
	return err.Error()
}

// waitActive waits until a unit is active, failing early if it fails.
func waitActive(ctx context.Context, run Runner, unit string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		out, err := run.Run(ctx, "systemctl is-active "+text.ShellQuote(unit)+" || true", nil)
		if err != nil {
			return err
		}
		switch state := strings.TrimSpace(string(out)); state {
		case "active":
			return nil
		case "failed":
			return fmt.Errorf("%s failed to start", unit)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is not active after %v", unit, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Converge brings one host to the plan: probe, diff, and unless check is
// set, apply; then probe again to prove it converged. It returns the
// changes it found (none on a converged host).
func Converge(ctx context.Context, run Runner, plan *Plan, rel Releases, binary []byte, check bool) (*Report, error) {
	actual, err := Probe(ctx, run, plan, rel)
	if err != nil {
		return nil, err
	}
	if plan, err = plan.ForBox(actual.Sysctl); err != nil {
		return nil, err
	}
	changes := Diff(plan.State, actual)
	if check || len(changes) == 0 {
		return &Report{Changes: changes, Release: actual.Release, Refused: actual.SysctlRefused}, nil
	}
	r, err := Apply(ctx, run, plan, changes, rel, binary)
	if err != nil {
		return r, err
	}
	after, err := Probe(ctx, run, plan, rel)
	if err != nil {
		return r, err
	}
	r.Refused = after.SysctlRefused
	if left := Diff(plan.State, after); len(left) > 0 {
		return r, fmt.Errorf("converge: still differs after applying: %s", left[0])
	}
	return r, nil
}
