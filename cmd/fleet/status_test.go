package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/provision"
)

func TestStatusShowsDropsFirstWhenAny(t *testing.T) {
	proc := func(unit string, drops int64) provision.ProcessStatus {
		return provision.ProcessStatus{Unit: unit, Active: "active", Admitting: true, Listeners: 10, Headroom: 90, Drops: drops}
	}
	boxes := []boxJSON{{Host: "box-1", BoxStatus: provision.BoxStatus{Processes: []provision.ProcessStatus{proc("relay@4443.service", 0), proc("relay@4444.service", 0)}}}}
	var b strings.Builder
	if err := writeStatusText(&b, boxes); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if !strings.HasPrefix(lines[0], "BOX ") || !strings.HasSuffix(strings.TrimSpace(lines[0]), "DROPS") || strings.Contains(b.String(), "dropped") {
		t.Fatalf("no drops: want DROPS as the last column and no warning, got:\n%s", b.String())
	}

	boxes[0].Processes[1].Drops = 1270000
	b.Reset()
	if err := writeStatusText(&b, boxes); err != nil {
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
	one := []boxJSON{boxes[0]}
	one[0].Processes = boxes[0].Processes[1:]
	b.Reset()
	if err := writeStatusText(&b, one); err != nil {
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
