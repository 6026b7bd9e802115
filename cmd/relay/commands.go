// Command relay is the relayfleet relay. `relay serve`
// runs the moq-lite relay (cluster-linked with --upstream, under a memory
// budget), `relay router` hands new listeners the relay process with the
// most headroom, `relay token` signs access tokens, `relay publish` and
// `relay listen` are test clients, `relay probe` hears the fleet
// heartbeat through one relay process, `relay loadgen` generates and
// measures listener load, `relay keygen` and `relay pin` make a TLS key and print
// its SPKI pin, and `relay version` prints the build's version. main
// (main.go) only wires Execute to the process: signals, arguments, streams.
package main

import (
	"context"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/version"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/loadgen"
	"github.com/relayfleet/relayfleet/relay/router"
)

// rootLong is the root's help text (cli.Help): the commands and what
// a URL given to them is pinned to.
const rootLong = `relay serve --listen HOST:PORT runs a relay; relay publish URL and relay listen URL
reach one, relay listen and relay loadgen also through a router (--router URL).
URLs are https://HOST:PORT/PATH (certificate verified against the CAs) or http://HOST:PORT/PATH
(self-signed: its certificate hash is pinned). What the hash is pinned to:
  URL#spki=HEX      the SHA-256 of the relay's public key (relay pin), known beforehand
  --router URL      the router's answer: relay URL and certificate hash, over https:// (CA-verified,
                    or --router-spki HEX), or plain http:// on loopback or with --insecure-router
  otherwise         GET /certificate.sha256 over plain HTTP: only from loopback, or with
                    --trust-http-hash, which trusts every network between here and the relay`

// Execute runs the relay command line args (cli.Execute: cobra parses
// every command's flags, checks their ranges, and maps the error to the
// exit status, one line on stderr). Alone, relay is a usage error: its
// help goes to stderr.
func Execute(ctx context.Context, args []string, ios *cli.IOStreams) int {
	root := newRoot(ios)
	if len(args) == 0 {
		cli.Help(ios.ErrOut, root)
		return cli.ExitUsage
	}
	return cli.Execute(ctx, root, args, ios)
}

// newRoot is the relay's command tree; cli.NewRoot adds version, and
// cli.Execute help and completion.
func newRoot(ios *cli.IOStreams) *cobra.Command {
	root := cli.NewRoot("relay", "the relayfleet relay", version.String(), ios)
	root.Long = rootLong
	root.AddCommand(serveCmd(ios), routerCmd(ios), tokenCmd(ios), publishCmd(ios), listenCmd(ios),
		probeCmd(ios), proberCmd(ios), loadgenCmd(ios), keygenCmd(ios), pinCmd(ios))
	return root
}

