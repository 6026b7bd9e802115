package testutil

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Request sends method to url with body, as JSON when there is one, and
// with "Authorization: Bearer token" unless token is "". It returns the
// answer's status, headers and body; a request that gets no answer fails
// the test, naming the request.
func Request(t testing.TB, method, url, token, body string) (int, http.Header, []byte) {
	t.Helper()
	code, header, b, err := request(method, url, token, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return code, header, b
}

func request(method, url, token, body string) (int, http.Header, []byte, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

// GetJSON GETs url and decodes the JSON of its answer into v; a request
// that gets no answer, or an answer that is not JSON for v, fails the
// test.
func GetJSON(t testing.TB, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// Get GETs url and returns the body of its answer, which must be 200 OK;
// anything else fails the test.
func Get(t testing.TB, url string) []byte {
	t.Helper()
	code, _, b := Request(t, http.MethodGet, url, "", "")
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, b)
	}
	return b
}
