package relay

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
)

// TestAllocEnv names the environment variable that turns on the
// test-only allocation switch: RELAYFLEET_TEST_ALLOC_MIB=N makes
// POST /debug/alloc (from the box itself only) allocate N MiB, every
// page of it backed, and keep it, so a fault test can push a relay
// process past its cgroup's MemoryMax and watch the kernel's OOM killer
// end it alone. On Linux the N MiB are mapped and populated in one
// system call: the kernel charges them all before the process returns
// to user space, so the process goes past MemoryHigh (where the kernel
// throttles a process that grows page by page, for tens of seconds)
// straight to MemoryMax and the OOM killer. Unset, the endpoint does not exist. Lab fault tests set
// it through a unit drop-in; a fleet never does.
const TestAllocEnv = "RELAYFLEET_TEST_ALLOC_MIB"

// maxTestAllocMiB bounds the switch: 64 GiB.
const maxTestAllocMiB = 64 << 10

// testAllocMiB reads TestAllocEnv: 0 when it is unset.
func testAllocMiB() (int, error) {
	v, ok := os.LookupEnv(TestAllocEnv)
	if !ok || v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxTestAllocMiB {
		return 0, fmt.Errorf("environment %s: want a whole number of MiB from 1 to %d, got %q", TestAllocEnv, maxTestAllocMiB, v)
	}
	return n, nil
}

// testAllocHeld keeps what the switch allocated reachable.
var testAllocHeld struct {
	sync.Mutex
	chunks [][]byte
}

// testAllocBytes is how many bytes the switch holds now.
func testAllocBytes() int64 {
	testAllocHeld.Lock()
	defer testAllocHeld.Unlock()
	var n int64
	for _, c := range testAllocHeld.chunks {
		n += int64(len(c))
	}
	return n
}

// handleTestAlloc adds POST /debug/alloc to mux when TestAllocEnv is set.
func handleTestAlloc(mux *http.ServeMux) {
	mib, err := testAllocMiB()
	if err != nil || mib == 0 {
		return // Start refused a bad value already.
	}
	mux.HandleFunc("POST /debug/alloc", func(w http.ResponseWriter, req *http.Request) {
		if !fromLoopback(req) {
			http.Error(w, "alloc is only accepted from the box itself", http.StatusForbidden)
			return
		}
		c, err := testAllocate(mib << 20)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		testAllocHeld.Lock()
		testAllocHeld.chunks = append(testAllocHeld.chunks, c)
		testAllocHeld.Unlock()
		_, _ = fmt.Fprintf(w, "allocated %d MiB, holding %d MiB\n", mib, testAllocBytes()>>20)
	})
}
