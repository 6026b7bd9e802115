package main

import (
	"strings"
	"testing"
	"time"
)

func TestRelayKeyFromCgroup(t *testing.T) {
	hybrid := "12:pids:/relayfleet/rfdemo0/steady-1/system.slice/system-relay.slice/relay@4444.service\n0::/relayfleet/rfdemo0/steady-1/system.slice/system-relay.slice/relay@4444.service\n"
	if got := relayKey(hybrid); got != "steady-1:4444" {
		t.Errorf("relayKey = %q", got)
	}
	for _, other := range []string{
		"0::/user.slice/session-1.scope\n",                               // the origin relay on the host
		"0::/relayfleet/rfevt0/show82-1/system.slice/relay@4443.service", // another lab
		"0::/relayfleet/rfdemo0/steady-1/system.slice/sshd.service",      // not a relay unit
	} {
		if got := relayKey(other); got != "" {
			t.Errorf("relayKey(%q) = %q, want none", other, got)
		}
	}
}

func TestHostPortAndArgs(t *testing.T) {
	if h, p := hostPort("http://10.231.87.11:4444/"); h != "10.231.87.11" || p != "4444" {
		t.Errorf("hostPort = %q %q", h, p)
	}
	if h, p := hostPort("http://[fd00::1]:4443/"); h != "fd00::1" || p != "4443" {
		t.Errorf("hostPort v6 = %q %q", h, p)
	}
	got := strings.Join(shortArgs([]string{"up", "--inventory", "x.yaml", "--state-dir", "/s", "--pulumi", "/p", "--lab-subnet", "10.0.0.0/24"}), " ")
	if got != "up --inventory x.yaml" {
		t.Errorf("shortArgs = %q", got)
	}
}

func TestSampleLine(t *testing.T) {
	s := sample{At: 12 * time.Second, Procs: map[string]procSample{
		"steady-2:4443": {Listeners: 5}, "steady-1:4443": {Listeners: 7, Draining: true},
	}}
	if s.total() != 12 {
		t.Errorf("total %d", s.total())
	}
	if got := s.line(); got != "t+ 12s listeners 12: steady-1:4443 7 (draining), steady-2:4443 5" {
		t.Errorf("line %q", got)
	}
}
