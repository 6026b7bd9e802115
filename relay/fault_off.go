//go:build !relayfault

package relay

// faultMode is a constant in a release build: -X cannot set it.
const faultMode = ""

// fault is the build's fault mode: none.
func fault() string { return faultMode }
