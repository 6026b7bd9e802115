// Package backup copies a fleet's state out of its Pulumi backend into
// one file, and back into a backend (fleet backup, fleet restore), for a
// team that wants a copy outside the store.
//
// The file is a gzip-compressed tar archive. It holds:
//
//   - every stack of the fleet (IsFleetStack: the steady stack, the event
//     stacks, the event records, the reconciler's heartbeat, the release
//     history; not another fleet's), as pulumi stack export writes it:
//     its secrets stay encrypted under the fleet's passphrase;
//   - each stack's latest update record and its tags, as the backend keeps
//     them (.pulumi/history/..., .pulumi/stacks/...pulumi-tags): a stack's
//     configuration (the cloud tokens, the fleet's keys, encrypted) is
//     read by every fresh machine from its latest update, which pulumi
//     stack import does not write;
//   - the relay builds the fleet's release history names
//     (.relayfleet/releases/SHA256), and any other relayfleet object of
//     the fleet's, but not its lease (.relayfleet/leases/): a restored
//     fleet starts unlocked;
//   - last, a manifest (MANIFEST.json): the fleet, the backend it came
//     from (its URL without query), when, the relayfleet and Pulumi
//     versions, and every entry with its size and SHA-256. Each entry also
//     carries its SHA-256 in its own tar header.
//
// A restore reads the whole file and checks every entry against its
// checksum and the manifest before it touches the backend, so a truncated
// or corrupt file is refused in one line naming the file and the entry,
// and the backend is left as it was.
package backup
