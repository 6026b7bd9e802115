package program

import (
	"strings"
	"testing"
)

func TestCheckStackName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"", true}, {"cloud", true}, {"cloud-e-final_2.b", true}, {strings.Repeat("a", 100), true},
		{"a b", false}, {"a/b", false}, {"élan", false}, {strings.Repeat("a", 101), false},
	} {
		err := CheckStackName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("CheckStackName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "want letters, digits") {
			t.Errorf("CheckStackName(%q): %v", tc.name, err)
		}
	}
}

func TestCheckBackendURL(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"", true}, {"file:///var/lib/relayfleet/state", true}, {"s3://bucket", true}, {"https://api.pulumi.com", true},
		{"/tmp/x", false}, {"bucket", false},
	} {
		if err := CheckBackendURL(tc.url); (err == nil) != tc.ok {
			t.Errorf("CheckBackendURL(%q) = %v, want ok %v", tc.url, err, tc.ok)
		}
	}
	if err := CheckBackendURL("/tmp/x"); err == nil || err.Error() != `want a URL such as file:///var/lib/relayfleet/state or s3://bucket, got "/tmp/x"` {
		t.Errorf("CheckBackendURL(/tmp/x): %v", err)
	}
}