// serveCmd is relay serve: the relay, until its context ends.
func serveCmd(ios *cli.IOStreams) *cobra.Command {
	var f relay.ServeFlags
	cmd := &cobra.Command{Use: "serve", Short: "run the moq-lite relay", Args: cli.NoArgs,
		Long: `relay serve --listen HOST:PORT runs the moq-lite relay on UDP (QUIC, WebTransport) and TCP
(HTTP, WebSocket): with certificate files (--cert and --key, re-read when they change or on
SIGHUP), self-signed certificates for a key (--tls-key), or certificates from an ACME CA
(--acme-domain); tokens checked with --auth-key (without one, only on a loopback --listen,
or anywhere with --no-auth); broadcasts not published here pulled from
--upstream relays; sessions admitted under --memory-budget and --max-listeners.`}
	fs := cmd.Flags()
	fs.StringVar(&f.Listen, "listen", "", "HOST:PORT for UDP (QUIC, WebTransport) and TCP (HTTP, WebSocket)")
	fs.StringVar(&f.CertFile, "cert", "", "TLS certificate chain (PEM), re-read when it changes or on SIGHUP")
	fs.StringVar(&f.KeyFile, "key", "", "TLS private key (PEM) of --cert")
	fs.StringVar(&f.TLSKeyFile, "tls-key", "", "ECDSA P-256 key (PEM PKCS #8, from relay keygen) for the self-signed certificates: the SPKI pin stays")
	fs.StringVar(&f.ACMEDomain, "acme-domain", "", "get the certificate for this DNS name from an ACME CA (Let's Encrypt by default)")
	fs.StringVar(&f.ACMEEmail, "acme-email", "", "ACME account contact address")
	fs.StringVar(&f.ACMECA, "acme-ca", "", "ACME directory URL (https://); default Let's Encrypt")
	fs.StringVar(&f.ACMECARoot, "acme-ca-root", "", "PEM file with the root(s) that verify the ACME CA's HTTPS endpoint")
	fs.StringVar(&f.ACMEDir, "acme-dir", "", "directory for the ACME account, keys and certificates")
	fs.StringVar(&f.AuthKeyFile, "auth-key", "", "file with the token keys: lines ed25519-public:BASE64 (verifies) or ed25519-private:BASE64 (also signs), each optionally followed by until=RFC3339 (relay keygen --auth, fleet auth export)")
	fs.DurationVar(&f.MaxTokenLifetime, "max-token-lifetime", relay.DefaultMaxTokenLifetime, "refuse tokens valid for longer than this (exp - iat, and exp - now); needs --auth-key")
	cli.Ranged(fs, "max-token-lifetime", cli.Durations(time.Minute, 365*24*time.Hour))
	fs.BoolVar(&f.NoAuth, "no-auth", false, "check no tokens on a --listen address other than loopback: any client that reaches it may publish (without --auth-key, only loopback serves)")
	fs.StringVar(&f.RevocationFile, "revocation-file", "", "file naming revoked tokens (jti=ID or prefix=PATH issued-before=T, until=T; written by fleet token revoke), read every second: their sessions are closed and refused; a missing file revokes nothing")
	fs.Var(&f.PublicListen, "public-listen", "broadcast path prefix anyone may listen under without a token (repeatable, comma-separated); needs --auth-key")
	fs.StringVar(&f.UDPBuffer, "udp-buffer", strconv.Itoa(relay.DefaultUDPBuffer), "UDP buffer size to ask for, in bytes (suffixes KiB, MiB)")
	fs.IntVar(&f.SendBatch, "send-batch", relay.DefaultSendBatch, "most QUIC packets, across connections, sent in one sendmmsg (64 batches them); 1, the default, sends each with its own sendmsg")
	cli.Ranged(fs, "send-batch", cli.Ints(1, 1024))
	fs.DurationVar(&f.PTOAckDelay, "pto-ack-delay", 0, "least time the probe timeout allows for a listener's ACK (0: the listener's max_ack_delay); larger probes fewer packets that were not lost, and lost ones later: a dropped frame waits for the next one (docs/relay.md)")
	cli.Ranged(fs, "pto-ack-delay", cli.Durations(0, relay.MaxAckDelay))
	fs.BoolVar(&f.PTOWaitsForReads, "pto-waits-for-reads", true, "hold a listener's probe timeout back (10 ms at a time, at most 100 ms) while the relay has datagrams it has not read: its ACK may be among them; false probes at the deadline, as quic-go does")
	fs.IntVar(&f.AckThreshold, "ack-threshold", relay.DefaultAckThreshold, "ack-eliciting packets the relay receives before it acknowledges at once instead of waiting up to --ack-delay; a listener's ACKs carry stream credit, so 2 (quic-go's) sends ACK-only packets")
	cli.Ranged(fs, "ack-threshold", cli.Ints(1, relay.MaxAckThreshold))
	fs.DurationVar(&f.AckDelay, "ack-delay", relay.DefaultAckDelay, "longest the relay delays a QUIC acknowledgement (max_ack_delay, advertised to peers); above the audio's packet interval, ACKs ride on audio packets; 25ms is quic-go's default")
	cli.Ranged(fs, "ack-delay", cli.Durations(time.Millisecond, relay.MaxAckDelay))
	fs.DurationVar(&f.ListenerAckDelay, "listener-ack-delay", relay.DefaultListenerAckDelay, "max_ack_delay the relay asks of listeners whose QUIC supports the ACK frequency extension (relayfleet's client and load generator do), with --listener-ack-threshold; above the audio's packet interval they acknowledge every other packet instead of each one; 0 asks nothing (docs/relay.md)")
	cli.Ranged(fs, "listener-ack-delay", cli.Durations(0, relay.MaxAckDelay))
	fs.IntVar(&f.ListenerAckThreshold, "listener-ack-threshold", relay.DefaultListenerAckThreshold, "ack-eliciting packets a listener asked with --listener-ack-delay may leave unacknowledged before it acknowledges at once (1: every other packet)")
	cli.Ranged(fs, "listener-ack-threshold", cli.Ints(1, relay.MaxAckThreshold))
	fs.BoolVar(&f.SendQueue, "send-queue", false, "write each connection's packets from a goroutine of its own (quic-go's send queue), and let each connection's loop do all of its work, instead of the goroutine that made them (the track's writer, the socket's reader): one goroutine more per listener; for comparison")
	fs.StringVar(&f.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.MemoryBudget, "memory-budget", "", "memory budget in bytes (suffixes KiB, MiB, GiB); default: the cgroup memory limit")
	fs.IntVar(&f.MaxListeners, "max-listeners", 0, "cap on open sessions; 0 means none")
	cli.Ranged(fs, "max-listeners", cli.Ints(0, 10_000_000))
	fs.IntVar(&f.MaxSessionsPerAddress, "max-sessions-per-address", relay.DefaultMaxSessionsPerAddress, "cap on sessions open from one source address (an IPv4 address, an IPv6 /64), on every transport; 0 means none (behind a proxy, or for a load generator)")
	cli.Ranged(fs, "max-sessions-per-address", cli.Ints(0, 10_000_000))
	fs.StringVar(&f.UncappedAddresses, "uncapped-addresses", "", "comma-separated IP addresses or CIDR prefixes whose sessions no per-address cap counts (the fleet's own load generators)")
	fs.DurationVar(&f.ReapAfter, "reap-after", relay.DefaultReapAfter, "end a QUIC or WebSocket session that received nothing for this long (a WebSocket one is pinged first)")
	cli.Ranged(fs, "reap-after", cli.Durations(time.Second, 24*time.Hour))
	fs.BoolVar(&f.Pprof, "pprof", false, "serve /debug/pprof/ on the TCP port")
	fs.StringVar(&f.ResetSecretFile, "stateless-reset-secret", "", "file with at least 32 random bytes (mode 0600 or 0400, e.g. %d/reset-secret under systemd): the QUIC stateless reset key for the port derives from it, so a restarted relay resets its predecessor's connections at once")
	fs.Float64Var(&f.ShedRate, "shed-rate", relay.DefaultShedRate, "sessions per second POST /shed and a graceful stop (SIGTERM) send going-away to")
	cli.Ranged(fs, "shed-rate", cli.Floats(0.01, relay.MaxShedRate))
	fs.DurationVar(&f.ShutdownGrace, "shutdown-grace", relay.DefaultShutdownGrace, "on SIGTERM, stop admitting and send every session going-away within this long, then exit; 0s closes sessions at once")
	cli.Ranged(fs, "shutdown-grace", cli.Durations(0, 10*time.Minute))
	fs.DurationVar(&f.NoticeGrace, "notice-grace", relay.DefaultNoticeGrace, "POST /shed and a graceful stop (within half of --shutdown-grace) send each session a going-away notice datagram and serve it this long before closing it, so that clients move first; 0s closes at once")
	cli.Ranged(fs, "notice-grace", cli.Durations(0, relay.MaxNoticeGrace))
	fs.DurationVar(&f.HeartbeatInterval, "heartbeat-interval", relay.DefaultHeartbeatInterval, "without --upstream, publish the fleet heartbeat (.fleet/heartbeat, for relay probe) a group this often; 0 publishes none (with --upstream it is pulled from the upstream)")
	cli.Ranged(fs, "heartbeat-interval", cli.Durations(0, time.Minute))
	fs.StringVar(&f.Upstream, "upstream", "", "comma-separated relay URLs to pull broadcasts from that are not published here; URL#spki=HEX pins the origin's key (needed for an http:// origin not on loopback)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return f.Run(cmd.Context(), ios.ErrOut) }
	return cmd
}

// routerCmd is relay router: GET /route, until its context ends.
func routerCmd(ios *cli.IOStreams) *cobra.Command {
	var f router.Flags
	cmd := &cobra.Command{Use: "router --listen HOST:PORT --relays FILE",
		Short: "hand new listeners the relay process with the most headroom (GET /route)", Args: cli.NoArgs,
		Long: `relay router --listen HOST:PORT --relays FILE answers GET /route with the relay process of FILE
with the most headroom, and its certificate hash; SIGHUP reloads FILE.`}
	fs := cmd.Flags()
	fs.StringVar(&f.Listen, "listen", "", "HOST:PORT to serve GET /route on")
	fs.StringVar(&f.Relays, "relays", "", "relays file (JSON), reloaded when it changes or on SIGHUP")
	fs.DurationVar(&f.Poll, "poll", time.Second, "how often to read each relay's /stats")
	cli.Ranged(fs, "poll", cli.Durations(10*time.Millisecond, time.Minute))
	fs.StringVar(&f.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.CertFile, "cert", "", "serve over TLS with this certificate chain (PEM), re-read when it changes")
	fs.StringVar(&f.KeyFile, "key", "", "the --cert private key (PEM)")
	fs.StringVar(&f.TLSKeyFile, "tls-key", "", "serve over TLS with self-signed certificates for this key (relay keygen); clients pin its SPKI (logged as spki_sha256) with --router-spki")
	fs.BoolVar(&f.RequirePins, "require-pins", false, "route only relays with an spki_sha256 pin in the relays file (fleet up writes one for each): an unpinned relay's certificate hash is never handed out")
	fs.Float64Var(&f.Rate, "rate", router.DefaultRate, "answer at most this many /route requests a second on average (a token bucket; past it 503 with a Retry-After the clients honour); 0: no limit")
	fs.IntVar(&f.Burst, "burst", router.DefaultBurst, "answer at most this many /route requests at once above --rate (the bucket's size)")
	cli.Ranged(fs, "rate", cli.Floats(0, 1e6))
	cli.Ranged(fs, "burst", cli.Ints(1, 1e7))
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return f.Run(cmd.Context(), ios.ErrOut) }
	return cmd
}

