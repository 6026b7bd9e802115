package relay

// SegmentedWritesForTest counts the relay's UDP writes that carried a GSO
// segment size.
func (r *Relay) SegmentedWritesForTest() int64 { return r.sendErrs.segmented.Load() }
