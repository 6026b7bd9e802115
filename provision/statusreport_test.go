package provision_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/provision"
)

func TestStatusShowsDropsFirstWhenAny(t *testing.T) {
	proc := func(unit string, drops int64) provision.ProcessStatus {
		return provision.ProcessStatus{Unit: unit, Active: "active", Admitting: true, Listeners: 10, Headroom: 90, Drops: drops}
	}
	boxes := []provision.BoxReport{{Host: "box-1", BoxStatus: provision.BoxStatus{Processes: []provision.ProcessStatus{proc("relay@4443.service", 0), proc("relay@4444.service", 0)}}}}
	var b strings.Builder
	if err := provision.WriteStatusText(&b, boxes); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if !strings.HasPrefix(lines[0], "BOX ") || !strings.HasSuffix(strings.TrimSpace(lines[0]), "DROPS") || strings.Contains(b.String(), "dropped") {
		t.Fatalf("no drops: want DROPS as the last column and no warning, got:\n%s", b.String())
	}

	boxes[0].Processes[1].Drops = 1270000
	b.Reset()
	if err := provision.WriteStatusText(&b, boxes); err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(b.String(), "\n")
	if !strings.HasPrefix(lines[0], "DROPS: 1 relay process dropped") || !strings.HasPrefix(lines[2], "DROPS ") {
		t.Fatalf("drops: want a warning line and DROPS as the first column, got:\n%s", b.String())
	}
	if !strings.HasPrefix(lines[4], "1270000 ") || !strings.Contains(lines[4], "relay@4444.service") {
		t.Fatalf("the dropping process's row does not start with its drops:\n%s", b.String())
	}

	if !strings.Contains(b.String(), "box-1: release (none), 2 processes,") {
		t.Errorf("want the box's line to count 2 processes:\n%s", b.String())
	}
	one := []provision.BoxReport{boxes[0]}
	one[0].Processes = boxes[0].Processes[1:]
	b.Reset()
	if err := provision.WriteStatusText(&b, one); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "box-1: release (none), 1 process,") {
		t.Errorf("want one process, not 1 processes:\n%s", b.String())
	}

	data, err := json.Marshal(boxes[0])
	if err != nil || !strings.Contains(string(data), `"udp_drops":1270000`) {
		t.Fatalf("JSON lacks udp_drops: %s %v", data, err)
	}
}

// TestStatusShowsProcessesLeftBehind: a process running another release
// than the box's current one is marked STALE, and the box's line counts it
// and the draining ones, saying what finishes the job.
func TestStatusShowsProcessesLeftBehind(t *testing.T) {
	cur, old := strings.Repeat("a", 64), strings.Repeat("b", 64)
	boxes := []provision.BoxReport{{Host: "box-1", BoxStatus: provision.BoxStatus{Release: cur, Processes: []provision.ProcessStatus{
		{Unit: "relay@4443.service", Active: "active", Admitting: true, Release: cur},
		{Unit: "relay@4444.service", Active: "active", Draining: true, Release: old, Stale: true},
	}}}}
	var b strings.Builder
	if err := provision.WriteStatusText(&b, boxes); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	if !strings.Contains(lines[0], "RUNS") || !strings.Contains(lines[1], "aaaaaaaaaaaa") || strings.Contains(lines[1], "STALE") || !strings.Contains(lines[2], "bbbbbbbbbbbb STALE") {
		t.Errorf("want a RUNS column with the stale process marked:\n%s", out)
	}
	if !strings.Contains(out, "box-1: release aaaaaaaaaaaa, 2 processes, no sysctl drift; 1 process not on the current release, 1 draining (fleet converge or a re-run of fleet rollout finishes it)") {
		t.Errorf("box line does not report the processes left behind:\n%s", out)
	}
	data, _ := json.Marshal(boxes[0])
	if !strings.Contains(string(data), `"release":"`+old+`","stale":true`) {
		t.Errorf("JSON lacks the process's release and stale: %s", data)
	}
}

