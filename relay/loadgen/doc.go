// Package loadgen is the relay's load generator: it opens many raw-QUIC
// listener sessions against a relay (directly, or each through a router's
// GET /route), subscribes each to one track and measures what a listener
// hears: the audible gap, frames received and lost, late frames and the
// bitrate per listener. It can freeze a fraction of its listeners at once,
// as a network blackhole does: they stop reading, and their packets, both
// ways, are dropped, so they neither acknowledge nor close; for good, or
// for a while (Options.FreezeFor).
//
// Listeners share a few UDP sockets (shards); freezing works per shard, so
// the frozen fraction is rounded to whole shards. Loss and lateness need
// frames written by Frame (Publish writes them): each names its group, its
// index, its group's frame count and when it was sent. A group that never
// arrives counts as that many frames lost; a group cut short counts its
// missing frames. The first group a listener receives starts its count. A
// frame is late when it arrives more than Options.Late after it was sent
// (the publisher must share the clock: the same machine).
//
// The gap is what a listener hears: per listener, the longest time from
// one frame received to the next (the first counts from subscribing). A
// listener with no frame in the last Options.Silence of the run is silent
// at the end: its gap runs to the end, and the groups the publisher sent
// after its last one count as lost; a listener that never got a frame is
// silent for the whole run and lost everything sent meanwhile. What the
// publisher sent is estimated from its group sequence as the listeners
// saw it: the latest group start to arrive, and the time between groups
// (from the send times in the frames, or their arrivals for other
// publishers). Frames sent less than Options.Silence before the end may be
// in flight and do not count.
//
// With Options.Reconnect a listener whose subscription ends, or brings no
// group (or no next frame of one) within Options.Silence, resolves its
// relay again and resubscribes. The new subscription starts at the latest
// group: the groups between the last one seen and the first one on the
// new subscription count as missing (each as many frames as the last group
// seen had), and so do the groups the old subscription skipped over and
// never delivered; if the new subscription serves the last group seen
// again it is not read twice, but one that was cut short is read on from
// where it was cut (a relay serves a group from its start), as a player
// would, and its frames from there on count as received. So a frame sent after a listener's first
// group is either received or counted lost, across reconnects too, except
// when the publisher's group sequence goes back (the publisher restarted):
// then the count restarts at the new sequence, as for a first group.
//
// relay loadgen and relay publish (cmd/relay) are Flags and PublishFlags:
// the flags' values, checked with errors naming the flag, then Run or
// Publish (flags.go).
package loadgen
