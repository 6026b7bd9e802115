// Package provider is the relayfleet Pulumi provider, built with
// pulumi-go-provider's infer package and served by the fleet binary when it
// runs as pulumi-resource-relayfleet (docs/operations.md, "fleet up,
// preview, destroy").
//
// It has two resources:
//
//   - Box (relayfleet:index:Box) is one server. Its backend input picks who
//     makes it: lab (a systemd-nspawn box on this machine, package
//     infra/lab), static (an existing server adopted by address and host
//     key: nothing is created or destroyed, its cores and RAM are read over
//     SSH), or a cloud (hcloud, digitalocean) once infra/backend provides
//     one. Every box carries the labels fleet, tier and event. Create returns
//     only once SSH answers with the expected host key; Delete is
//     idempotent. Its labels and admin keys change in place (Update: the
//     cloud's API, the lab's metadata, authorized_keys over SSH); a change
//     of what it is made of (shape, image, place, name) replaces it, the
//     new box first: Check raises its generation, which gives it a name of
//     its own (ServerName), and the old box is drained (its listeners told
//     to move, with the going-away notice) before Delete removes it.
//   - Host (relayfleet:index:Host) converges a box into a relay host through
//     package provision: sysctl, relay units per core, the relay release.
//     Diff compares a hash of the desired state; Update converges again,
//     restarting relay processes one at a time; Read probes the box and
//     reports drift (a hand-edited unit or sysctl file) in the drift output,
//     which makes `pulumi refresh` and `pulumi preview --refresh` show it and
//     the next update repair it.
//
// Each resource's args struct (BoxArgs, HostArgs, FirewallArgs) is its
// schema, and the program registers it as it is (package infra/program).
// Every input says by a tag what its change does: provider:"replaceOnChanges"
// replaces the resource, diff:"inPlace" updates it in place; the Diffs read
// the tags (schema.go), and a test refuses an input that has neither.
//
// The provider's configuration (relayfleet:labDir and friends) says where
// the lab lives and which key reaches static servers. Nothing secret passes
// through it; SSH private keys stay in files or the ssh-agent.
package provider
