package relay

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/relayfleet/relayfleet/relay/client"
)

// CheckUpstream validates a cluster link URL (Config.Upstreams, `relay
// serve --upstream`). How the edge trusts the origin's certificate:
//
//   - URL#spki=HEX: the origin's certificate must carry the public key
//     whose SHA-256 is HEX (`relay pin`, /stats spki_sha256), for http://
//     and https:// alike; nothing is fetched;
//   - https:// without a pin: verified against the system's CAs;
//   - http:// without a pin: the hash is fetched from /certificate.sha256
//     over plain HTTP, which is refused unless the origin is on loopback.
func CheckUpstream(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("upstream %q: %w", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Port() == "" {
		return fmt.Errorf("upstream %q: want http(s)://HOST:PORT/[PATH][#spki=HEX]", raw)
	}
	pin, err := client.URLPin(u)
	if err != nil {
		return fmt.Errorf("upstream %q: %w", raw, err)
	}
	if u.Scheme == "http" && pin == "" && !client.IsLoopback(u.Hostname()) {
		return fmt.Errorf("upstream %q: %w", raw, errUnpinnedUpstream)
	}
	return nil
}

var errUnpinnedUpstream = errors.New("an http:// upstream that is not on loopback needs #spki=HEX (the SHA-256 of the origin's public key, from `relay pin`), or the edge would trust a certificate hash fetched in clear text")
