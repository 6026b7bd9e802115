package loadgen

import (
	"encoding/binary"
	"time"
)

// frameMagic starts every frame the load generator's publisher writes.
var frameMagic = [4]byte{'L', 'G', 'F', '1'}

// frameHeader is the size of the header Frame writes: magic, group
// sequence, frame index, frames in the group, send time (Unix ns).
const frameHeader = 4 + 8 + 4 + 4 + 8

// FrameInfo is what a frame written by Frame says about itself.
type FrameInfo struct {
	Group  uint64
	Index  uint32
	Count  uint32 // frames in the group
	SentNs int64  // Unix nanoseconds
}

// Frame returns a frame of size bytes (at least the 28-byte header) that
// names its group, index, the group's frame count and the time it was sent,
// so that a listener can count lost and late frames.
func Frame(fi FrameInfo, size int) []byte {
	b := make([]byte, max(size, frameHeader))
	copy(b, frameMagic[:])
	binary.BigEndian.PutUint64(b[4:], fi.Group)
	binary.BigEndian.PutUint32(b[12:], fi.Index)
	binary.BigEndian.PutUint32(b[16:], fi.Count)
	binary.BigEndian.PutUint64(b[20:], uint64(fi.SentNs))
	for i := frameHeader; i < len(b); i++ {
		b[i] = byte(i)
	}
	return b
}

// ParseFrame reads the header Frame wrote; ok is false for other frames.
func ParseFrame(b []byte) (fi FrameInfo, ok bool) {
	if len(b) < frameHeader || [4]byte(b[:4]) != frameMagic {
		return FrameInfo{}, false
	}
	return FrameInfo{
		Group:  binary.BigEndian.Uint64(b[4:]),
		Index:  binary.BigEndian.Uint32(b[12:]),
		Count:  binary.BigEndian.Uint32(b[16:]),
		SentNs: int64(binary.BigEndian.Uint64(b[20:])),
	}, true
}

// sentAt is the send time of fi.
func (fi FrameInfo) sentAt() time.Time { return time.Unix(0, fi.SentNs) }
