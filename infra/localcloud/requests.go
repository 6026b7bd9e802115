package localcloud

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// RequestCounts are the requests an API server answered: what Requests
// counts and its file holds, for example
//
//	{"total": 9, "routes": {"GET /actions": 2, "GET /servers": 4, "POST /servers": 1, ...},
//	 "statuses": {"200": 7, "201": 1, "429": 1}}
type RequestCounts struct {
	Total int `json:"total"`
	// Routes counts by method and path, an id in the path written {id}
	// ("GET /servers/{id}", "GET /v2/droplets/{id}").
	Routes map[string]int `json:"routes"`
	// Statuses counts by HTTP status ("200", "429").
	Statuses map[string]int `json:"statuses"`
}

// Requests counts the requests an API server answers and, when it has a
// file, writes the counts there (replacing it whole, mode 0644) after each one:
// a test that runs fleet lab cloud as a process reads how many calls a
// command made (ReadRequests). Safe for concurrent use.
type Requests struct {
	file string
	logf func(format string, args ...any)

	mu      sync.Mutex
	c       RequestCounts
	failing bool // the last write failed (logged once until one succeeds)
}

// NewRequests returns a Requests writing to file ("": none), which it
// writes at once with no requests: a file that cannot be written is an
// error naming it. logf (nil: none) gets a failed write later, once.
func NewRequests(file string, logf func(format string, args ...any)) (*Requests, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	r := &Requests{file: file, logf: logf, c: RequestCounts{Routes: map[string]int{}, Statuses: map[string]int{}}}
	if err := r.write(); err != nil {
		return nil, err
	}
	return r, nil
}

// Route is the route of a request for Routes: method and path, the path's
// segment number idAt (from 0, "/" and the ends trimmed) written {id}.
func Route(method, path string, idAt int) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if idAt >= 0 && idAt < len(parts) {
		parts[idAt] = "{id}"
	}
	return method + " /" + strings.Join(parts, "/")
}

// Add counts one request of route (Route) answered with status.
func (r *Requests) Add(route string, status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.Total++
	r.c.Routes[route]++
	r.c.Statuses[strconv.Itoa(status)]++
	err := r.write()
	if err != nil && !r.failing {
		r.logf("%v (logged once until a write succeeds)", err)
	}
	r.failing = err != nil
}

func (r *Requests) write() error {
	if r.file == "" {
		return nil
	}
	data, err := json.MarshalIndent(r.c, "", "  ")
	if err != nil {
		return err
	}
	if err := replace(r.file, append(data, '\n')); err != nil {
		return fmt.Errorf("requests file %s: %w", r.file, err)
	}
	return nil
}

// replace writes data to a temporary file beside path, mode 0644, and
// renames it over path: a reader never sees it half written. Unlike
// atomicfile.Write it does not sync: it runs after every request, and
// counts need not outlive a crash of the cloud that counted them.
func replace(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// Counts returns the counts so far.
func (r *Requests) Counts() RequestCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return RequestCounts{Total: r.c.Total, Routes: maps.Clone(r.c.Routes), Statuses: maps.Clone(r.c.Statuses)}
}

// ReadRequests reads a requests file.
func ReadRequests(path string) (RequestCounts, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return RequestCounts{}, fmt.Errorf("requests file: %w", err)
	}
	var c RequestCounts
	if err := json.Unmarshal(data, &c); err != nil {
		return RequestCounts{}, fmt.Errorf("requests file %s: %v", path, err)
	}
	return c, nil
}
