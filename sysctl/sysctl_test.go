package sysctl

import (
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/relayfleet/relayfleet/relay/testutil"
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