// tokenCmd is relay token: it prints a signed access token.
func tokenCmd(ios *cli.IOStreams) *cobra.Command {
	var f relay.TokenFlags
	cmd := &cobra.Command{Use: "token --key FILE (--publish PREFIX | --subscribe PREFIX)", Short: "sign an access token with a key file", Args: cli.NoArgs,
		Long: "relay token prints a token signed with the key in --key FILE that may publish, or subscribe, under a broadcast path prefix."}
	fs := cmd.Flags()
	fs.StringVar(&f.KeyFile, "key", "", "key file with an ed25519-private line (relay keygen --auth); a file of public keys verifies only and cannot sign")
	fs.StringVar(&f.Publish, "publish", "", "broadcast path prefix the token may publish under")
	fs.StringVar(&f.Subscribe, "subscribe", "", "broadcast path prefix the token may subscribe under")
	fs.DurationVar(&f.TTL, "ttl", time.Hour, "how long the token is valid (relays refuse tokens valid longer than their --max-token-lifetime, 24h by default)")
	cli.Ranged(fs, "ttl", cli.Durations(time.Second, 365*24*time.Hour))
	cmd.RunE = func(*cobra.Command, []string) error {
		f.Changed = fs.Changed
		return f.Run(ios.Out)
	}
	return cmd
}

