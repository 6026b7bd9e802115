// Package version is the build's version, for `fleet version` and `relay
// --version`: stamped at link time (make build passes -ldflags "-X
// github.com/relayfleet/relayfleet/internal/version.stamp=$(git describe
// --always --dirty)"), else read from the VCS settings Go records in the
// binary, else "devel".
package version

import (
	"runtime/debug"
)

// stamp is set at link time with -X; empty when not stamped.
var stamp string

// String is the version of this build.
func String() string {
	bi, _ := debug.ReadBuildInfo()
	return resolve(stamp, bi)
}

// resolve picks the stamp, else the module version, else the VCS
// revision (12 hex digits, "-dirty" when the tree had changes), else
// "devel".
func resolve(stamp string, bi *debug.BuildInfo) string {
	if stamp != "" {
		return stamp
	}
	if bi == nil {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
