package provision

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/cli"
)

// factsThenFail is a box that tells its cores and RAM, then fails every
// other command.
type factsThenFail struct{}

func (factsThenFail) Run(_ context.Context, cmd string, _ io.Reader) ([]byte, error) {
	if strings.HasPrefix(cmd, "nproc") {
		return []byte("4\n8000000\nmax\n0-3\n"), nil
	}
	return nil, errors.New("ssh: connection lost")
}

// TestRunConvergeFailures: fleet converge over hosts that fail reports
// each (a timestamped line as a host starts, in text) and ends with exit
// 3 and one line naming every failed host.
func TestRunConvergeFailures(t *testing.T) {
	key := testBoxKeys()
	targets := []Target{
		{Host: Host{Name: "a-1"}, Run: factsThenFail{}, Processes: 2, BasePort: 4443, AuthKeys: key},
		{Host: Host{Name: "a-2"}, Run: scriptRunner{err: errors.New("ssh: no route to host")}, AuthKeys: key},
	}
	wantErr := func(t *testing.T, err error) {
		t.Helper()
		var ee *cli.ExitError
		if !errors.As(err, &ee) || ee.Code != ExitHostsFailed || !strings.HasPrefix(ee.Msg, "2 of 2 hosts failed: a-1: ") || !strings.Contains(ee.Msg, "; a-2: read cores and RAM: ssh: no route to host") {
			t.Errorf("err %#v; want exit %d, 2 of 2 hosts failed", err, ExitHostsFailed)
		}
	}
	for _, check := range []bool{false, true} {
		var out bytes.Buffer
		err := RunConverge(context.Background(), &out, targets, Options{Binary: []byte("build"), Check: check}, false)
		wantErr(t, err)
		word := map[bool]string{false: "converging", true: "checking"}[check]
		if !regexp.MustCompile(`(?m)^ +\d+\.\ds a-1: `+word+`$`).MatchString(out.String()) || strings.Contains(out.String(), "a-2: "+word) {
			t.Errorf("check=%v: want a line as a-1 starts %s, none for a-2 (its facts failed):\n%s", check, word, out.String())
		}
	}
	var out bytes.Buffer
	wantErr(t, RunConverge(context.Background(), &out, targets, Options{Binary: []byte("build")}, true))
	events := map[string]int{}
	for line := range strings.SplitSeq(strings.TrimSpace(out.String()), "\n") {
		var e struct{ Event, Host, Step string }
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		events[e.Event]++
	}
	if events["progress"] < 4 || events["result"] != 2 || events["summary"] != 1 {
		t.Errorf("events %v; want progress, a result per host, a summary:\n%s", events, out.String())
	}
}

// TestRunStatusUnreadBoxes: fleet status lists a box it could not read
// as failed and ends with exit 3 and one line; --json is {"boxes": [...]}.
func TestRunStatusUnreadBoxes(t *testing.T) {
	targets := []Target{
		{Host: Host{Name: "a-1"}, Run: scriptRunner{err: errors.New("ssh: no route to host")}},
		{Host: Host{Name: "a-2"}, Run: scriptRunner{err: errors.New("ssh: handshake failed")}},
	}
	for _, asJSON := range []bool{false, true} {
		var out bytes.Buffer
		err := RunStatus(context.Background(), &out, targets, asJSON, 0)
		var ee *cli.ExitError
		if !errors.As(err, &ee) || ee.Code != ExitHostsFailed || ee.Msg != "2 of 2 boxes could not be read" {
			t.Errorf("json=%v: err %#v; want exit %d, 2 of 2 boxes could not be read", asJSON, err, ExitHostsFailed)
		}
		if !asJSON {
			if !strings.Contains(out.String(), "a-1: FAILED") || !strings.Contains(out.String(), "a-2: FAILED") {
				t.Errorf("text:\n%s", out.String())
			}
			continue
		}
		var doc struct{ Boxes []BoxReport }
		if err := json.Unmarshal(out.Bytes(), &doc); err != nil || len(doc.Boxes) != 2 || doc.Boxes[0].Host != "a-1" || !strings.HasPrefix(out.String(), "{\n  \"boxes\": [") {
			t.Errorf("json: %v:\n%s", err, out.String())
		}
	}
}
