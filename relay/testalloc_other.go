//go:build !linux

package relay

// testAllocate allocates n bytes and writes every 4 KiB page, so each is
// backed.
func testAllocate(n int) ([]byte, error) {
	b := make([]byte, n)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	return b, nil
}
