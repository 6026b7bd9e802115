package relay

import (
	"fmt"
	"syscall"
)

// testAllocate maps n bytes of anonymous memory, populated (charged to
// the cgroup) within the one system call.
func testAllocate(n int) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("test alloc: mmap %d bytes: %w", n, err)
	}
	return b, nil
}
