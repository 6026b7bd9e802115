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
// in the SETUP path parameter). With an auth key, clients pass an EdDSA
// (Ed25519) JWT as ?jwt=TOKEN; its "put" and "get" claims are the
// broadcast path prefixes it may publish and subscribe under, its lifetime
// at most a maximum (Authenticator.WithMaxLifetime). The key file may hold
// several keys, each valid until a time (rotation, LoadAuthKeys), public
// keys that verify and cannot sign, and a link key whose tokens may only
// subscribe (its private half signs them; only its public half, which
// origins alone get, verifies them); public listen prefixes admit sessions without a token to
// subscribe there only (Authenticator.WithPublicListen); upstream links
// sign their own token with the link key.
// Refusals are counted per reason and logged, rate-limited (refuse.go).
//
// Cluster links (Config.Upstreams, `relay serve --upstream`): a broadcast
// nobody publishes locally is pulled from an upstream relay, one upstream
// subscription per process and track however many listeners it has, and
// re-subscribed with backoff when the upstream goes away while the
// listeners stay connected; the upstream's announcements are mirrored to
// local announce watchers (cluster.go).
//
// The fleet heartbeat (heartbeat.go): nobody publishes under
// ReservedPrefix (".fleet/"); a relay without upstreams publishes
// HeartbeatPath, a 16-byte group every Config.HeartbeatInterval, which an
// edge pulls like any broadcast and anyone may subscribe to without a
// token (package client's ProbeHeartbeat, `relay probe`). Bad builds for
// tests (fault.go, tag relayfault) exit, forward nothing or drop groups.
//
// Memory budget (budget.go): the budget comes from Config.MemoryBudget or
// the cgroup's memory limit (CgroupMemoryLimit); Run sets the Go soft
// memory limit below it, admission control refuses new sessions above a
// high-water mark, a session cap or a cap per source address (and open
// sessions' new streams above the high-water mark), and a reaper that
// needs no per-session goroutine to run ends QUIC and WebSocket sessions
// that went silent. A session holds at most transport.MaxIncomingStreams
// bidirectional streams, each reset unless its request arrives within
// firstMessageTimeout; streams still waiting for it are capped per source
// address and over the relay (awaiting, server.go). With upstreams,
// subscribes without a token start upstream pulls at a bounded rate
// (subscribe.go). /stats reports the
// budget, the memory in use, whether sessions are admitted and the
// headroom that package router compares across processes. Per-session
// QUIC state is sized for one audio track: small stream limits and
// flow-control windows (quicConfig).
//
// Package router picks the process with the most headroom for a new
// listener, package loadgen generates listener load, and command bench
// (relay/bench, `make bench-relay`) measures a relay process with them.
//
// relay serve, token, keygen and pin (cmd/relay) are ServeFlags, TokenFlags,
// Keygen and PrintPin: the command declares the flags and binds their
// values; checking them, with errors naming the flag, is done here
// (serveflags.go).
//
// The relay imports nothing else of the relayfleet module but leaves of
// internal/ (internal/cli: usage errors, the --log-level logger).
package relay