// publishCmd is relay publish: a test publisher.
func publishCmd(ios *cli.IOStreams) *cobra.Command {
	var f loadgen.PublishFlags
	cmd := &cobra.Command{Use: "publish URL [URL...] --name BROADCAST", Short: "publish test frames or an Ogg Opus file to a relay, or to several origins",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cli.Usagef("want at least one URL argument")
			}
			for _, a := range args {
				if _, err := client.CheckURLArg([]string{a}); err != nil {
					return err
				}
			}
			return nil
		},
		Long: `relay publish URL --name BROADCAST publishes test frames (--paced: load-generator frames) or,
with --ogg FILE (- for stdin), the Opus packets of an Ogg Opus file to the relay at URL.
With several URLs (origins), it keeps a session to each and sends every group, with the same
sequence and frames, to all of them: an edge that loses the origin it pulls from resumes on
another. An origin that goes away is reconnected with backoff while the others go on.`}
	fs := cmd.Flags()
	fs.StringVar(&f.Broadcast, "name", "", "broadcast name")
	fs.StringVar(&f.Track, "track", "audio", "track name")
	fs.DurationVar(&f.Interval, "interval", 120*time.Millisecond, "time between groups")
	cli.Ranged(fs, "interval", cli.Durations(time.Millisecond, time.Minute))
	fs.IntVar(&f.Frames, "frames", 1, "frames per group")
	cli.Ranged(fs, "frames", cli.Ints(1, 1000))
	fs.IntVar(&f.Size, "size", 160, "bytes per frame")
	cli.Ranged(fs, "size", cli.Ints(16, 1<<20))
	fs.IntVar(&f.Groups, "groups", 0, "groups to send; 0 means until interrupted")
	cli.Ranged(fs, "groups", cli.Ints(0, 1_000_000_000))
	fs.StringVar(&f.Transport, "transport", client.TransportQUIC, "quic or websocket")
	fs.BoolVar(&f.Paced, "paced", false, "write load-generator frames (group, index, send time), one every --interval, --frames to a group")
	fs.StringVar(&f.Ogg, "ogg", "", "publish the Opus packets of an Ogg Opus `FILE` (- for stdin), one packet to a group")
	fs.BoolVar(&f.OggPace, "ogg-pace", false, "send --ogg packets in real time (default: for a file, not for -)")
	fs.BoolVar(&f.TrustHTTPHash, "trust-http-hash", false, trustHTTPHashHelp)
	fs.StringVar(&f.TokenFile, "token-file", "", tokenFileHelp+"; read again when the relay closes the session for an expired token, and publishing goes on (generated frames without --paced)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		f.URL, f.Origins, f.Changed = args[0], args[1:], fs.Changed
		return f.Run(cmd.Context(), ios)
	}
	return cmd
}

