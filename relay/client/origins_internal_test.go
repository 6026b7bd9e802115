package client

import (
	"strings"
	"testing"
)

// TestOriginLabelHidesToken: the publisher's logs name an origin without
// the token relay publish put in its URL.
func TestOriginLabelHidesToken(t *testing.T) {
	got := originLabel("http://10.0.0.1:4443/?jwt=SECRETTOKEN#spki=ab12")
	if strings.Contains(got, "SECRETTOKEN") || !strings.Contains(got, "10.0.0.1:4443") {
		t.Errorf("originLabel = %q, want the address without the token", got)
	}
}
