// Package provision turns a box into a tuned relay host over SSH and keeps
// it that way: it decides what to change (pure) and applies it through a
// small Runner, whatever made the box (a cloud, the lab, or a static
// server listed by address).
//
// This file set starts with the SSH layer: one connection per host reused
// for all its work, a cap on sessions per connection and on dials across
// the fleet, retries with jittered backoff for boxes still booting, strict
// host-key checking against pinned keys, ssh-agent or key file auth, and
// jump hosts. Every call takes a context and honours its cancellation.
package provision