// listenCmd is relay listen: a test listener.
func listenCmd(ios *cli.IOStreams) *cobra.Command {
	var f client.ListenFlags
	cmd := &cobra.Command{Use: "listen (URL | --router URL) --name BROADCAST", Short: "listen to a broadcast and check its frames",
		Args: func(_ *cobra.Command, args []string) error { return client.CheckListenArgs(f.Router, args) },
		Long: `relay listen (URL | --router URL) --name BROADCAST subscribes to a broadcast at the relay at URL,
or at the relay a router hands out (and, when it goes silent, another), and checks its frames.`}
	fs := cmd.Flags()
	fs.StringVar(&f.Broadcast, "name", "", "broadcast name")
	fs.StringVar(&f.Track, "track", "audio", "track name")
	fs.IntVar(&f.Groups, "groups", 0, "stop after this many groups; 0 means until interrupted")
	cli.Ranged(fs, "groups", cli.Ints(0, 1_000_000_000))
	fs.IntVar(&f.Check, "check", 0, "check frames are `relay publish` patterns of this size")
	cli.Ranged(fs, "check", cli.Ints(0, 1<<20))
	fs.BoolVarP(&f.Verbose, "v", "v", false, "print one line per group")
	fs.StringVar(&f.Transport, "transport", client.TransportQUIC, "quic or websocket")
	fs.StringVar(&f.Router, "router", "", "router base URL: ask its /route for the relay and its certificate hash instead of giving a URL")
	fs.StringVar(&f.RouterSPKI, "router-spki", "", "SHA-256 (hex) of the https:// router's public key, checked instead of the CAs")
	fs.StringVar(&f.Region, "region", "", "with --router: the listener's region (/route?region=NAME): the router prefers that region's relays")
	fs.BoolVar(&f.InsecureRouter, "insecure-router", false, insecureRouterHelp)
	fs.BoolVar(&f.TrustHTTPHash, "trust-http-hash", false, trustHTTPHashHelp)
	fs.StringVar(&f.TokenFile, "token-file", "", tokenFileHelp+"; read again at every reconnect, so a token replaced in it is presented after the relay closed the session for an expired one")
	fs.DurationVar(&f.Silence, "silence", client.DefaultSilence, "reconnect when no group comes for this long (through the router, avoiding the relay that went silent); 0 means wait forever")
	cli.Ranged(fs, "silence", cli.Durations(0, time.Hour))
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			f.URL = args[0]
		}
		return f.Run(cmd.Context(), ios.Out, ios.ErrOut)
	}
	return cmd
}

