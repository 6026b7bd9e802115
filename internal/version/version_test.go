package version

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := func(rev, modified string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
		bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs.revision", Value: rev})
		if modified != "" {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return bi
	}
	for _, tc := range []struct {
		name  string
		stamp string
		bi    *debug.BuildInfo
		want  string
	}{
		{"stamped wins", "v1.2.3-4-gabcdef0-dirty", vcs("0123456789abcdef0123", "true"), "v1.2.3-4-gabcdef0-dirty"},
		{"revision", "", vcs("0123456789abcdef0123", "false"), "0123456789ab"},
		{"dirty revision", "", vcs("0123456789abcdef0123", "true"), "0123456789ab-dirty"},
		{"module version", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, "v0.3.0"},
		{"nothing recorded", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
		{"no build info", "", nil, "devel"},
	} {
		if got := resolve(tc.stamp, tc.bi); got != tc.want {
			t.Errorf("%s: resolve = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestStringIsNeverEmpty(t *testing.T) {
	if String() == "" {
		t.Fatal("String() is empty")
	}
}
