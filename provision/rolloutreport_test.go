package provision_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/provision"
)

func TestWriteBalance(t *testing.T) {
	var b bytes.Buffer
	provision.WriteBalance(&b, []provision.ProcLoad{{Box: "a", Unit: "relay@4443.service", Sessions: 230}, {Box: "b", Unit: "relay@4443.service", Sessions: 10}},
		[]provision.ProcLoad{{Box: "a", Unit: "relay@4443.service", Sessions: 121}, {Box: "b", Unit: "relay@4443.service", Sessions: 119}}, provision.DefaultRebalanceTolerance)
	var rows []string
	for line := range strings.SplitSeq(strings.TrimSpace(b.String()), "\n") {
		rows = append(rows, strings.Join(strings.Fields(line), " "))
	}
	want := []string{"box process sessions before after", "a relay@4443.service 230 121", "b relay@4443.service 10 119", "mean 120.0 120.0"}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Errorf("table:\n%s\nwant rows\n%s", b.String(), strings.Join(want, "\n"))
	}
}

func TestBoxRolloutSummary(t *testing.T) {
	a, c := strings.Repeat("a", 64), strings.Repeat("c", 64)
	for _, tc := range []struct {
		o    provision.BoxRollout
		want string
	}{
		{provision.BoxRollout{Host: "b1", Skipped: true}, "b1: skipped, the rollout stopped after a failure"},
		{provision.BoxRollout{Host: "b1", Err: errors.New("x\ny")}, "b1: FAILED: x; y"},
		{provision.BoxRollout{Host: "b1", Result: &provision.RolloutResult{From: a, To: a}}, "b1: already on aaaaaaaaaaaa, every process runs it"},
		{provision.BoxRollout{Host: "b1", Result: &provision.RolloutResult{From: a, To: c, Restarted: []string{"u"}}}, "b1: aaaaaaaaaaaa -> cccccccccccc, 1 process restarted one at a time"},
	} {
		if got := tc.o.Summary(); got != tc.want {
			t.Errorf("Summary() = %q, want %q", got, tc.want)
		}
	}
}

// TestRouterURLs: --router takes http:// and https:// URLs, one a time,
// and refuses anything else in one line.
func TestRouterURLs(t *testing.T) {
	var l provision.RouterURLs
	for _, s := range []string{"http://10.0.0.1:8080", "https://router.example/"} {
		if err := l.Set(s); err != nil {
			t.Errorf("Set(%q): %v", s, err)
		}
	}
	for _, s := range []string{"localhost:8080", "ftp://x/", "http://", "http://a b/"} {
		if err := l.Set(s); err == nil || err.Error() != `want an http:// or https:// URL, got "`+s+`"` {
			t.Errorf("Set(%q): %v", s, err)
		}
	}
	if l.String() != "http://10.0.0.1:8080,https://router.example/" {
		t.Errorf("String() = %q", l.String())
	}
}
