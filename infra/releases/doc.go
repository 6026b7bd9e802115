// Package releases keeps a fleet's relay releases as fleet state, where
// every operator's machine and the events timer read them: the release
// the fleet runs, the ones before it and the failed attempts (a History,
// the output of a stack of its own in the fleet's Pulumi backend), and
// the builds themselves, content-addressed in the same backend (Blobs).
//
// Commands that put a relay build on boxes (fleet up, preview, converge,
// auth rotate, events reconcile, burst) take the recorded release
// (Resolve), whatever binary lies beside them; only fleet rollout and
// fleet rollback change it.
package releases
