package backend

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// RequestLogEnv names a file that every cloud API request a backend's
// transport (Retry.Transport) sends, each retry included, is appended to
// as one line: "METHOD ROUTE STATUS". The event reconciler sets it for
// each Pulumi run of an event's stack, and the Pulumi CLI passes it on to
// the provider plugin, so the requests the plugin sends are counted for
// the event (ReadRequestLog). A request made with a context from
// WithRequestLog goes to that context's file instead.
//
// The lines hold no token, host, query or body: the route is the path
// with its numeric segments written {id}, the status "error" for a
// request that got no answer.
const RequestLogEnv = "RELAYFLEET_REQUEST_LOG"

type requestLogKey struct{}

// WithRequestLog returns ctx naming path as the file the requests sent
// with it are appended to (RequestLogEnv's lines).
func WithRequestLog(ctx context.Context, path string) context.Context {
	return context.WithValue(ctx, requestLogKey{}, path)
}

// RequestLog is the file the requests sent with ctx are appended to: the
// one WithRequestLog gave it, else $RELAYFLEET_REQUEST_LOG; "" for none.
func RequestLog(ctx context.Context) string {
	if p, ok := ctx.Value(requestLogKey{}).(string); ok {
		return p
	}
	return os.Getenv(RequestLogEnv)
}

// Requests are counts of API requests.
type Requests struct {
	Total int `json:"total"`
	// Routes counts by method and route ("GET /v1/servers/{id}").
	Routes map[string]int `json:"routes,omitempty"`
	// Statuses counts by HTTP status ("200", "429"; "error": no answer).
	Statuses map[string]int `json:"statuses,omitempty"`
}

// Add adds o's counts to r's.
func (r *Requests) Add(o Requests) {
	r.Total += o.Total
	r.Routes = addCounts(r.Routes, o.Routes)
	r.Statuses = addCounts(r.Statuses, o.Statuses)
}

func addCounts(to, from map[string]int) map[string]int {
	if len(from) == 0 {
		return to
	}
	if to == nil {
		to = make(map[string]int, len(from))
	}
	for k, n := range from {
		to[k] += n
	}
	return to
}

// requestRoute is the request's method and path, numeric segments
// written {id}.
func requestRoute(req *http.Request) string {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	for i, p := range parts {
		if _, err := strconv.ParseUint(p, 10, 64); err == nil {
			parts[i] = "{id}"
		}
	}
	return req.Method + " /" + strings.Join(parts, "/")
}

// logRequest appends one request to ctx's request log, when it has one:
// one write of one line to a file opened for appending, so the lines of
// concurrent writers (the reconciler, a plugin) never mix. Counting is
// never worth failing a request for: an error is dropped.
func logRequest(req *http.Request, resp *http.Response) {
	path := RequestLog(req.Context())
	if path == "" {
		return
	}
	status := "error"
	if resp != nil {
		status = strconv.Itoa(resp.StatusCode)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	f.WriteString(requestRoute(req) + " " + status + "\n")
	f.Close()
}

// ReadRequestLog counts the requests in a request log (RequestLogEnv); a
// file that does not exist holds none.
func ReadRequestLog(path string) (Requests, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Requests{}, nil
	}
	if err != nil {
		return Requests{}, fmt.Errorf("request log: %w", err)
	}
	defer f.Close()
	var r Requests
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i <= 0 {
			return Requests{}, fmt.Errorf("request log %s line %d: want METHOD ROUTE STATUS, got %q", path, n, line)
		}
		r.Add(Requests{Total: 1, Routes: map[string]int{line[:i]: 1}, Statuses: map[string]int{line[i+1:]: 1}})
	}
	if err := sc.Err(); err != nil {
		return Requests{}, fmt.Errorf("request log %s: %w", path, err)
	}
	return r, nil
}

// Clone returns a copy of r that shares no map with it.
func (r Requests) Clone() Requests {
	r.Routes, r.Statuses = maps.Clone(r.Routes), maps.Clone(r.Statuses)
	return r
}
