package loadtest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Target is what fleet loadtest --target names: a box, and one relay
// process of it when Port is set.
type Target struct {
	Box  string
	Port int
}

// MatchTarget finds s among the boxes' names: BOX (a lab box name or a
// static host's address as the inventory writes it) or BOX:PORT. An
// exact name wins, so a static address with an SSH port is a box. It
// returns the box's index in names.
func MatchTarget(names []string, s string) (int, Target, error) {
	if i := slices.Index(names, s); i >= 0 {
		return i, Target{Box: s}, nil
	}
	if j := strings.LastIndex(s, ":"); j > 0 {
		box, p := s[:j], s[j+1:]
		if i := slices.Index(names, box); i >= 0 {
			port, err := strconv.Atoi(p)
			if err != nil || port < 1 || port > 65535 {
				return -1, Target{}, fmt.Errorf("%q: want BOX or BOX:PORT with a port from 1 to 65535", s)
			}
			return i, Target{Box: box, Port: port}, nil
		}
	}
	return -1, Target{}, fmt.Errorf("no box %q among the steady stack's hosts (fleet hosts lists them; boxes: %s)", s, strings.Join(names, ", "))
}

// MaxStepListeners bounds a step: listeners one machine opens against one
// box.
const MaxStepListeners = 1_000_000

// ParseSteps reads a comma-separated list of steps: at least MinFitSteps
// distinct positive listener counts, returned in order.
func ParseSteps(s string) ([]int, error) {
	var steps []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive listener count (want e.g. 100,200,400,600)", f)
		}
		if n > MaxStepListeners {
			return nil, fmt.Errorf("%d is out of range: want listener counts from 1 to %d", n, MaxStepListeners)
		}
		if slices.Contains(steps, n) {
			return nil, fmt.Errorf("%d is given twice", n)
		}
		steps = append(steps, n)
	}
	if len(steps) < MinFitSteps {
		return nil, fmt.Errorf("want at least %d listener counts to fit a curve, got %d", MinFitSteps, len(steps))
	}
	slices.Sort(steps)
	return steps, nil
}

// DefaultSteps sizes the steps to the machine that runs the load
// generator, with cpus cores: two cores drive about 600 listeners beside
// a lab box.
func DefaultSteps(cpus int) string {
	m := max(1, cpus/2)
	var s []string
	for _, n := range []int{100, 200, 400, 600} {
		s = append(s, strconv.Itoa(n*m))
	}
	return strings.Join(s, ",")
}
