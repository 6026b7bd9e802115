package localcloud

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRoute(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		idAt         int
		want         string
	}{
		{"GET", "/servers", 1, "GET /servers"},
		{"GET", "/servers/42", 1, "GET /servers/{id}"},
		{"POST", "/firewalls/7/actions/set_rules", 1, "POST /firewalls/{id}/actions/set_rules"},
		{"GET", "/v2/droplets/3164401", 2, "GET /v2/droplets/{id}"},
		{"POST", "/v2/tags/fleet:demo/resources", 2, "POST /v2/tags/{id}/resources"},
		{"GET", "/v2/sizes", 2, "GET /v2/sizes"},
	} {
		if got := Route(tc.method, tc.path, tc.idAt); got != tc.want {
			t.Errorf("Route(%s, %s, %d) = %q, want %q", tc.method, tc.path, tc.idAt, got, tc.want)
		}
	}
}

func TestRequests(t *testing.T) {
	file := filepath.Join(t.TempDir(), "requests.json")
	r, err := NewRequests(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := ReadRequests(file); err != nil || c.Total != 0 {
		t.Fatalf("the file before any request: %+v %v", c, err)
	}
	r.Add("GET /servers", 200)
	r.Add("GET /servers", 429)
	r.Add("POST /servers", 201)
	want := RequestCounts{Total: 3, Routes: map[string]int{"GET /servers": 2, "POST /servers": 1}, Statuses: map[string]int{"200": 1, "201": 1, "429": 1}}
	for what, got := range map[string]func() (RequestCounts, error){
		"Counts": func() (RequestCounts, error) { return r.Counts(), nil },
		"file":   func() (RequestCounts, error) { return ReadRequests(file) },
	} {
		c, err := got()
		if err != nil || c.Total != want.Total || !maps.Equal(c.Routes, want.Routes) || !maps.Equal(c.Statuses, want.Statuses) {
			t.Errorf("%s: %+v %v, want %+v", what, c, err, want)
		}
	}
	// A file that cannot be written: refused at once; later, logged once.
	missing := filepath.Join(t.TempDir(), "no", "requests.json")
	if _, err := NewRequests(missing, nil); err == nil || !strings.HasPrefix(err.Error(), "requests file "+missing+": ") {
		t.Errorf("NewRequests in a missing directory: %v", err)
	}
	dir := t.TempDir()
	var logged []string
	r, err = NewRequests(filepath.Join(dir, "requests.json"), func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) })
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(dir)
	r.Add("GET /servers", 200)
	r.Add("GET /servers", 200)
	if len(logged) != 1 || r.Counts().Total != 2 {
		t.Errorf("writes failing: logged %q, counted %d; want one line, 2", logged, r.Counts().Total)
	}
	// Without a file: counted only.
	r, err = NewRequests("", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Add("GET /servers", 200)
	if r.Counts().Total != 1 {
		t.Errorf("counts without a file: %+v", r.Counts())
	}
}
