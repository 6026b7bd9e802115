package provision

import (
	"github.com/relayfleet/relayfleet/internal/text"

	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/relayfleet/relayfleet/relay/wire"
)

// Running reads what each relay instance's process actually runs: the
// executable of the unit's MainPID (/proc/PID/exe, which the kernel
// resolved through the current symlink when the process started). It
// maps each instance to the release (its SHA-256) when the executable is
// ROOT/releases/SHA/relay, deleted since or not; to the executable's path
// when it is something else; and to "" when no process runs. Comparing it
// with the current release finds the processes a cut-off rollout left on
// the old build.
func (r Releases) Running(ctx context.Context, run Runner, instances []string) (map[string]string, error) {
	root, err := r.root()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	if len(instances) == 0 {
		return m, nil
	}
	var b strings.Builder
	for _, inst := range instances {
		fmt.Fprintf(&b, "pid=$(systemctl show -p MainPID --value %[1]s 2>/dev/null); exe=; if [ \"${pid:-0}\" -gt 0 ] 2>/dev/null; then exe=$(readlink /proc/$pid/exe 2>/dev/null); fi; printf '%%s\\t%%s\\n' %[1]s \"$exe\"\n", text.ShellQuote(inst))
	}
	out, err := run.Run(ctx, b.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("read running releases: %w", err)
	}
	for line := range strings.SplitSeq(strings.TrimRight(string(out), "\n"), "\n") {
		inst, exe, ok := strings.Cut(line, "\t")
		if !ok {
			continue
		}
		m[inst] = releaseOf(root, exe)
	}
	return m, nil
}

// releaseOf is the release an executable path belongs to (see Running).
func releaseOf(root, exe string) string {
	exe = strings.TrimSuffix(strings.TrimSpace(exe), " (deleted)")
	if rest, ok := strings.CutPrefix(exe, root+"/releases/"); ok {
		if sha, ok := strings.CutSuffix(rest, "/relay"); ok && shaRE.MatchString(sha) {
			return sha
		}
	}
	return exe
}

// DrainingInstances lists the instances whose relay says it is draining
// (its /stats, asked from the box, all in one command). An instance that
// does not answer is not listed.
func DrainingInstances(ctx context.Context, run Runner, instances []string) ([]string, error) {
	if len(instances) == 0 {
		return nil, nil
	}
	const mark = "== relayfleet-stats "
	var b strings.Builder
	for _, inst := range instances {
		fmt.Fprintf(&b, "echo %s; (%s) 2>/dev/null || true; echo\n", text.ShellQuote(mark+inst), onBox(inst, "GET", "/stats", `sed '1,/^\r$/d'`))
	}
	out, err := run.Run(ctx, b.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("read draining instances: %w", err)
	}
	var draining []string
	for _, part := range strings.Split(string(out), mark)[1:] {
		inst, body, _ := strings.Cut(part, "\n")
		if doc, err := wire.ParseStats([]byte(body)); err == nil && doc.Draining && slices.Contains(instances, inst) {
			draining = append(draining, inst)
		}
	}
	return draining, nil
}
