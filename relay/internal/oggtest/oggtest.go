// Package oggtest writes Ogg Opus streams for tests: pages with a CRC
// computed bit by bit (independently of the reader's table), lacing, the
// Opus header packets and 120 ms Opus packets.
package oggtest

import (
	"bytes"
	"encoding/binary"
)

// Writer appends Ogg pages of one logical stream to Buf.
type Writer struct {
	Buf    bytes.Buffer
	Serial uint32
	Seq    uint32 // the next page's sequence number
}

// CRC is Ogg's CRC-32 (polynomial 0x04c11db7, not reflected, initial 0).
func CRC(b []byte) uint32 {
	var crc uint32
	for _, c := range b {
		crc ^= uint32(c) << 24
		for range 8 {
			if crc&0x80000000 != 0 {
				crc = crc<<1 ^ 0x04c11db7
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// RawPage appends a page with the given lacing values and body.
func (w *Writer) RawPage(flags byte, granule uint64, lacing, body []byte) {
	h := make([]byte, 27, 27+len(lacing)+len(body))
	copy(h, "OggS")
	h[5] = flags
	binary.LittleEndian.PutUint64(h[6:], granule)
	binary.LittleEndian.PutUint32(h[14:], w.Serial)
	binary.LittleEndian.PutUint32(h[18:], w.Seq)
	h[26] = byte(len(lacing))
	h = append(append(h, lacing...), body...)
	binary.LittleEndian.PutUint32(h[22:], CRC(h))
	w.Buf.Write(h)
	w.Seq++
}

// Lace is the lacing values of a whole packet of n bytes.
func Lace(n int) []byte {
	l := bytes.Repeat([]byte{255}, n/255)
	return append(l, byte(n%255))
}

// Page appends a page holding whole packets.
func (w *Writer) Page(flags byte, granule uint64, packets ...[]byte) {
	var lacing, body []byte
	for _, p := range packets {
		lacing = append(lacing, Lace(len(p))...)
		body = append(body, p...)
	}
	w.RawPage(flags, granule, lacing, body)
}

// OpusHead is an OpusHead packet: mono, 312 samples pre-skip, 48 kHz.
func OpusHead() []byte {
	return []byte("OpusHead\x01\x01\x38\x01\x80\xbb\x00\x00\x00\x00\x00")
}

// Headers writes the OpusHead and OpusTags pages.
func (w *Writer) Headers() {
	w.Page(0x02, 0, OpusHead())
	w.Page(0, 0, []byte("OpusTags\x05\x00\x00\x00relay\x00\x00\x00\x00"))
}

// Packet120 is an Opus packet of 120 ms (CELT FB 20 ms frames, code 3,
// six frames) of n bytes, n >= 2, filled with fill.
func Packet120(n int, fill byte) []byte {
	p := bytes.Repeat([]byte{fill}, n)
	p[0], p[1] = 31<<3|3, 6
	return p
}