// TestStatusShowsTheHeartbeat: probed processes get a HEARTBEAT column,
// one passing too little on is SILENT (a build that forwards nothing
// answers /stats as well as any), and the box's line counts them; JSON
// carries the figures. Unprobed, the column is not there.
func TestStatusShowsTheHeartbeat(t *testing.T) {
	cur := strings.Repeat("a", 64)
	boxes := []provision.BoxReport{{Host: "box-1", BoxStatus: provision.BoxStatus{Release: cur, Processes: []provision.ProcessStatus{
		{Unit: "relay@4443.service", Active: "active", Admitting: true, Release: cur, Heartbeat: &provision.Heartbeat{Groups: 8, Due: 8}},
		{Unit: "relay@4444.service", Active: "active", Admitting: true, Release: cur, Heartbeat: &provision.Heartbeat{Groups: 0, Due: 8}},
		{Unit: "relay@4445.service", Active: "active", Admitting: true, Release: cur, Heartbeat: &provision.Heartbeat{Due: 8, Error: "no certificate hash"}},
	}}}}
	var b strings.Builder
	if err := provision.WriteStatusText(&b, boxes); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	if !strings.Contains(lines[0], "RUNS          HEARTBEAT") || !strings.Contains(lines[1], " 8/8 ") ||
		!strings.Contains(lines[2], " 0/8 SILENT ") || !strings.Contains(lines[3], " unheard ") {
		t.Errorf("want a HEARTBEAT column, the silent process marked:\n%s", out)
	}
	if !strings.Contains(out, "box-1: release aaaaaaaaaaaa, 3 processes, no sysctl drift; 2 processes not passing the fleet heartbeat on") {
		t.Errorf("box line does not count the silent processes:\n%s", out)
	}
	data, _ := json.Marshal(boxes[0])
	if !strings.Contains(string(data), `"heartbeat":{"groups":0,"due":8}`) {
		t.Errorf("JSON lacks the heartbeat: %s", data)
	}
	for i := range boxes[0].Processes {
		boxes[0].Processes[i].Heartbeat = nil
	}
	b.Reset()
	provision.WriteStatusText(&b, boxes)
	if strings.Contains(b.String(), "HEARTBEAT") || strings.Contains(b.String(), "heartbeat") {
		t.Errorf("unprobed, the heartbeat shows:\n%s", b.String())
	}
}

// TestStatusOrigins: fleet status lists the origin boxes in their own
// section after the edges, and names the origin each edge process pulls
// from where its /stats says ("-" where it does not).
func TestStatusOrigins(t *testing.T) {
	proc := func(unit, upstream string) provision.ProcessStatus {
		return provision.ProcessStatus{Unit: unit, Active: "active", Admitting: true, Upstream: upstream}
	}
	pin := strings.Repeat("ab", 32)
	boxes := []provision.BoxReport{
		{Host: "origin-1", Origin: "http://10.0.0.1:4443/#spki=" + pin, BoxStatus: provision.BoxStatus{Processes: []provision.ProcessStatus{proc("relay@4443.service", "")}}},
		{Host: "edge-1", BoxStatus: provision.BoxStatus{Processes: []provision.ProcessStatus{proc("relay@4443.service", "http://10.0.0.1:4443/#spki="+pin), proc("relay@4444.service", "")}}},
		{Host: "origin-2", Origin: "http://10.0.0.2:4443/#spki=" + pin, BoxStatus: provision.BoxStatus{Processes: []provision.ProcessStatus{proc("relay@4443.service", "")}}},
	}
	var b strings.Builder
	if err := provision.WriteStatusText(&b, boxes); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	edges, origins, ok := strings.Cut(out, "ORIGINS")
	if !ok {
		t.Fatalf("no ORIGINS section:\n%s", out)
	}
	lines := strings.Split(edges, "\n")
	if !strings.Contains(lines[0], "UPSTREAM") || strings.Contains(edges, "origin-2") {
		t.Fatalf("edges table: want an UPSTREAM column and no origin box:\n%s", out)
	}
	if f := strings.Fields(lines[1]); f[0] != "edge-1" || !slices.Contains(f, "origin-1") {
		t.Errorf("edge-1's first process: want it to pull from origin-1:\n%s", out)
	}
	if f := strings.Fields(lines[2]); f[0] != "edge-1" || !slices.Contains(f, "-") {
		t.Errorf("edge-1's second process says no upstream: want -:\n%s", out)
	}
	if !strings.Contains(origins, "origin-1") || !strings.Contains(origins, "origin-2") || strings.Contains(strings.SplitN(origins, "\n\n", 2)[0], "edge-1") {
		t.Errorf("origins section: want origin-1 and origin-2 only:\n%s", out)
	}
}

