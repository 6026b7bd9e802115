package relay

// StatsSnapshotsForTest is how many times the relay has taken a Stats
// snapshot.
func (r *Relay) StatsSnapshotsForTest() int64 { return r.snapshots.Load() }
