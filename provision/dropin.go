package provision

import (
	"context"
	"fmt"
	"strings"

	"github.com/relayfleet/relayfleet/internal/text"
)

// A rollout's canary: the first process a rollout restarts on a box runs
// the new release through a runtime drop-in while current still points at
// the old one, so that a crash or a reboot of any other process meanwhile
// starts the old build. /run is gone after a reboot: a rebooted box starts
// current. Once the canary passed its checks, current moves to the new
// release and the drop-in goes (the running process keeps its binary).

// runtimeUnitDir is where systemd reads runtime units and drop-ins.
const runtimeUnitDir = "/run/systemd/system"

// releaseDropIn is the name of the drop-in that runs one instance on a
// release other than current.
const releaseDropIn = "50-release.conf"

// releaseDropInPath is the instance's release drop-in.
func releaseDropInPath(instance string) string {
	return runtimeUnitDir + "/" + instance + ".d/" + releaseDropIn
}

// execStart reads the ExecStart= lines in effect for a unit from
// `systemctl cat` output, as written (arguments and %-specifiers kept,
// continuation lines included): an empty ExecStart= resets the list. The
// file named skip (a release drop-in) is left out.
func execStart(cat, skip string) []string {
	var lines []string
	file, section := "", ""
	cont := false
	for line := range strings.SplitSeq(cat, "\n") {
		if cont {
			lines[len(lines)-1] += "\n" + line
			cont = strings.HasSuffix(line, `\`)
			continue
		}
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "# /"):
			file, section = strings.TrimPrefix(t, "# "), ""
			continue
		case strings.HasPrefix(t, "["):
			section = t
			continue
		case file == skip || section != "[Service]":
			continue
		}
		v, ok := strings.CutPrefix(t, "ExecStart=")
		if !ok {
			continue
		}
		if v = strings.TrimSpace(v); v == "" {
			lines = nil
			continue
		}
		lines = append(lines, v)
		cont = strings.HasSuffix(v, `\`)
	}
	return lines
}

// tryRelease makes the instance's next start run release sha instead of
// current: a runtime drop-in (written atomically) whose ExecStart is the
// unit's own with ROOT/current/relay replaced by ROOT/releases/SHA/relay,
// then daemon-reload.
func (r Releases) tryRelease(ctx context.Context, run Runner, instance, sha string) error {
	root, err := r.root()
	if err != nil {
		return err
	}
	if !unitArg(instance) || !shaRE.MatchString(sha) {
		return fmt.Errorf("run %s on release %q: want relay@PORT.service and a sha256", instance, sha)
	}
	out, err := run.Run(ctx, "systemctl cat -- "+text.ShellQuote(instance), nil)
	if err != nil {
		return fmt.Errorf("read the unit of %s: %w", instance, err)
	}
	p := releaseDropInPath(instance)
	lines := execStart(string(out), p)
	cur, rel := root+"/current/relay", root+"/releases/"+sha+"/relay"
	if len(lines) != 1 || !strings.Contains(lines[0], cur) {
		return fmt.Errorf("run %s on release %s: want one ExecStart= running %s, the unit has %q", instance, text.ShortSHA(sha), cur, lines)
	}
	dropIn := fmt.Sprintf("# relayfleet rollout: this process tries release %s before current moves to it\n[Service]\nExecStart=\nExecStart=%s\n", sha, strings.ReplaceAll(lines[0], cur, rel))
	if _, err := WriteFile(ctx, run, p, []byte(dropIn), 0o644); err != nil {
		return err
	}
	return daemonReload(ctx, run)
}

// clearReleaseDropIns removes every relay instance's release drop-in (a
// rollout's canary, or one a cut-off rollout left) and reloads systemd
// when there was one. It returns the instances that had one.
func clearReleaseDropIns(ctx context.Context, run Runner) ([]string, error) {
	insts, err := releaseDropIns(ctx, run, `rm -f "$f"; rmdir --ignore-fail-on-non-empty "${f%/*}"`)
	if err != nil || len(insts) == 0 {
		return nil, err
	}
	return insts, daemonReload(ctx, run)
}

// releaseDropInReleases maps each instance with a release drop-in to the
// release the drop-in runs: the sha its ExecStart= names under releases/,
// "" when it names none.
func releaseDropInReleases(ctx context.Context, run Runner) (map[string]string, error) {
	out, err := run.Run(ctx, `for f in `+runtimeUnitDir+`/relay@*.service.d/`+releaseDropIn+`; do [ -e "$f" ] || continue; `+
		`printf '%s\t%s\n' "$f" "$(sed -n 's|^ExecStart=.*/releases/\([0-9a-f]\{64\}\)/relay.*|\1|p' "$f" | head -n1)"; done`, nil)
	if err != nil {
		return nil, fmt.Errorf("release drop-ins: %w", err)
	}
	m := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f, sha, _ := strings.Cut(line, "\t")
		if inst, ok := dropInInstance(f); ok {
			m[inst] = sha
		}
	}
	return m, nil
}

// removeReleaseDropIns removes the release drop-ins of the instances
// given, where there is one, and returns the instances that had one. It
// does not reload systemd: the caller does, once.
func removeReleaseDropIns(ctx context.Context, run Runner, instances []string) ([]string, error) {
	var files []string
	for _, inst := range instances {
		if !unitArg(inst) {
			return nil, fmt.Errorf("remove the release drop-in of %q: want relay@PORT.service", inst)
		}
		files = append(files, text.ShellQuote(releaseDropInPath(inst)))
	}
	if len(files) == 0 {
		return nil, nil
	}
	out, err := run.Run(ctx, `for f in `+strings.Join(files, " ")+`; do [ -e "$f" ] || continue; rm -f "$f" && rmdir --ignore-fail-on-non-empty "${f%/*}" || exit 1; echo "$f"; done`, nil)
	if err != nil {
		return nil, fmt.Errorf("remove the release drop-ins of %s: %w", strings.Join(instances, ", "), err)
	}
	return dropInInstances(string(out)), nil
}

// ReleaseDropIns lists the instances whose next start runs a release
// other than current through a release drop-in: a rollout's canary, or
// one left by a rollout cut off before its canary passed.
func ReleaseDropIns(ctx context.Context, run Runner) ([]string, error) {
	return releaseDropIns(ctx, run, ":")
}

// releaseDropIns runs do on each release drop-in ($f) and returns their
// instances.
func releaseDropIns(ctx context.Context, run Runner, do string) ([]string, error) {
	out, err := run.Run(ctx, `for f in `+runtimeUnitDir+`/relay@*.service.d/`+releaseDropIn+`; do [ -e "$f" ] || continue; `+do+`; echo "$f"; done`, nil)
	if err != nil {
		return nil, fmt.Errorf("release drop-ins: %w", err)
	}
	return dropInInstances(string(out)), nil
}

// dropInInstances reads the instances of release drop-in paths, one a
// line.
func dropInInstances(out string) []string {
	var insts []string
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if inst, ok := dropInInstance(line); ok {
			insts = append(insts, inst)
		}
	}
	return insts
}

// dropInInstance is the instance whose release drop-in is at path f.
func dropInInstance(f string) (string, bool) {
	inst, ok := strings.CutPrefix(f, runtimeUnitDir+"/")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(inst, ".d/"+releaseDropIn)
}

func daemonReload(ctx context.Context, run Runner) error {
	if _, err := run.Run(ctx, "systemctl daemon-reload", nil); err != nil {
		return fmt.Errorf("daemon-reload: %w", err)
	}
	return nil
}
