package relay

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// residentBytes is the process's resident memory (VmRSS), what its
// cgroup is charged for.
func residentBytes(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		testutil.Skipf(t, "no /proc/self/status: %v", err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q", v)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func TestTestAllocSwitch(t *testing.T) {
	post := func(t *testing.T, r *Relay) (int, string) {
		t.Helper()
		resp, err := http.Post("http://"+r.Addr().String()+"/debug/alloc", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	start := func(t *testing.T) *Relay {
		t.Helper()
		r, err := Start(context.Background(), Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}

	t.Run("unset: no endpoint", func(t *testing.T) {
		t.Setenv(TestAllocEnv, "")
		before := testAllocBytes()
		code, body := post(t, start(t))
		if code == http.StatusOK || testAllocBytes() != before {
			t.Errorf("POST /debug/alloc without %s: %d %q, holding %d bytes (was %d)", TestAllocEnv, code, body, testAllocBytes(), before)
		}
	})

	t.Run("bad value refused at start", func(t *testing.T) {
		for _, v := range []string{"lots", "0", "-5", "99999999"} {
			t.Setenv(TestAllocEnv, v)
			r, err := Start(context.Background(), Config{})
			if err == nil {
				r.Close()
				t.Errorf("%s=%q: started", TestAllocEnv, v)
				continue
			}
			if !strings.Contains(err.Error(), TestAllocEnv) || !strings.Contains(err.Error(), `"`+v+`"`) {
				t.Errorf("%s=%q: error %q does not name the variable and value", TestAllocEnv, v, err)
			}
		}
	})

	t.Run("set: allocates and touches from loopback only", func(t *testing.T) {
		t.Setenv(TestAllocEnv, "16")
		r := start(t)
		// From another address: refused, nothing allocated.
		req := httptest.NewRequest(http.MethodPost, "/debug/alloc", nil)
		req.RemoteAddr = "203.0.113.5:5000"
		w := httptest.NewRecorder()
		before := testAllocBytes()
		r.handler(false).ServeHTTP(w, req)
		if w.Code != http.StatusForbidden || testAllocBytes() != before {
			t.Errorf("from 203.0.113.5: %d, holding %d bytes (was %d)", w.Code, testAllocBytes(), before)
		}
		rss := residentBytes(t)
		code, body := post(t, r)
		if code != http.StatusOK || !strings.Contains(body, "allocated 16 MiB") {
			t.Fatalf("POST /debug/alloc: %d %q", code, body)
		}
		if got := testAllocBytes() - before; got != 16<<20 {
			t.Errorf("holding %d more bytes, want %d", got, 16<<20)
		}
		// The process's resident set: other tests in the package free
		// memory meanwhile, so allow them 4 MiB; memory allocated but never
		// touched would not grow it at all.
		if grew := residentBytes(t) - rss; grew < 12<<20 {
			t.Errorf("resident memory grew by %d bytes, want at least 12 of the 16 MiB touched", grew)
		}
	})
}
