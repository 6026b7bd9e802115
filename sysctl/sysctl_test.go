package sysctl

import (
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

func TestRenderGolden(t *testing.T) {
	got, err := Relay().Render()
	if err != nil {
		t.Fatal(err)
	}
	testutil.Golden(t, filepath.Join("testdata", "60-relay.conf"), got)
	// What is rendered parses back to the profile.
	parsed, err := Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range Relay().Settings {
		if parsed[s.Key] != s.Value {
			t.Errorf("%s parsed back as %q, want %q", s.Key, parsed[s.Key], s.Value)
		}
	}
}

func TestRelayBuffersAtLeastQuicGoWants(t *testing.T) {
	want := map[string]bool{"net.core.rmem_default": true, "net.core.wmem_default": true, "net.core.rmem_max": true, "net.core.wmem_max": true}
	for _, s := range Relay().Settings {
		if want[s.Key] {
			if s.Value != "16777216" {
				t.Errorf("%s = %s, want 16 MiB", s.Key, s.Value)
			}
			delete(want, s.Key)
		}
	}
	if len(want) > 0 {
		t.Errorf("profile lacks %v", want)
	}
}

func TestRenderRejectsNewlines(t *testing.T) {
	p := Profile{Settings: []Setting{{Key: "net.core.rmem_max", Value: "1\nkernel.panic = 1", Reason: "x"}}}
	if _, err := p.Render(); err == nil {
		t.Error("a value with a newline was rendered")
	}
	p = Profile{Settings: []Setting{{Key: "../etc/passwd", Value: "1", Reason: "x"}}}
	if _, err := p.Render(); err == nil {
		t.Error("a bad key was rendered")
	}
}

func TestParse(t *testing.T) {
	m, err := Parse([]byte("# c\n; c\nnet.core.rmem_max=1\n -net.core.wmem_max = 2 \nnet.ipv4.tcp_rmem = 4096\t87380   6291456\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m["net.core.rmem_max"] != "1" || m["net.core.wmem_max"] != "2" || m["net.ipv4.tcp_rmem"] != "4096 87380 6291456" {
		t.Errorf("parsed %v", m)
	}
	if _, err := Parse([]byte("garbage\n")); err == nil {
		t.Error("a line without = parsed")
	}
}

func TestReadAndCompare(t *testing.T) {
	p := Profile{Settings: []Setting{
		{"net.core.rmem_max", "16777216", "", true},
		{"net.core.rmem_default", "16777216", "", true},
		{"net.core.wmem_max", "16777216", "", true},
		{"net.core.netdev_max_backlog", "16384", "", true},
		{"net.core.wmem_default", "16777216", "", true},
		{"vm.swappiness", "10", "", false},
	}}
	before := fstest.MapFS{
		"proc/sys/net/core/rmem_max":     {Data: []byte("212992\n")},
		"proc/sys/net/core/rmem_default": {Data: []byte("16777216\n")},
		"proc/sys/net/core/wmem_max":     {Data: []byte("212992\n")},
		"proc/sys/net/core/wmem_default": {Data: []byte("33554432\n")}, // an operator's larger value
		"proc/sys/vm/swappiness":         {Data: []byte("60\n")},
	}
	after := fstest.MapFS{
		"proc/sys/net/core/rmem_max":     {Data: []byte("16777216\n")},
		"proc/sys/net/core/rmem_default": {Data: []byte("16777216\n")},
		"proc/sys/net/core/wmem_max":     {Data: []byte("212992\n")}, // read-only here
		"proc/sys/net/core/wmem_default": {Data: []byte("33554432\n")},
		"proc/sys/vm/swappiness":         {Data: []byte("30\n")}, // exact values must match
	}
	b, errs := p.Read(before)
	if len(errs) != 1 {
		t.Errorf("read errors = %v, want one for the missing netdev_max_backlog", errs)
	}
	a, _ := p.Read(after)
	got := map[string]Status{}
	for _, r := range p.Compare(b, a) {
		got[r.Key] = r.Status
	}
	want := map[string]Status{
		"net.core.rmem_max":           Applied,
		"net.core.rmem_default":       Already,
		"net.core.wmem_max":           NotApplied,
		"net.core.netdev_max_backlog": NotApplied,
		"net.core.wmem_default":       Already, // a floor: larger is fine
		"vm.swappiness":               NotApplied,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q", k, got[k], w)
		}
	}
}

// TestRaisedKeepsTheOperatorsLargerValues: the file written holds the
// larger of the floor and what the box has, so loading it never lowers a
// key; a value below the floor, a missing or unreadable one gets the floor.
func TestRaisedKeepsTheOperatorsLargerValues(t *testing.T) {
	p := Profile{Name: "t", File: "/etc/sysctl.d/t.conf", Settings: []Setting{
		{Key: "net.core.rmem_max", Value: "16777216", Reason: "r", AtLeast: true},
		{Key: "net.core.wmem_max", Value: "16777216", Reason: "r", AtLeast: true},
		{Key: "net.core.netdev_max_backlog", Value: "16384", Reason: "r", AtLeast: true},
		{Key: "net.core.somaxconn", Value: "4096", Reason: "r", AtLeast: true},
		{Key: "net.ipv4.ip_forward", Value: "0", Reason: "exact, not a floor"},
	}}
	current := map[string]string{
		"net.core.rmem_max":           "67108864", // the operator's: kept
		"net.core.wmem_max":           "212992",   // below the floor: raised
		"net.core.netdev_max_backlog": "not a number",
		"net.ipv4.ip_forward":         "1",
	}
	r := p.Raised(current)
	want := map[string]string{
		"net.core.rmem_max":           "67108864",
		"net.core.wmem_max":           "16777216",
		"net.core.netdev_max_backlog": "16384",
		"net.core.somaxconn":          "4096",
		"net.ipv4.ip_forward":         "0",
	}
	data, err := r.Render()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("file sets %s = %q, want %q", k, got[k], v)
		}
	}
	// Every floor is still met.
	for _, s := range p.Settings {
		if s.AtLeast && !s.Satisfied(got[s.Key]) {
			t.Errorf("%s = %s is below its floor %s", s.Key, got[s.Key], s.Value)
		}
	}
	if p.Settings[0].Value != "16777216" {
		t.Error("Raised changed the profile it was called on")
	}
}
