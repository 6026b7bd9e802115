package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// memStats is what the relay's /debug/pprof endpoints say of its memory:
// its goroutines, and the Go runtime's heap and goroutine stacks, read
// just after a garbage collection (gc=1): heap in use is then the live
// objects, sync.Pool contents and fragmentation, not the garbage of the
// moment (which RSS, read before, does hold).
type memStats struct {
	goroutines         int64
	heapInuse, stack   int64
	heapAlloc, heapSys int64
}

// relayMem reads memStats from the relay's pprof handlers (--pprof).
func relayMem(ctx context.Context, base string) (memStats, error) {
	var m memStats
	g, err := pprofText(ctx, base+"/debug/pprof/goroutine?debug=1")
	if err != nil {
		return m, err
	}
	if first, _, _ := strings.Cut(g, "\n"); strings.HasPrefix(first, "goroutine profile: total ") {
		m.goroutines, _ = strconv.ParseInt(strings.TrimPrefix(first, "goroutine profile: total "), 10, 64)
	}
	h, err := pprofText(ctx, base+"/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return m, err
	}
	sc := bufio.NewScanner(strings.NewReader(h))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "# "), " = ")
		if !ok {
			continue
		}
		v, _, _ = strings.Cut(v, " ") // "Stack = inuse / sys"
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "HeapInuse":
			m.heapInuse = n
		case "HeapAlloc":
			m.heapAlloc = n
		case "HeapSys":
			m.heapSys = n
		case "Stack":
			m.stack = n
		}
	}
	return m, nil
}

func pprofText(ctx context.Context, url string) (string, error) {
	resp, err := get(ctx, url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// memPerListener is the growth of each figure from before the listeners
// came to the end of the window, per listener.
type memPerListener struct {
	goroutines                       float64
	heapInuseKiB, stackKiB, allocKiB float64
}

func memPer(before, after memStats, n int) memPerListener {
	f := float64(max(n, 1))
	return memPerListener{
		goroutines:   float64(after.goroutines-before.goroutines) / f,
		heapInuseKiB: float64(after.heapInuse-before.heapInuse) / 1024 / f,
		stackKiB:     float64(after.stack-before.stack) / 1024 / f,
		allocKiB:     float64(after.heapAlloc-before.heapAlloc) / 1024 / f,
	}
}

// printMemory prints the relay's memory per listener for every run: RSS
// beside the Go runtime's own figures, so that a change in RSS can be told
// apart (heap, stacks, or what the runtime holds from the system).
func printMemory(w io.Writer, all [][]result) {
	printHead(w, "Memory per listener (growth from before the listeners to the end of the window; the Go runtime's figures just after a GC, RSS just before it):",
		"| listeners | run | RSS per listener (KiB) | heap in use (KiB) | live heap (KiB) | goroutine stacks (KiB) | goroutines | load average (1 min) |",
		"|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, rs := range all {
		for i, r := range rs {
			if r.err != "" {
				continue
			}
			m := r.mem
			fmt.Fprintf(w, "| %d | %d | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f |\n",
				r.n, i+1, r.rssPerListenerKiB, m.heapInuseKiB, m.allocKiB, m.stackKiB, m.goroutines, r.load1)
		}
	}
	fmt.Fprintln(w)
}

// fetchHeapProfile saves the relay's heap profile (inuse_space and
// alloc_space; go tool pprof -sample_index=inuse_space -top BIN FILE).
func fetchHeapProfile(ctx context.Context, base, path string) error {
	return fetchTo(ctx, base+"/debug/pprof/heap", path)
}

// fetchTo saves the body of a GET of url at path.
func fetchTo(ctx context.Context, url, path string) error {
	resp, err := get(ctx, url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
