package events

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
)

func TestWriteOutcomes(t *testing.T) {
	var b bytes.Buffer
	now := time.Date(2026, 12, 5, 19, 0, 0, 0, time.UTC)
	if err := WriteOutcomes(&b, now, []Outcome{{Event: "gala", Phase: Up, Boxes: 3, Next: "drain at 22:00"}, {Event: "cup", Phase: Scheduled, Error: "boom"}}); err != nil {
		t.Fatal(err)
	}
	want := "\nreconciled at 2026-12-05T19:00:00Z:\n" +
		"EVENT  PHASE      BOXES  NEXT\n" +
		"gala   up         3      drain at 22:00\n" +
		"cup    scheduled  0      FAILED: boom\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}

func TestWriteRecords(t *testing.T) {
	var b bytes.Buffer
	if err := WriteRecords(&b, nil, "/state"); err != nil {
		t.Fatal(err)
	}
	if want := "no events reconciled yet in /state\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
	b.Reset()
	at := time.Date(2026, 12, 5, 19, 0, 0, 0, time.UTC)
	hosts := []program.HostEntry{{Name: "g-1"}, {Name: "g-2"}, {Name: "g-3"}}
	recs := []*Record{
		{Event: "gala", Phase: Up, End: at.Add(2 * time.Hour), Plan: &Sizing{Boxes: 5}, Created: 4, Converged: 3, Hosts: hosts,
			Route:   &program.StackHosts{Hosts: hosts, DrainingHosts: []string{"g-3"}},
			Samples: []Sample{{At: at, Listeners: 42}}, Log: []Entry{{At: at, Action: "up", Detail: "3 boxes"}}},
		{Event: "cup", Phase: Gone, Plan: &Sizing{Boxes: 2}, Created: 2, Converged: 2},
	}
	if err := WriteRecords(&b, recs, "/state"); err != nil {
		t.Fatal(err)
	}
	want := "EVENT  PHASE  MANUAL  WANTED  MADE  CONVERGED  ROUTED  LISTENERS  ORPHANS  NEXT                           LAST ACTION\n" +
		"gala   up     -       5       4     3          2       42         0        drain at 2026-12-05T21:00:00Z  2026-12-05T19:00:00Z up: 3 boxes\n" +
		"cup    gone   -       -       0     0          0       -          0        -                              \n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestSignedBytes(t *testing.T) {
	if got := signedBytes(-1000); !strings.HasPrefix(got, "-") {
		t.Errorf("signedBytes(-1000) = %q", got)
	}
	if got := signedBytes(1000); !strings.HasPrefix(got, "+") {
		t.Errorf("signedBytes(1000) = %q", got)
	}
}