// TestStatusUpstreamFromStats: a process's upstream is the one of its
// /stats "upstreams" that most of its pulled tracks come from, without a
// query (where a token could ride); none when it pulls nothing.
func TestStatusUpstreamFromStats(t *testing.T) {
	for _, tc := range []struct{ stats, want string }{
		{`{"sessions":1}`, ""},
		{`{"upstreams":[{"url":"http://10.0.0.1:4443/?token=secret#spki=ab","connected":true,"tracks":2},{"url":"http://10.0.0.2:4443/","connected":true,"tracks":0}]}`, "http://10.0.0.1:4443/#spki=ab"},
		{`{"upstreams":[{"url":"http://10.0.0.1:4443/","connected":false,"tracks":0},{"url":"http://10.0.0.2:4443/","connected":true,"tracks":1}]}`, "http://10.0.0.2:4443/"},
		{`{"upstreams":[{"url":"http://10.0.0.1:4443/","connected":true,"tracks":0}]}`, ""},
		{`{"upstreams":null}`, ""},
	} {
		if got := provision.StatsUpstream([]byte(tc.stats)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.stats, got, tc.want)
		}
	}
}

// TestStatusRegions: with regions, fleet status has a REGION column, and
// the origins of a region that pull from the publishers' region's origins
// say which one.
func TestStatusRegions(t *testing.T) {
	proc := func(upstream string) provision.ProcessStatus {
		return provision.ProcessStatus{Unit: "relay@4443.service", Active: "active", Admitting: true, Upstream: upstream}
	}
	pin := strings.Repeat("ab", 32)
	a1, b1 := "http://10.0.0.1:4443/#spki="+pin, "http://10.0.1.1:4443/#spki="+pin
	boxes := []provision.BoxReport{
		{Host: "origin-1", Region: "eu", Origin: a1, BoxStatus: provision.BoxStatus{Processes: []provision.ProcessStatus{proc("")}}},
		{Host: "origin-us-1", Region: "us", Origin: b1, BoxStatus: provision.BoxStatus{Processes: []provision.ProcessStatus{proc(a1)}}},
		{Host: "us-edge-1", Region: "us", BoxStatus: provision.BoxStatus{Processes: []provision.ProcessStatus{proc(b1)}}},
	}
	var b strings.Builder
	if err := provision.WriteStatusText(&b, boxes); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	edges, origins, _ := strings.Cut(out, "ORIGINS")
	el := strings.Split(edges, "\n")
	if f := strings.Fields(el[0]); f[0] != "REGION" {
		t.Fatalf("want a REGION column first:\n%s", out)
	}
	if f := strings.Fields(el[1]); f[0] != "us" || f[1] != "us-edge-1" || !slices.Contains(f, "origin-us-1") {
		t.Errorf("us-edge-1: want region us, pulling from origin-us-1:\n%s", out)
	}
	ol := strings.Split(origins, "\n")
	if f := strings.Fields(ol[3]); !strings.Contains(ol[1], "UPSTREAM") || f[0] != "us" || f[1] != "origin-us-1" || f[len(f)-2] != "origin-1" {
		t.Errorf("origins: want origin-us-1 pulling from origin-1:\n%s", out)
	}
}
