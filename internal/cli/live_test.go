package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestLiveLinesRewriteInPlace(t *testing.T) {
	var b bytes.Buffer
	l := NewLiveLines(&b, []string{"box1", "box2"})
	l.Set("box2", "converge")
	out := b.String()
	// Two lines drawn, then the cursor goes up two lines and both are
	// drawn again, box2 with its new step.
	if strings.Count(out, "\n") != 4 || !strings.Contains(out, "\033[2A") {
		t.Errorf("output %q", out)
	}
	last := out[strings.Index(out, "\033[2A"):]
	if !strings.Contains(last, "box1") || !strings.Contains(last, "waiting") || !strings.Contains(last, "converge") {
		t.Errorf("redraw %q", last)
	}
	if IsTerminal(&b) {
		t.Error("a buffer is not a terminal")
	}
}
