package client

import (
	"bytes"
	"fmt"
	"strconv"
)

// Pattern is the deterministic test payload of frame f of group g: the
// text "g<g> f<f> " padded to size bytes with letters that depend on g, f
// and the position. relay/interop/pattern.mjs implements the same.
func Pattern(g, f uint64, size int) []byte {
	b := []byte("g" + strconv.FormatUint(g, 10) + " f" + strconv.FormatUint(f, 10) + " ")
	for i := len(b); i < size; i++ {
		b = append(b, byte('a'+(g*7+f*13+uint64(i))%26))
	}
	return b
}

// CheckPattern returns an error unless p is Pattern(g, f, size) for the
// g and f it names; it returns them.
func CheckPattern(p []byte, size int) (g, f uint64, err error) {
	if _, err := fmt.Sscanf(string(p), "g%d f%d ", &g, &f); err != nil {
		return 0, 0, fmt.Errorf("payload %.20q: %w", p, err)
	}
	if want := Pattern(g, f, size); !bytes.Equal(p, want) {
		return g, f, fmt.Errorf("payload of group %d frame %d: got %d bytes %.32q, want %d bytes %.32q", g, f, len(p), p, len(want), want)
	}
	return g, f, nil
}
