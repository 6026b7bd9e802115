// Package e2e holds relayfleet's end-to-end system tests (build tag e2e):
// they build bin/fleet and bin/relay once and run them as processes
// against lab boxes (systemd-nspawn) and a local Pulumi state, as an
// operator would. Run them with make e2e (root and the Pulumi CLI are
// needed). The /proc scanner the secret test relies on is untagged, so
// go test ./test/e2e/ runs its unit test alone.
package e2e
