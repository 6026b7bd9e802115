// Package relay is the moq-lite relay that every relayfleet box runs.
//
// Publishers announce broadcasts; the relay subscribes to a publisher's track
// on demand, once per broadcast and track, and fans every group out to every
// subscriber, starting a late joiner at the newest group (sent whole, from
// its first frame). Unsubscribing, unannouncing and disconnecting free the
// upstream subscription, the cached group and every goroutine.
//
// It speaks moq-lite-02 (package moqlite) as @moq/lite 0.2.2 does, over raw
// QUIC (ALPN "moql"), WebTransport (HTTP/3, ALPN "h3", on the same UDP
// socket) and WebSocket (subprotocol "webtransport", package transport), on
// one port number: QUIC on UDP, and on TCP an HTTP server (plain, or TLS
// when the client starts a TLS handshake) with GET /certificate.sha256,
// /healthz, /stats and /metrics.
//
// The URL path a client connects to is its root: broadcast names it
// announces and subscribes to are relative to it (raw QUIC carries the path
// in the SETUP path parameter). With an auth key, clients pass an HS256 JWT
// as ?jwt=TOKEN; its "put" and "get" claims are the broadcast path prefixes
// it may publish and subscribe under.
//
// The relay imports nothing else of the relayfleet module.
package relay
