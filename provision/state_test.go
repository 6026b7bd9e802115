package provision

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/units"
)

func layout(procs int) units.Layout {
	return units.Layout{Cores: 2, RAM: 4 << 30, Processes: procs, BasePort: 4443, Binary: "/opt/relayfleet/current/relay"}
}

func clone(s HostState) HostState {
	return HostState{Files: maps.Clone(s.Files), Instances: slices.Clone(s.Instances), Sysctl: maps.Clone(s.Sysctl), Release: s.Release, ResetSecret: s.ResetSecret}
}

func kinds(cs []Change) string {
	var b []string
	for _, c := range cs {
		b = append(b, c.Kind+" "+c.What)
	}
	return strings.Join(b, "\n")
}

// withDropIns is s with a release drop-in of release bbbb on each
// instance given.
func withDropIns(s HostState, insts ...string) HostState {
	s = clone(s)
	s.ReleaseDropIns = map[string]string{}
	for _, u := range insts {
		s.ReleaseDropIns[u] = "bbbb"
	}
	return s
}

func TestDiff(t *testing.T) {
	two, err := Desired(layout(2), "aaaa")
	if err != nil {
		t.Fatal(err)
	}
	three, _ := Desired(layout(3), "aaaa")
	newRelease, _ := Desired(layout(2), "bbbb")
	fewerCores := layout(2)
	fewerCores.RAM = 8 << 30 // MemoryMax changes in the template
	bigger, _ := Desired(fewerCores, "aaaa")

	converged := clone(two.State)
	fresh := HostState{}

	for _, tc := range []struct {
		name            string
		desired, actual HostState
		want            []string
	}{
		{"converged", two.State, converged, nil},
		{"fresh box", two.State, fresh, []string{
			"file /etc/sysctl.d/60-relay.conf",
			"file /etc/systemd/system/relay.target",
			"file /etc/systemd/system/relay@.service",
			"file /etc/systemd/system/relay@4443.service.d/10-relayfleet.conf",
			"file /etc/systemd/system/relay@4444.service.d/10-relayfleet.conf",
			"secret /etc/relayfleet/credentials/reset-secret",
			"sysctl net.core.netdev_max_backlog", "sysctl net.core.rmem_default",
			"sysctl net.core.rmem_max", "sysctl net.core.wmem_default", "sysctl net.core.wmem_max",
			"release relay",
			"start relay@4443.service", "start relay@4444.service",
		}},
		{"one more process", three.State, converged, []string{
			"file /etc/systemd/system/relay.target",
			"file /etc/systemd/system/relay@.service", // MemoryMax shrinks: every instance restarts
			"file /etc/systemd/system/relay@4445.service.d/10-relayfleet.conf",
			"restart relay@4443.service", "restart relay@4444.service", "start relay@4445.service",
		}},
		{"one fewer process", two.State, clone(three.State), []string{
			"file /etc/systemd/system/relay.target",
			"file /etc/systemd/system/relay@.service",
			"remove /etc/systemd/system/relay@4445.service.d/10-relayfleet.conf",
			"restart relay@4443.service", "restart relay@4444.service", "stop relay@4445.service",
		}},
		{"a new release moves each process out and restarts it", newRelease.State, converged, []string{
			"release relay", "stale relay@4443.service", "stale relay@4444.service",
		}},
		{"template parameter", bigger.State, converged, []string{
			"file /etc/systemd/system/relay@.service", "restart relay@4443.service", "restart relay@4444.service",
		}},
		{"hand-edited drop-in restarts only its instance", two.State, func() HostState {
			s := clone(converged)
			s.Files["/etc/systemd/system/relay@4444.service.d/10-relayfleet.conf"] = "edited"
			return s
		}(), []string{
			"file /etc/systemd/system/relay@4444.service.d/10-relayfleet.conf", "restart relay@4444.service",
		}},
		{"sysctl drift", two.State, func() HostState {
			s := clone(converged)
			s.Sysctl["net.core.rmem_max"] = "212992"
			return s
		}(), []string{"sysctl net.core.rmem_max"}},
		{"refused keys and larger values are not drift", two.State, func() HostState {
			s := clone(converged)
			s.Sysctl["net.core.rmem_max"] = "4194304" // the kernel refuses here...
			s.SysctlRefused = map[string]string{"net.core.rmem_max": "16777216"}
			s.Sysctl["net.core.wmem_max"] = "33554432" // ...and an operator set more
			return s
		}(), nil},
		{"a refused key whose value changed is drift again", two.State, func() HostState {
			s := clone(converged)
			s.Sysctl["net.core.rmem_max"] = "4194304"
			s.SysctlRefused = map[string]string{"net.core.rmem_max": "8388608"}
			return s
		}(), []string{"sysctl net.core.rmem_max"}},
		{"crashed instance", two.State, func() HostState {
			s := clone(converged)
			s.Instances = []string{"relay@4443.service"}
			return s
		}(), []string{"start relay@4444.service"}},
		{"a release drop-in left on a process on current goes, no restart", two.State, withDropIns(converged, "relay@4443.service"), []string{
			"dropin relay@4443.service",
		}},
		{"a restarted process loses its drop-in on the way", bigger.State, withDropIns(converged, "relay@4443.service"), []string{
			"file /etc/systemd/system/relay@.service", "restart relay@4443.service", "restart relay@4444.service",
		}},
		{"a process moved to a new release loses its drop-in on the way", newRelease.State, withDropIns(converged, "relay@4443.service"), []string{
			"release relay", "stale relay@4443.service", "stale relay@4444.service",
		}},
		{"a process on its drop-in's release is restarted, moved out", two.State, func() HostState {
			s := withDropIns(converged, "relay@4443.service")
			s.Running = map[string]string{"relay@4443.service": "bbbb", "relay@4444.service": "aaaa"}
			return s
		}(), []string{"stale relay@4443.service"}},
		{"a crashed process starts on current", two.State, func() HostState {
			s := withDropIns(converged, "relay@4443.service")
			s.Instances = []string{"relay@4444.service"}
			return s
		}(), []string{"start relay@4443.service"}},
		{"a stopped process's drop-in goes, with the files", two.State, withDropIns(clone(three.State), "relay@4445.service"), []string{
			"file /etc/systemd/system/relay.target",
			"file /etc/systemd/system/relay@.service",
			"remove /etc/systemd/system/relay@4445.service.d/10-relayfleet.conf",
			"dropin relay@4445.service",
			"restart relay@4443.service", "restart relay@4444.service", "stop relay@4445.service",
		}},
		{"the drop-in of an instance neither wanted nor running goes", two.State, withDropIns(converged, "relay@4446.service", "relay@4443.service"), []string{
			"dropin relay@4443.service", "dropin relay@4446.service",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := kinds(Diff(tc.desired, tc.actual))
			if want := strings.Join(tc.want, "\n"); got != want {
				t.Errorf("Diff =\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestChangeString(t *testing.T) {
	for _, tc := range []struct {
		c    Change
		want string
	}{
		{Change{Kind: ChangeFile, What: "/a"}, "create /a"},
		{Change{Kind: ChangeFile, What: "/a", From: "x"}, "update /a"},
		{Change{Kind: ChangeSysctl, What: "k", To: "1"}, "sysctl k: (none) -> 1"},
		{Change{Kind: ChangeRelease, From: strings.Repeat("a", 64), To: strings.Repeat("b", 64)}, "release aaaaaaaaaaaa -> bbbbbbbbbbbb"},
		{Change{Kind: ChangeRestart, What: "relay@1.service"}, "restart relay@1.service"},
		{Change{Kind: ChangeDropIn, What: "relay@1.service", From: strings.Repeat("b", 64), To: strings.Repeat("a", 64)},
			"remove relay@1.service's release drop-in (left by a cut-off rollout: its next start would run release bbbbbbbbbbbb, not current)"},
		{Change{Kind: ChangeDropIn, What: "relay@1.service", From: strings.Repeat("a", 64), To: strings.Repeat("a", 64)},
			"remove relay@1.service's release drop-in (left by a cut-off rollout)"},
		{Change{Kind: ChangeDropIn, What: "relay@1.service", To: strings.Repeat("a", 64)},
			"remove relay@1.service's release drop-in (left by a cut-off rollout)"},
	} {
		if got := tc.c.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.c, got, tc.want)
		}
	}
}
