// Package lab is relayfleet's lab backend: real local servers on one Linux
// machine, for the demo and the integration tests (docs/testing.md, "Lab boxes").
//
// A lab box is a systemd-nspawn container booted from a debootstrapped Debian
// bookworm image with systemd as PID 1 and sshd. Each box is an overlay clone
// of the shared image with its own hostname, machine-id, an SSH host key that
// relayfleet generates (so the key is pinned before the first connection),
// the lab's admin key plus the caller's authorized keys, a static address on
// a private bridge (no gateway, no NAT, ip_forward untouched: boxes reach only
// each other and the host), and a cpuset and memory cgroup of its own so that
// nproc, runtime.NumCPU() and MemoryMax= behave as on a small server.
//
// The host needs root, systemd-nspawn (systemd-container), debootstrap,
// iproute2 and the cgroup v1 controller hierarchies mounted under
// /sys/fs/cgroup (as on a Debian 12 host where systemd is not PID 1). The
// launcher moves itself into a fresh per-box cgroup in every hierarchy
// before it runs systemd-nspawn --register=no --keep-unit, so the box's
// cgroup namespace starts there, and the box's PID 1 is a small shim that
// makes the controller hierarchies writable before it execs systemd, which
// can then enforce MemoryMax= for the units it runs.
//
// Lab's methods Create, Get, List and Delete are the small interface the
// relayfleet provider calls; all are idempotent. EnsureImage builds the image
// once (cached under the state directory, keyed by the recipe's hash) and
// Cleanup removes what a crash left behind: stale launchers, mounts,
// cgroups, and the bridge when no box runs.
package lab
