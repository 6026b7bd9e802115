package provision_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/provision"
)

// TestWriteConvergeReport: one changed host and one failed one, as text
// (per-host lines, table, summary) and as JSON lines.
func TestWriteConvergeReport(t *testing.T) {
	rs := []provision.HostResult{
		{Host: "box-1", Facts: provision.Facts{Cores: 2, RAM: 4 << 30}, Elapsed: 1500 * time.Millisecond,
			Report: &provision.Report{Changes: []provision.Change{{Kind: provision.ChangeRemove, What: "/etc/x"}}, Restarted: []string{"relay@4443"}, Release: strings.Repeat("a", 64)}},
		{Host: "box-2", Elapsed: time.Second, Err: errors.New("dial: refused\nagain")},
	}
	var b strings.Builder
	provision.WriteConvergeText(&b, rs, false)
	want := `
== box-1 (2 cores, 4 GiB): 1 change applied in 1.5s
   remove /etc/x

== box-2: FAILED after 1.0s: dial: refused; again

HOST   RESULT   CHANGES  RESTARTED  RELEASE       SECONDS
box-1  changed  1        1          aaaaaaaaaaaa  1.5
box-2  FAILED   0        0                        1.0

summary: 2 hosts: 1 changed, 0 unchanged, 1 failed
`
	if b.String() != want {
		t.Errorf("text:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	if err := provision.WriteConvergeJSON(json.NewEncoder(&b), rs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"changes":["remove /etc/x"]`) || !strings.Contains(lines[1], `"error":"dial: refused; again"`) ||
		lines[2] != `{"changed":1,"event":"summary","failed":1,"hosts":2,"unchanged":0}` {
		t.Errorf("JSON lines:\n%s", b.String())
	}
}