// probeCmd is relay probe: the fleet heartbeat, heard through one relay
// process.
func probeCmd(ios *cli.IOStreams) *cobra.Command {
	var f client.ProbeFlags
	cmd := &cobra.Command{Use: "probe URL", Short: "hear the fleet heartbeat through one relay process and report it",
		Args: func(_ *cobra.Command, args []string) error { _, err := client.CheckURLArg(args); return err },
		Long: `relay probe URL subscribes to the fleet heartbeat (.fleet/heartbeat, no token needed) at the relay
process at URL for --window and prints one line (--json: an object): groups received, time to the
first, lost, largest and 99th percentile gap, duplicates and reordered. Through an edge the heartbeat
comes from its origin, so hearing it shows the process forwards. Exits 1 when no group came.`}
	fs := cmd.Flags()
	fs.DurationVar(&f.Window, "window", client.DefaultProbeWindow, "how long to receive")
	cli.Ranged(fs, "window", cli.Durations(10*time.Millisecond, time.Hour))
	fs.BoolVar(&f.JSON, "json", false, "print the result as JSON")
	fs.StringVar(&f.CertSHA256, "cert-sha256", "", "SHA-256 (hex) the relay's certificate must have, known from a trusted channel (checked instead of the CAs; nothing is fetched)")
	fs.StringVar(&f.CAFile, "ca", "", "PEM file with the CA certificates that verify an https:// relay (default: the system's)")
	fs.StringVar(&f.Transport, "transport", client.TransportQUIC, "quic, websocket or webtransport")
	fs.BoolVar(&f.TrustHTTPHash, "trust-http-hash", false, trustHTTPHashHelp)
	fs.StringVar(&f.TokenFile, "token-file", "", tokenFileHelp+" (the heartbeat needs none)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		f.URL = args[0]
		return f.Run(cmd.Context(), ios.Out, ios.ErrOut)
	}
	return cmd
}

// proberCmd is relay prober: the heartbeat probe, served to Prometheus.
func proberCmd(ios *cli.IOStreams) *cobra.Command {
	var f client.ProberFlags
	var logLevel string
	cmd := &cobra.Command{Use: "prober --listen HOST:PORT", Short: "serve the fleet heartbeat probe to Prometheus (GET /probe?target=HOST:PORT)", Args: cli.NoArgs,
		Long: `relay prober serves GET /probe?target=HOST:PORT: each scrape hears the fleet heartbeat through that
relay process for --window and answers relayfleet_heartbeat_* metrics, as the blackbox exporter does.
fleet monitor's prometheus.yml scrapes it for every relay target (--prober), and its rules alert on a
process that passes too little of the heartbeat on (RelaySilent).`}
	fs := cmd.Flags()
	fs.StringVar(&f.Listen, "listen", "127.0.0.1:9799", "address to serve on")
	fs.DurationVar(&f.Window, "window", client.DefaultProberWindow, "how long each probe listens (a scrape's ?window= may ask for up to 10s)")
	cli.Ranged(fs, "window", cli.Durations(100*time.Millisecond, client.MaxProberWindow))
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		logger, err := cli.NewLogger(ios.ErrOut, logLevel)
		if err != nil {
			return err
		}
		return f.Run(cmd.Context(), logger)
	}
	return cmd
}

