package provision

import (
	"github.com/relayfleet/relayfleet/internal/text"

	"context"
	"fmt"
	"strings"

	"github.com/relayfleet/relayfleet/sysctl"
)

// ReadSysctl reads the profile's keys from the box's /proc/sys. A key
// the kernel lacks is absent from the map.
func ReadSysctl(ctx context.Context, run Runner, p sysctl.Profile) (map[string]string, error) {
	var b strings.Builder
	for _, s := range p.Settings {
		// One line per key: KEY<TAB>VALUE, or KEY alone when unreadable.
		fmt.Fprintf(&b, "printf '%%s\\t%%s\\n' %s \"$(cat %s 2>/dev/null | tr '\\t\\n' '  ')\"\n", text.ShellQuote(s.Key), text.ShellQuote(sysctl.ProcPath(s.Key)))
	}
	out, err := run.Run(ctx, b.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("read sysctl: %w", err)
	}
	vals := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimRight(string(out), "\n"), "\n") {
		k, v, _ := strings.Cut(line, "\t")
		if v = strings.Join(strings.Fields(v), " "); v != "" {
			vals[k] = v
		}
	}
	return vals, nil
}

// ApplySysctl converges the profile on a box: it writes the profile's
// file, asks the kernel to load it, and reads every key
// back. sysctl's exit status is not trusted (it fails on read-only keys
// and succeeds on some it did not set); the read-back decides each key:
// already, applied or not applied (read-only here, as in a container).
//
// The file holds the larger of each floor and the box's current value
// (sysctl.Profile.Raised), so loading it never lowers a key an operator
// set higher, neither now nor at boot.
func ApplySysctl(ctx context.Context, run Runner, p sysctl.Profile) ([]sysctl.Result, error) {
	before, err := ReadSysctl(ctx, run, p)
	if err != nil {
		return nil, err
	}
	data, err := p.Raised(before).Render()
	if err != nil {
		return nil, err
	}
	if _, err := WriteFile(ctx, run, p.File, data, 0o644); err != nil {
		return nil, err
	}
	if !allSatisfied(p, before) {
		// Output and status are ignored on purpose: the read-back is the truth.
		if _, err := run.Run(ctx, fmt.Sprintf("sysctl -q -p %s >/dev/null 2>&1 || true", text.ShellQuote(p.File)), nil); err != nil {
			return nil, fmt.Errorf("apply %s: %w", p.File, err)
		}
	}
	after, err := ReadSysctl(ctx, run, p)
	if err != nil {
		return nil, err
	}
	results := p.Compare(before, after)
	if err := recordRefused(ctx, run, results); err != nil {
		return results, err
	}
	return results, nil
}

// RefusedFile remembers, until the box reboots, the keys its kernel
// refused, so that a converged container is not reported as drifting.
const RefusedFile = "/run/relayfleet/sysctl-refused"

func recordRefused(ctx context.Context, run Runner, results []sysctl.Result) error {
	var b strings.Builder
	for _, r := range results {
		if r.Status == sysctl.NotApplied {
			fmt.Fprintf(&b, "%s %s\n", r.Key, r.Want)
		}
	}
	if b.Len() == 0 {
		_, err := run.Run(ctx, "rm -f "+text.ShellQuote(RefusedFile), nil)
		return err
	}
	_, err := WriteFile(ctx, run, RefusedFile, []byte(b.String()), 0o644)
	return err
}

// ReadRefused reads the keys the box's kernel refused since boot.
func ReadRefused(ctx context.Context, run Runner) (map[string]string, error) {
	out, err := run.Run(ctx, "cat "+text.ShellQuote(RefusedFile)+" 2>/dev/null || true", nil)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", RefusedFile, err)
	}
	m := map[string]string{}
	for line := range strings.SplitSeq(string(out), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			m[k] = v
		}
	}
	return m, nil
}

func allSatisfied(p sysctl.Profile, vals map[string]string) bool {
	for _, s := range p.Settings {
		if !s.Satisfied(vals[s.Key]) {
			return false
		}
	}
	return true
}
