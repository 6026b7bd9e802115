package relay

import (
	"net/url"
	"testing"
	"time"
)

// TestClusterLinkTokenNotExpiredLive: the token an edge signs for its
// link to the origin is not closed at its expiry (the link would drop
// every pulled broadcast each hour); a minted token of the same grant is.
func TestClusterLinkTokenNotExpiredLive(t *testing.T) {
	a, err := NewAuthenticator([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := upstreamDialURL(a, "http://127.0.0.1:1/")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(raw)
	p, err := a.Authorize(u)
	if err != nil || p.token == nil {
		t.Fatalf("link token: %+v, %v", p, err)
	}
	if !clusterLinkToken(p.token) {
		t.Errorf("the link's token %+v is not taken for a link's", p.token)
	}
	tok, err := a.NewToken("", "", false, true, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if clusterLinkToken(&c) {
		t.Errorf("a minted token %+v taken for a link's", c)
	}
}