// loadgenCmd is relay loadgen: listener load, measured.
func loadgenCmd(ios *cli.IOStreams) *cobra.Command {
	var f loadgen.Flags
	cmd := &cobra.Command{Use: "loadgen (--url URL | --router URL) --broadcast NAME --listeners N --duration D",
		Short: "open listener sessions and measure what they receive", Args: cli.NoArgs,
		Long: `relay loadgen opens --listeners sessions to a broadcast (at --url, or at the relays a --router
hands out), started --ramp per second, measures what they receive for --duration, and reports it.`}
	fs := cmd.Flags()
	fs.StringVar(&f.URL, "url", "", "relay URL (http:// or https://)")
	fs.StringVar(&f.Router, "router", "", "router base URL: ask its /route for each listener's relay and its certificate hash")
	fs.StringVar(&f.RouterSPKI, "router-spki", "", "SHA-256 (hex) of the https:// router's public key, checked instead of the CAs")
	fs.StringVar(&f.RouterRegion, "region", "", "with --router: the listeners' region (/route?region=NAME): the router prefers that region's relays")
	fs.BoolVar(&f.InsecureRouter, "insecure-router", false, insecureRouterHelp)
	fs.StringVar(&f.CertificateHash, "certificate-sha256", "", "SHA-256 (hex) the --url relay's certificate must have, known from a trusted channel (nothing is fetched)")
	fs.BoolVar(&f.TrustHTTPHash, "trust-http-hash", false, trustHTTPHashHelp)
	fs.StringVar(&f.TokenFile, "token-file", "", tokenFileHelp+"; every listener presents it, read again at every reconnect (a fresh token after the relay closed a session for an expired one)")
	fs.StringVar(&f.Broadcast, "broadcast", "", "broadcast name")
	fs.StringVar(&f.Track, "track", "audio", "track name")
	fs.IntVar(&f.Listeners, "listeners", 0, "listener sessions to open")
	cli.Ranged(fs, "listeners", cli.Ints(1, 1_000_000))
	fs.Float64Var(&f.Ramp, "ramp", 0, "listeners started per second; 0 means as fast as possible")
	cli.Ranged(fs, "ramp", cli.Floats(0, 1_000_000))
	fs.DurationVar(&f.Duration, "duration", 0, "how long to measure once every listener started")
	cli.Ranged(fs, "duration", cli.Durations(time.Millisecond, 24*time.Hour))
	fs.Float64Var(&f.Freeze, "freeze", 0, "fraction of listeners to freeze (0 to 1)")
	cli.Ranged(fs, "freeze", cli.Floats(0, 1))
	fs.DurationVar(&f.FreezeAt, "freeze-at", 0, "when to freeze, from the start of the measurement")
	cli.Ranged(fs, "freeze-at", cli.Durations(0, 24*time.Hour))
	fs.DurationVar(&f.FreezeFor, "freeze-for", 0, "thaw the frozen listeners this long after they froze (0: frozen to the end, reported apart)")
	cli.Ranged(fs, "freeze-for", cli.Durations(0, 24*time.Hour))
	fs.DurationVar(&f.Silence, "silence", client.DefaultSilence, "a listener with no new group, or no next frame of one, this long presumes its relay dead (with --reconnect it reconnects); also how recent its last frame must be at the end not to count as silent")
	cli.Ranged(fs, "silence", cli.Durations(time.Millisecond, time.Hour))
	fs.DurationVar(&f.Late, "late", time.Second, "a frame older than this on arrival is late")
	cli.Ranged(fs, "late", cli.Durations(time.Millisecond, time.Hour))
	fs.IntVar(&f.Shards, "shards", 0, "UDP sockets the listeners share; 0 means 32")
	cli.Ranged(fs, "shards", cli.Ints(0, 4096))
	fs.BoolVar(&f.JSON, "json", false, "print the report as JSON")
	fs.BoolVar(&f.Reconnect, "reconnect", false, "a listener whose session or subscription ends resolves, reconnects and resubscribes")
	fs.DurationVar(&f.IdleTimeout, "idle-timeout", 30*time.Second, "QUIC idle timeout: how soon a listener notices a relay gone silent")
	cli.Ranged(fs, "idle-timeout", cli.Durations(time.Millisecond, time.Hour))
	fs.BoolVar(&f.AckFrequency, "ack-frequency", true, "listeners support the QUIC ACK frequency extension, so the relay may ask them to acknowledge every other audio packet; false acknowledges each, as listeners whose QUIC lacks it (Chromium's)")
	fs.StringVar(&f.LogLevel, "log-level", "warn", "debug, info, warn or error")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		f.Changed = fs.Changed
		return f.Run(cmd.Context(), ios.Out, ios.ErrOut)
	}
	return cmd
}

// Help texts of flags that several commands declare.
const (
	tokenFileHelp      = "file holding the token to present (?jwt=), as from fleet token or relay token: keeps it off the command line"
	trustHTTPHashHelp  = "for an http:// URL on another host, fetch its certificate hash over plain HTTP and pin it: this trusts every network between here and the relay (anyone on the path can swap the hash); prefer URL#spki=HEX or --router"
	insecureRouterHelp = "allow an http:// router that is not on loopback: its answers, relay certificate hashes included, come in clear text, so this trusts every network between here and the router"
)
