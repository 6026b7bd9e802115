package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/relay/procstat"
	"github.com/relayfleet/relayfleet/relay/wire"
)

// sample is one second of the fleet: every relay process's listeners and
// memory from its /stats, and its CPU from /proc on this host (lab boxes
// are containers: their processes are visible here).
type sample struct {
	At    time.Duration
	Procs map[string]procSample // by "BOX:PORT"
}

type procSample struct {
	Box       string
	Listeners int64
	MemUsed   int64
	MemBudget int64
	Draining  bool
	CPU       float64 // cores, over the last second
}

func (s *sample) total() int {
	n := 0
	for _, p := range s.Procs {
		n += int(p.Listeners)
	}
	return n
}

// line is the sample as "box:port N, ...".
func (s *sample) line() string {
	keys := make([]string, 0, len(s.Procs))
	for k := range s.Procs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		p := s.Procs[k]
		d := ""
		if p.Draining {
			d = " (draining)"
		}
		parts = append(parts, fmt.Sprintf("%s %d%s", k, p.Listeners, d))
	}
	return fmt.Sprintf("t+%3.0fs listeners %d: %s", s.At.Seconds(), s.total(), strings.Join(parts, ", "))
}

func (d *demo) lastSample() *sample {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.samples) == 0 {
		return nil
	}
	s := d.samples[len(d.samples)-1]
	return &s
}

// startSampling samples once a second until cleanup.
func (d *demo) startSampling() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	d.stopSampling = func() { cancel(); <-done }
	go func() {
		defer close(done)
		cpu := &cpuReader{last: map[int]cpuTime{}}
		names := &boxNames{}
		hc := &http.Client{Timeout: 800 * time.Millisecond}
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			s := sample{At: d.since(), Procs: map[string]procSample{}}
			cpus := cpu.read()
			relays := d.relays()
			byAddr := map[string]string{}
			for _, r := range relays {
				host, _ := hostPort(r.URL)
				byAddr[host] = names.name(ctx, d, host)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			for _, r := range relays {
				wg.Add(1)
				go func() {
					defer wg.Done()
					st, err := stats(ctx, hc, r.Stats)
					if err != nil {
						return
					}
					host, port := hostPort(r.URL)
					box := byAddr[host]
					if box == "" {
						box = host
					}
					key := box + ":" + port
					mu.Lock()
					s.Procs[key] = procSample{Box: box, Listeners: st.Subscribers, MemUsed: st.MemoryUsed, MemBudget: st.MemoryBudget,
						Draining: st.Draining || r.Draining, CPU: cpus[key]}
					mu.Unlock()
				}()
			}
			wg.Wait()
			d.mu.Lock()
			d.samples = append(d.samples, s)
			d.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

func stats(ctx context.Context, hc *http.Client, url string) (wire.Stats, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := hc.Do(req)
	if err != nil {
		return wire.Stats{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return wire.Stats{}, err
	}
	return wire.ParseStats(data, "subscribers")
}

func hostPort(u string) (string, string) {
	u = strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")
	u = strings.TrimSuffix(u, "/")
	i := strings.LastIndex(u, ":")
	if i < 0 {
		return u, ""
	}
	return strings.Trim(u[:i], "[]"), u[i+1:]
}

// boxNames maps the demo lab boxes' addresses to their names, from
// fleet lab status --json: asked again when a relay's address is not
// known yet (an event's box came up), at most every 5 seconds.
type boxNames struct {
	byAddr map[string]string
	asked  time.Time
}

func (b *boxNames) name(ctx context.Context, d *demo, addr string) string {
	if n := b.byAddr[addr]; n != "" || time.Since(b.asked) < 5*time.Second {
		return n
	}
	b.asked = time.Now()
	if boxes, err := d.labBoxes(ctx); err == nil {
		b.byAddr = map[string]string{}
		for _, box := range boxes {
			b.byAddr[box.Address] = box.Name
		}
	}
	return b.byAddr[addr]
}

type cpuTime struct {
	cpu time.Duration
	at  time.Time
}

// cpuReader computes each relay process's CPU from deltas of its CPU time
// (package relay/procstat).
type cpuReader struct{ last map[int]cpuTime }

// read returns cores used by each relay process since the last read,
// keyed "BOX:PORT" (from the process's cgroup, relay@PORT.service inside
// the lab box's cgroup).
func (c *cpuReader) read() map[string]float64 {
	out := map[string]float64{}
	now := time.Now()
	seen := map[int]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "relay" {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil {
			continue
		}
		key := relayKey(string(cg))
		if key == "" {
			continue
		}
		m, err := procstat.Read("/proc", pid)
		if err != nil {
			continue
		}
		cur := cpuTime{cpu: m.CPU, at: now}
		seen[pid] = true
		if prev, ok := c.last[pid]; ok && now.After(prev.at) {
			out[key] += (cur.cpu - prev.cpu).Seconds() / now.Sub(prev.at).Seconds()
		}
		c.last[pid] = cur
	}
	for pid := range c.last {
		if !seen[pid] {
			delete(c.last, pid)
		}
	}
	return out
}

// relayKey finds "BOX:PORT" in a /proc/PID/cgroup file of a relay
// process inside a demo lab box.
func relayKey(cgroup string) string {
	marker := "/relayfleet/" + labBridge + "/"
	for _, line := range strings.Split(cgroup, "\n") {
		i := strings.Index(line, marker)
		if i < 0 {
			continue
		}
		rest := line[i+len(marker):]
		box, tail, _ := strings.Cut(rest, "/")
		j := strings.Index(tail, "relay@")
		if j < 0 {
			continue
		}
		port, _, _ := strings.Cut(tail[j+len("relay@"):], ".service")
		return box + ":" + port
	}
	return ""
}
