package relay

import "time"

// A token's expiry holds for the whole session it opened: at the token's
// exp (plus a grace for clocks that disagree a little) the relay closes
// the session with codeTokenExpired and reason "token expired". A client
// takes that as "come back with a fresh token": package client retries
// it, asking its token source (ResolverOptions.TokenSource) again.

// codeTokenExpired closes a session whose token expired.
const codeTokenExpired = 8

// DefaultExpiryGrace is how long after its token's expiry a session is
// closed.
const DefaultExpiryGrace = 5 * time.Second

// expiryGrace is ServerOptions.ExpiryGrace with its default.
func expiryGrace(g time.Duration) time.Duration {
	switch {
	case g == 0:
		return DefaultExpiryGrace
	case g < 0:
		return 0
	}
	return g
}

// watchExpiry closes sess at its token's expiry plus the server's grace;
// the func returned stops the watch. A session without a token is never
// closed for this.
func (s *Server) watchExpiry(sess *session) (stop func() bool) {
	c := sess.perms.token
	if c == nil || c.Expires == 0 || clusterLinkToken(c) {
		return func() bool { return false }
	}
	d := time.Unix(c.Expires, 0).Sub(s.clock()) + s.expiryGrace
	t := time.AfterFunc(max(d, 0), func() {
		sess.log.Info("session closed: token expired")
		sess.closeWith(codeTokenExpired, reasonExpired)
	})
	return t.Stop
}

// clusterLinkToken reports whether c is the token an edge signs for its
// link to the origin (upstreamDialURL, Claims.Link): verified by a link
// key or marked by the signing key, publishing nothing. A link is checked
// at connect only: closing it at its token's expiry would cut every
// broadcast the edge pulls, each hour. Tokens from NewToken (relay token,
// fleet token) are never marked.
func clusterLinkToken(c *Claims) bool {
	return c.Link && len(c.Put) == 0
}
