// Package loadgen is the relay's load generator: it opens many raw-QUIC
// listener sessions against a relay (directly, or each through a router's
// GET /route), subscribes each to one track and measures what arrives:
// frames received and lost, late frames and the bitrate per listener. It
// can freeze a fraction of its listeners at once, as a network blackhole
// does: they stop reading, and their packets, both ways, are dropped, so
// they neither acknowledge nor close.
//
// Listeners share a few UDP sockets (shards); freezing works per shard, so
// the frozen fraction is rounded to whole shards. Loss and lateness need
// frames written by Frame (Publish writes them): each names its group, its
// index, its group's frame count and when it was sent. A group that never
// arrives counts as that many frames lost; a group cut short counts its
// missing frames. The first group a listener receives starts its count. A
// frame is late when it arrives more than Options.Late after it was sent
// (the publisher must share the clock: the same machine).
package loadgen
