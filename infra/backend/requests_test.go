package backend

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestTransportCountsRequests: every request the transport sends, each
// retry included, lands in the request log its context (or, in a plugin,
// the environment) names, as METHOD ROUTE STATUS with ids, query and
// token left out; ReadRequestLog counts them. Requests from goroutines at
// once all count.
func TestTransportCountsRequests(t *testing.T) {
	srv := httptest.NewServer(&scripted{statuses: []int{429, 503}})
	defer srv.Close()
	c := &http.Client{Transport: fastRetry.Transport(nil)}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "requests.log")
	ctx := WithRequestLog(context.Background(), logPath)
	get := func(ctx context.Context, path string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer secret-token")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// A 429 and a 503, then 200: three requests sent.
	get(ctx, "/v1/servers/4242?label_selector=event%3Dshow")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); get(ctx, "/v1/actions/7") }()
	}
	wg.Wait()
	// Without a log in the context, the environment's.
	envPath := filepath.Join(dir, "env.log")
	t.Setenv(RequestLogEnv, envPath)
	get(context.Background(), "/v2/droplets")

	got, err := ReadRequestLog(logPath)
	if err != nil {
		t.Fatal(err)
	}
	want := Requests{Total: 11,
		Routes:   map[string]int{"GET /v1/servers/{id}": 3, "GET /v1/actions/{id}": 8},
		Statuses: map[string]int{"429": 1, "503": 1, "200": 9}}
	if got.Total != want.Total || !maps.Equal(got.Routes, want.Routes) || !maps.Equal(got.Statuses, want.Statuses) {
		t.Errorf("request log counts %+v, want %+v", got, want)
	}
	env, err := ReadRequestLog(envPath)
	if err != nil || env.Total != 1 || env.Routes["GET /v2/droplets"] != 1 {
		t.Errorf("request log from $%s: %+v, %v; want one GET /v2/droplets", RequestLogEnv, env, err)
	}
	data, _ := os.ReadFile(logPath)
	for _, leak := range []string{"secret-token", "label_selector", "4242", "127.0.0.1"} {
		if strings.Contains(string(data), leak) {
			t.Errorf("request log holds %q:\n%s", leak, data)
		}
	}
	if none, err := ReadRequestLog(filepath.Join(dir, "none")); err != nil || none.Total != 0 {
		t.Errorf("a missing request log: %+v, %v; want no requests", none, err)
	}
}
