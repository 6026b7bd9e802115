package moqlite

import (
	"errors"
	"fmt"
	"io"
)

// MaxVarint is the largest value a QUIC variable-length integer can hold.
const MaxVarint = 1<<62 - 1

// ErrVarintRange is returned when a value does not fit a QUIC varint.
var ErrVarintRange = errors.New("moqlite: varint out of range")

// VarintLen returns how many bytes AppendVarint writes for v.
func VarintLen(v uint64) int {
	switch {
	case v < 1<<6:
		return 1
	case v < 1<<14:
		return 2
	case v < 1<<30:
		return 4
	default:
		return 8
	}
}

// AppendVarint appends v as a QUIC (RFC 9000) variable-length integer using
// the shortest encoding. Values above MaxVarint are truncated to 62 bits;
// callers validate them first.
func AppendVarint(b []byte, v uint64) []byte {
	switch {
	case v < 1<<6:
		return append(b, byte(v))
	case v < 1<<14:
		return append(b, 0x40|byte(v>>8), byte(v))
	case v < 1<<30:
		return append(b, 0x80|byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default:
		v &= MaxVarint
		return append(b, 0xc0|byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32),
			byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
}

// ParseVarint decodes a varint at the start of b and returns it with the
// number of bytes used. It returns io.ErrUnexpectedEOF when b is too short.
func ParseVarint(b []byte) (uint64, int, error) {
	if len(b) == 0 {
		return 0, 0, io.ErrUnexpectedEOF
	}
	n := 1 << (b[0] >> 6)
	if len(b) < n {
		return 0, 0, io.ErrUnexpectedEOF
	}
	v := uint64(b[0] & 0x3f)
	for i := 1; i < n; i++ {
		v = v<<8 | uint64(b[i])
	}
	return v, n, nil
}

// ReadVarint reads one varint from r. A clean end of stream before the first
// byte is returned as io.EOF; a truncated varint as io.ErrUnexpectedEOF.
func ReadVarint(r io.Reader) (uint64, error) {
	var buf [8]byte
	if _, err := io.ReadFull(r, buf[:1]); err != nil {
		return 0, err
	}
	n := 1 << (buf[0] >> 6)
	if n > 1 {
		if _, err := io.ReadFull(r, buf[1:n]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("read varint: %w", err)
		}
	}
	v, _, err := ParseVarint(buf[:n])
	return v, err
}
