package provision

import (
	"github.com/relayfleet/relayfleet/internal/text"

	"context"
	"fmt"
	"slices"
	"strings"
)

// Who may undrain a relay process.
//
// A process is drained for one of two reasons. A rollout (and converge's
// own make-before-break restart, restartMoved) drains it for a moment:
// drain, move the listeners out, restart, admit again. Everyone else
// drains it to keep it draining: Box.Delete before the box goes, a burst
// drain or resize emptying an event's boxes, an operator's POST /drain.
//
// The rule: converge undrains a process only when a rollout's drain mark
// says a rollout drained it and did not finish (cut off), which converge
// then finishes. Each rollout drain writes the mark before it drains and
// takes it off once the process runs the new release and admits; a
// process draining without a mark was drained on purpose and stays
// draining: converge leaves it so, and drains it again after any restart
// it makes (a restart starts a fresh, admitting process).

// drainMarkDir is the directory, under the release root, of the marks.
const drainMarkDir = "rollout-drains"

func (r Releases) markPath(instance string) (string, error) {
	root, err := r.root()
	if err != nil {
		return "", err
	}
	if !unitArg(instance) {
		return "", fmt.Errorf("instance %q: want relay@PORT.service", instance)
	}
	return root + "/" + drainMarkDir + "/" + instance, nil
}

// unitArg reports whether s is a relay instance name, relay@PORT.service.
func unitArg(s string) bool {
	port, ok := strings.CutPrefix(s, "relay@")
	if !ok {
		return false
	}
	port, ok = strings.CutSuffix(port, ".service")
	return ok && port != "" && strings.Trim(port, "0123456789") == ""
}

// MarkRolloutDrain records on the box that a rollout is about to drain
// the instance (before it does: a cut-off leaves the mark).
func (r Releases) MarkRolloutDrain(ctx context.Context, run Runner, instance string) error {
	p, err := r.markPath(instance)
	if err != nil {
		return err
	}
	if _, err := run.Run(ctx, fmt.Sprintf("mkdir -p %s && : > %s", text.ShellQuote(p[:strings.LastIndexByte(p, '/')]), text.ShellQuote(p)), nil); err != nil {
		return fmt.Errorf("mark %s drained by the rollout: %w", instance, err)
	}
	return nil
}

// ClearRolloutDrain takes the instance's rollout drain mark off.
func (r Releases) ClearRolloutDrain(ctx context.Context, run Runner, instance string) error {
	p, err := r.markPath(instance)
	if err != nil {
		return err
	}
	if _, err := run.Run(ctx, "rm -f "+text.ShellQuote(p), nil); err != nil {
		return fmt.Errorf("clear the rollout drain mark of %s: %w", instance, err)
	}
	return nil
}

// RolloutDrained lists the instances a rollout marked and did not finish.
func (r Releases) RolloutDrained(ctx context.Context, run Runner) ([]string, error) {
	root, err := r.root()
	if err != nil {
		return nil, err
	}
	out, err := run.Run(ctx, fmt.Sprintf("ls -1 %s 2>/dev/null || true", text.ShellQuote(root+"/"+drainMarkDir)), nil)
	if err != nil {
		return nil, fmt.Errorf("read rollout drain marks: %w", err)
	}
	var insts []string
	for line := range strings.SplitSeq(string(out), "\n") {
		if unitArg(line) {
			insts = append(insts, line)
		}
	}
	slices.Sort(insts)
	return insts, nil
}
