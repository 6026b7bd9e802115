package systest

import (
	"os/exec"
	"testing"
)

func TestOutputAndCombined(t *testing.T) {
	const script = "echo out; echo err >&2; exit 3"
	out, errOut, code := Output(t, exec.Command("sh", "-c", script))
	if out != "out\n" || errOut != "err\n" || code != 3 {
		t.Errorf("Output = %q, %q, %d; want \"out\\n\", \"err\\n\", 3", out, errOut, code)
	}
	both, code := Combined(t, exec.Command("sh", "-c", script))
	if both != "out\nerr\n" || code != 3 {
		t.Errorf("Combined = %q, %d; want \"out\\nerr\\n\", 3", both, code)
	}
	if out, _, code := Output(t, exec.Command("true")); out != "" || code != 0 {
		t.Errorf("true: %q, exit %d", out, code)
	}
}

func TestLastLineAndTail(t *testing.T) {
	if got := LastLine("a\nb\nfleet up: failed\n\n"); got != "fleet up: failed" {
		t.Errorf("LastLine = %q", got)
	}
	if got := Tail("1\n2\n3\n4\n", 2); got != "3\n4" {
		t.Errorf("Tail = %q", got)
	}
	if got := Tail("1\n", 5); got != "1" {
		t.Errorf("Tail of one line = %q", got)
	}
}
