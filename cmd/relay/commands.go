// Command relay is the relayfleet relay. `relay serve`
// runs the moq-lite relay (cluster-linked with --upstream, under a memory
// budget), `relay router` hands new listeners the relay process with the
// most headroom, `relay token` signs access tokens, `relay publish` and
// `relay listen` are test clients, `relay loadgen` generates and measures
// listener load, `relay keygen` and `relay pin` make a TLS key and print
// its SPKI pin, and `relay version` prints the build's version. main
// (main.go) only wires Execute to the process: signals, arguments, streams.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
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

func badUsage(format string, args ...any) error { return cli.Usagef(format, args...) }

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
		loadgenCmd(ios), keygenCmd(ios), pinCmd(ios))
	return root
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, badUsage("flag --log-level: %q is not debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// serveCmd is relay serve: the relay, until its context ends.
func serveCmd(ios *cli.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "serve", Short: "run the moq-lite relay", Args: cli.NoArgs,
		Long: `relay serve --listen HOST:PORT runs the moq-lite relay on UDP (QUIC, WebTransport) and TCP
(HTTP, WebSocket): with certificate files (--cert and --key, re-read when they change or on
SIGHUP), self-signed certificates for a key (--tls-key), or certificates from an ACME CA
(--acme-domain); tokens checked with --auth-key; broadcasts not published here pulled from
--upstream relays; sessions admitted under --memory-budget and --max-listeners.`}
	fs := cmd.Flags()
	listenAddr := fs.String("listen", "", "HOST:PORT for UDP (QUIC, WebTransport) and TCP (HTTP, WebSocket)")
	certFile := fs.String("cert", "", "TLS certificate chain (PEM), re-read when it changes or on SIGHUP")
	keyFile := fs.String("key", "", "TLS private key (PEM) of --cert")
	tlsKey := fs.String("tls-key", "", "ECDSA P-256 key (PEM PKCS #8, from relay keygen) for the self-signed certificates: the SPKI pin stays")
	acmeDomain := fs.String("acme-domain", "", "get the certificate for this DNS name from an ACME CA (Let's Encrypt by default)")
	acmeEmail := fs.String("acme-email", "", "ACME account contact address")
	acmeCA := fs.String("acme-ca", "", "ACME directory URL (https://); default Let's Encrypt")
	acmeCARoot := fs.String("acme-ca-root", "", "PEM file with the root(s) that verify the ACME CA's HTTPS endpoint")
	acmeDir := fs.String("acme-dir", "", "directory for the ACME account, keys and certificates")
	authKey := fs.String("auth-key", "", "file with the token signing keys: one per line, KEY or KEY until=RFC3339")
	var publicListen prefixList
	fs.Var(&publicListen, "public-listen", "broadcast path prefix anyone may listen under without a token (repeatable, comma-separated); needs --auth-key")
	udpBuffer := fs.String("udp-buffer", strconv.Itoa(relay.DefaultUDPBuffer), "UDP buffer size to ask for, in bytes (suffixes KiB, MiB)")
	sendBatch := fs.Int("send-batch", relay.DefaultSendBatch, "most QUIC packets, across connections, sent in one sendmmsg (64 batches them); 1, the default, sends each with its own sendmsg")
	cli.Ranged(fs, "send-batch", cli.Ints(1, 1024))
	ptoAckDelay := fs.Duration("pto-ack-delay", 0, "least time the probe timeout allows for a listener's ACK (0: the listener's max_ack_delay); larger probes fewer packets that were not lost, and lost ones later: a dropped frame waits for the next one (docs/relay.md)")
	cli.Ranged(fs, "pto-ack-delay", cli.Durations(0, relay.MaxAckDelay))
	ptoWaits := fs.Bool("pto-waits-for-reads", true, "hold a listener's probe timeout back (10 ms at a time, at most 100 ms) while the relay has datagrams it has not read: its ACK may be among them; false probes at the deadline, as quic-go does")
	ackThreshold := fs.Int("ack-threshold", relay.DefaultAckThreshold, "ack-eliciting packets the relay receives before it acknowledges at once instead of waiting up to --ack-delay; a listener's ACKs carry stream credit, so 2 (quic-go's) sends ACK-only packets")
	cli.Ranged(fs, "ack-threshold", cli.Ints(1, relay.MaxAckThreshold))
	ackDelay := fs.Duration("ack-delay", relay.DefaultAckDelay, "longest the relay delays a QUIC acknowledgement (max_ack_delay, advertised to peers); above the audio's packet interval, ACKs ride on audio packets; 25ms is quic-go's default")
	cli.Ranged(fs, "ack-delay", cli.Durations(time.Millisecond, relay.MaxAckDelay))
	listenerAckDelay := fs.Duration("listener-ack-delay", relay.DefaultListenerAckDelay, "max_ack_delay the relay asks of listeners whose QUIC supports the ACK frequency extension (relayfleet's client and load generator do), with --listener-ack-threshold; above the audio's packet interval they acknowledge every other packet instead of each one; 0 asks nothing (docs/relay.md)")
	cli.Ranged(fs, "listener-ack-delay", cli.Durations(0, relay.MaxAckDelay))
	listenerAckThreshold := fs.Int("listener-ack-threshold", relay.DefaultListenerAckThreshold, "ack-eliciting packets a listener asked with --listener-ack-delay may leave unacknowledged before it acknowledges at once (1: every other packet)")
	cli.Ranged(fs, "listener-ack-threshold", cli.Ints(1, relay.MaxAckThreshold))
	sendQueue := fs.Bool("send-queue", false, "write each connection's packets from a goroutine of its own (quic-go's send queue), and let each connection's loop do all of its work, instead of the goroutine that made them (the track's writer, the socket's reader): one goroutine more per listener; for comparison")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	memBudget := fs.String("memory-budget", "", "memory budget in bytes (suffixes KiB, MiB, GiB); default: the cgroup memory limit")
	maxListeners := fs.Int("max-listeners", 0, "cap on open sessions; 0 means none")
	cli.Ranged(fs, "max-listeners", cli.Ints(0, 10_000_000))
	maxPerAddress := fs.Int("max-sessions-per-address", relay.DefaultMaxSessionsPerAddress, "cap on sessions open from one source address (an IPv4 address, an IPv6 /64), on every transport; 0 means none (behind a proxy, or for a load generator)")
	cli.Ranged(fs, "max-sessions-per-address", cli.Ints(0, 10_000_000))
	reapAfter := fs.Duration("reap-after", relay.DefaultReapAfter, "end a QUIC or WebSocket session that received nothing for this long (a WebSocket one is pinged first)")
	cli.Ranged(fs, "reap-after", cli.Durations(time.Second, 24*time.Hour))
	withPprof := fs.Bool("pprof", false, "serve /debug/pprof/ on the TCP port")
	resetSecret := fs.String("stateless-reset-secret", "", "file with at least 32 random bytes (mode 0600 or 0400, e.g. %d/reset-secret under systemd): the QUIC stateless reset key for the port derives from it, so a restarted relay resets its predecessor's connections at once")
	shedRate := fs.Float64("shed-rate", relay.DefaultShedRate, "sessions per second POST /shed and a graceful stop (SIGTERM) send going-away to")
	cli.Ranged(fs, "shed-rate", cli.Floats(0.01, relay.MaxShedRate))
	shutdownGrace := fs.Duration("shutdown-grace", relay.DefaultShutdownGrace, "on SIGTERM, stop admitting and send every session going-away within this long, then exit; 0s closes sessions at once")
	cli.Ranged(fs, "shutdown-grace", cli.Durations(0, 10*time.Minute))
	noticeGrace := fs.Duration("notice-grace", relay.DefaultNoticeGrace, "POST /shed and a graceful stop (within half of --shutdown-grace) send each session a going-away notice datagram and serve it this long before closing it, so that clients move first; 0s closes at once")
	cli.Ranged(fs, "notice-grace", cli.Durations(0, relay.MaxNoticeGrace))
	upstream := fs.String("upstream", "", "comma-separated relay URLs to pull broadcasts from that are not published here; URL#spki=HEX pins the origin's key (needed for an http:// origin not on loopback)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx, stderr := cmd.Context(), ios.ErrOut
		var upstreams []string
		if *upstream != "" {
			for _, u := range strings.Split(*upstream, ",") {
				if _, err := checkURL([]string{u}); err != nil {
					return badUsage("--upstream %q: want http:// or https:// URLs, comma-separated", *upstream)
				}
				if err := relay.CheckUpstream(u); err != nil {
					return badUsage("--upstream: %v", err)
				}
				upstreams = append(upstreams, u)
			}
		}
		if *listenAddr == "" {
			return badUsage("--listen is required (HOST:PORT)")
		}
		if _, port, err := net.SplitHostPort(*listenAddr); err != nil {
			return badUsage("--listen %q: want HOST:PORT", *listenAddr)
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return badUsage("--listen %q: port must be a number from 0 to 65535", *listenAddr)
		}
		if len(publicListen) > 0 && *authKey == "" {
			return badUsage("--public-listen needs --auth-key (without a key everything is public)")
		}
		if err := checkCertFlags(fs); err != nil {
			return err
		}
		buf, err := parseBytes(*udpBuffer)
		if err != nil || buf <= 0 {
			return badUsage("--udp-buffer %q: want a positive number of bytes", *udpBuffer)
		}
		var budget int64
		if *memBudget != "" {
			b, err := parseBytes64(*memBudget)
			if err != nil || b <= 0 {
				return badUsage("--memory-budget %q: want a positive number of bytes", *memBudget)
			}
			budget = b
		}
		logger, err := newLogger(stderr, *logLevel)
		if err != nil {
			return err
		}
		cfg := relay.Config{
			Listen: *listenAddr, UDPBuffer: buf, Upstreams: upstreams, Logger: logger,
			MemoryBudget: budget, MaxSessions: *maxListeners, MaxSessionsPerAddress: *maxPerAddress, ReapAfter: *reapAfter, Pprof: *withPprof,
			ShedRate: *shedRate, ShutdownGrace: *shutdownGrace, NoticeGrace: *noticeGrace, SendBatch: *sendBatch,
			AckDelay: *ackDelay, AckThreshold: *ackThreshold, PTOAckDelay: *ptoAckDelay, PTOIgnoresReads: !*ptoWaits, SendQueue: *sendQueue,
			ListenerAckDelay: *listenerAckDelay, ListenerAckThreshold: *listenerAckThreshold,
		}
		if *listenerAckDelay == 0 {
			cfg.ListenerAckDelay = -1 // Config: negative asks nothing
		}
		if *noticeGrace == 0 {
			cfg.NoticeGrace = -1 // Config: negative means none
		}
		if *maxPerAddress == 0 {
			cfg.MaxSessionsPerAddress = -1 // Config: negative means no cap
		}
		if *shutdownGrace == 0 {
			cfg.ShutdownGrace = -1 // Config: negative means none
		}
		if *resetSecret != "" {
			if cfg.ResetSecret, err = relay.LoadResetSecret(*resetSecret); err != nil {
				return badUsage("--stateless-reset-secret: %v", err)
			}
		}
		cfg.CertFile, cfg.KeyFile = *certFile, *keyFile
		if *tlsKey != "" {
			if cfg.TLSKey, err = relay.LoadTLSKey(*tlsKey); err != nil {
				return fmt.Errorf("--tls-key: %w", err)
			}
		}
		if *acmeDomain != "" {
			cfg.ACME = &relay.ACMEConfig{Domain: *acmeDomain, Email: *acmeEmail, CA: *acmeCA, Dir: *acmeDir}
			if *acmeCARoot != "" {
				if cfg.ACME.CARoots, err = loadRoots(*acmeCARoot); err != nil {
					return fmt.Errorf("--acme-ca-root: %w", err)
				}
			}
		}
		if *authKey != "" {
			auth, err := loadAuth(*authKey)
			if err != nil {
				return err
			}
			cfg.Auth = auth.WithPublicListen(publicListen)
		}
		// SIGHUP re-reads the certificate files now.
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		return relay.Run(ctx, cfg, func(r *relay.Relay) {
			go func() {
				for {
					select {
					case <-ctx.Done():
						return
					case <-hup:
						if *certFile == "" {
							logger.Info("SIGHUP: no certificate files to re-read")
							continue
						}
						if err := r.ReloadCertificate(); err == nil {
							logger.Info("SIGHUP: certificate files re-read", "certificate_sha256", r.CertificateHash())
						}
					}
				}
			}()
		})
	}
	return cmd
}

// prefixList is a repeatable flag of comma-separated broadcast path
// prefixes.
type prefixList []string

func (p *prefixList) String() string { return strings.Join(*p, ",") }

// Type names the value in help text.
func (p *prefixList) Type() string { return "prefixes" }

func (p *prefixList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			return errors.New("empty prefix (to make everything public, give \"/\")")
		}
		*p = append(*p, s)
	}
	return nil
}

// loadAuth reads a key file into an Authenticator; a file whose every key
// is past its until is an error, since no token could then verify.
func loadAuth(file string) (*relay.Authenticator, error) {
	keys, err := relay.LoadAuthKeys(file)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	live := false
	for _, k := range keys {
		live = live || k.Until.IsZero() || now.Before(k.Until)
	}
	if !live {
		return nil, fmt.Errorf("auth key %s: every key is past its until time", file)
	}
	return relay.NewAuthenticatorKeys(keys)
}

// parseBytes64 is parseBytes for sizes beyond 2 GiB.
func parseBytes64(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if n > (1<<62)/mult {
		return 0, errors.New("too large")
	}
	return n * mult, nil
}

func parseBytes(s string) (int, error) {
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, err
	}
	if n > (1<<31-1)/mult {
		return 0, errors.New("too large")
	}
	return n * mult, nil
}

// tokenCmd is relay token: it prints a signed access token.
func tokenCmd(ios *cli.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "token --key FILE (--publish PREFIX | --subscribe PREFIX)", Short: "sign an access token with a key file", Args: cli.NoArgs,
		Long: "relay token prints a token signed with the key in --key FILE that may publish, or subscribe, under a broadcast path prefix."}
	fs := cmd.Flags()
	keyFile := fs.String("key", "", "file with the token signing key")
	pub := fs.String("publish", "", "broadcast path prefix the token may publish under")
	sub := fs.String("subscribe", "", "broadcast path prefix the token may subscribe under")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid")
	cli.Ranged(fs, "ttl", cli.Durations(time.Second, 365*24*time.Hour))
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		stdout := ios.Out
		set := fs.Changed
		if *keyFile == "" {
			return badUsage("--key is required")
		}
		if set("publish") == set("subscribe") {
			return badUsage("give exactly one of --publish PREFIX or --subscribe PREFIX")
		}
		auth, err := loadAuth(*keyFile)
		if err != nil {
			return err
		}
		tok, err := auth.NewToken(*pub, *sub, set("publish"), set("subscribe"), *ttl)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, tok)
		return nil
	}
	return cmd
}

func checkURL(pos []string) (string, error) {
	if len(pos) != 1 {
		return "", badUsage("want exactly one URL argument, got %d", len(pos))
	}
	u := pos[0]
	if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		return "", badUsage("URL %q: must start with https:// or http://", u)
	}
	return u, nil
}

const tokenFileHelp = "file holding the token to present (?jwt=), as from fleet token or relay token: keeps it off the command line"

// readTokenFile reads a token from file (flag names the flag, for errors):
// one word, at most 8 KiB.
func readTokenFile(flag, file string) (string, error) {
	if file == "" {
		return "", nil
	}
	f, err := os.Open(file)
	if err != nil {
		return "", badUsage("--%s: %v", flag, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 8<<10+1))
	if err != nil {
		return "", badUsage("--%s %s: %v", flag, file, err)
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case len(b) > 8<<10:
		return "", badUsage("--%s %s: longer than 8 KiB; want one token", flag, file)
	case tok == "":
		return "", badUsage("--%s %s: empty; want one token", flag, file)
	case strings.ContainsAny(tok, " \t\r\n&#?"):
		return "", badUsage("--%s %s: want one token (no spaces, lines, '&', '#' or '?')", flag, file)
	}
	return tok, nil
}

const trustHTTPHashHelp = "for an http:// URL on another host, fetch its certificate hash over plain HTTP and pin it: this trusts every network between here and the relay (anyone on the path can swap the hash); prefer URL#spki=HEX or --router"

// checkHashTrust refuses an http:// relay URL on another host whose
// certificate hash would be fetched in clear text, unless pinned (#spki=,
// a known hash) or trusted (--trust-http-hash).
func checkHashTrust(raw, hash string, trust bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return badUsage("URL %q: %v", raw, err)
	}
	pin, err := client.URLPin(u)
	if err != nil {
		return badUsage("URL %q: %v", raw, err)
	}
	if u.Scheme != "http" || pin != "" || hash != "" {
		return nil
	}
	if err := client.CheckHashFetch(u, trust); err != nil {
		return badUsage("URL %s: its certificate hash would come over plain HTTP from a host that is not loopback; pin the relay's key (URL#spki=HEX, from relay pin), ask a router (--router), or pass --trust-http-hash to trust the network", raw)
	}
	return nil
}

// routerOptions checks --router, --router-spki and --insecure-router.
func routerOptions(router, spki string, insecure bool) (client.RouterOptions, error) {
	o := client.RouterOptions{SPKI: spki, Insecure: insecure}
	if !strings.HasPrefix(router, "http://") && !strings.HasPrefix(router, "https://") {
		return o, badUsage("--router %q: must start with https:// or http://", router)
	}
	if spki != "" {
		if err := client.CheckHash(spki); err != nil {
			return o, badUsage("--router-spki: %v", err)
		}
	}
	if _, err := client.NewRouterClient(router, o); err != nil {
		switch {
		case errors.Is(err, client.ErrClearTextRouter):
			return o, badUsage("--router %s: an http:// router that is not on loopback answers in clear text, relay certificate hashes included; use https:// (with --router-spki HEX for a self-signed router) or pass --insecure-router to trust the network", router)
		case spki != "":
			return o, badUsage("--router-spki: %v", err)
		default:
			return o, badUsage("--router: %v", err)
		}
	}
	return o, nil
}

const insecureRouterHelp = "allow an http:// router that is not on loopback: its answers, relay certificate hashes included, come in clear text, so this trusts every network between here and the router"

// publishCmd is relay publish: a test publisher.
func publishCmd(ios *cli.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "publish URL --name BROADCAST", Short: "publish test frames or an Ogg Opus file to a relay",
		Args: func(_ *cobra.Command, args []string) error { _, err := checkURL(args); return err },
		Long: `relay publish URL --name BROADCAST publishes test frames (--paced: load-generator frames) or,
with --ogg FILE (- for stdin), the Opus packets of an Ogg Opus file to the relay at URL.`}
	fs := cmd.Flags()
	name := fs.String("name", "", "broadcast name")
	track := fs.String("track", "audio", "track name")
	interval := fs.Duration("interval", 120*time.Millisecond, "time between groups")
	cli.Ranged(fs, "interval", cli.Durations(time.Millisecond, time.Minute))
	frames := fs.Int("frames", 1, "frames per group")
	cli.Ranged(fs, "frames", cli.Ints(1, 1000))
	size := fs.Int("size", 160, "bytes per frame")
	cli.Ranged(fs, "size", cli.Ints(16, 1<<20))
	groups := fs.Int("groups", 0, "groups to send; 0 means until interrupted")
	cli.Ranged(fs, "groups", cli.Ints(0, 1_000_000_000))
	transport := fs.String("transport", client.TransportQUIC, "quic or websocket")
	paced := fs.Bool("paced", false, "write load-generator frames (group, index, send time), one every --interval, --frames to a group")
	ogg := fs.String("ogg", "", "publish the Opus packets of an Ogg Opus `FILE` (- for stdin), one packet to a group")
	oggPace := fs.Bool("ogg-pace", false, "send --ogg packets in real time (default: for a file, not for -)")
	trustHash := fs.Bool("trust-http-hash", false, trustHTTPHashHelp)
	tokenFile := fs.String("token-file", "", tokenFileHelp)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx, stdout, stderr := cmd.Context(), ios.Out, ios.ErrOut
		u := args[0]
		tok, err := readTokenFile("token-file", *tokenFile)
		if err != nil {
			return err
		}
		if u, err = client.WithToken(u, tok); err != nil {
			return err
		}
		set := fs.Changed
		if set("ogg") {
			var other []string
			for _, f := range []string{"paced", "frames", "size", "interval", "groups"} {
				if set(f) {
					other = append(other, "--"+f)
				}
			}
			switch {
			case *name == "":
				return badUsage("--name is required")
			case *ogg == "":
				return badUsage("--ogg: give a file, or - for stdin")
			case len(other) > 0:
				return badUsage("--ogg excludes %s (--paced, --frames, --size, --interval and --groups are for generated frames)", strings.Join(other, ", "))
			case *transport != client.TransportQUIC && *transport != client.TransportWebSocket:
				return badUsage("--transport %q: want quic or websocket", *transport)
			}
			if err := checkHashTrust(u, "", *trustHash); err != nil {
				return err
			}
			pace := *ogg != "-"
			if set("ogg-pace") {
				pace = *oggPace
			}
			in := ios.In
			if *ogg != "-" {
				f, err := os.Open(*ogg)
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			logger, _ := newLogger(stderr, "info")
			return client.RunPublishOgg(ctx, u, &client.Options{Logger: logger, Transport: *transport, TrustHTTPHash: *trustHash}, client.OggPublishOptions{
				Broadcast: *name, Track: *track, Input: in, Pace: pace,
			}, stdout)
		}
		switch {
		case set("ogg-pace"):
			return badUsage("--ogg-pace needs --ogg")
		case *name == "":
			return badUsage("--name is required")
		case *paced && *transport != client.TransportQUIC:
			return badUsage("--paced: only with --transport quic")
		case *transport != client.TransportQUIC && *transport != client.TransportWebSocket:
			return badUsage("--transport %q: want quic or websocket", *transport)
		}
		if err := checkHashTrust(u, "", *trustHash); err != nil {
			return err
		}
		logger, _ := newLogger(stderr, "info")
		if *paced {
			return loadgen.Publish(ctx, u, loadgen.PublishOptions{
				Broadcast: *name, Track: *track, FrameTime: *interval, FramesPerGroup: *frames, FrameSize: *size, Logger: logger,
				TrustHTTPHash: *trustHash,
			})
		}
		return client.RunPublish(ctx, u, &client.Options{Logger: logger, Transport: *transport, TrustHTTPHash: *trustHash}, client.PublishOptions{
			Broadcast: *name, Track: *track, Interval: *interval, FramesPerGroup: *frames, FrameSize: *size, Groups: *groups,
		}, stdout)
	}
	return cmd
}

// listenCmd is relay listen: a test listener.
func listenCmd(ios *cli.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "listen (URL | --router URL) --name BROADCAST", Short: "listen to a broadcast and check its frames",
		Args: listenArgs,
		Long: `relay listen (URL | --router URL) --name BROADCAST subscribes to a broadcast at the relay at URL,
or at the relay a router hands out (and, when it goes silent, another), and checks its frames.`}
	fs := cmd.Flags()
	name := fs.String("name", "", "broadcast name")
	track := fs.String("track", "audio", "track name")
	groups := fs.Int("groups", 0, "stop after this many groups; 0 means until interrupted")
	cli.Ranged(fs, "groups", cli.Ints(0, 1_000_000_000))
	check := fs.Int("check", 0, "check frames are `relay publish` patterns of this size")
	cli.Ranged(fs, "check", cli.Ints(0, 1<<20))
	verbose := fs.BoolP("v", "v", false, "print one line per group")
	transport := fs.String("transport", client.TransportQUIC, "quic or websocket")
	router := fs.String("router", "", "router base URL: ask its /route for the relay and its certificate hash instead of giving a URL")
	routerSPKI := fs.String("router-spki", "", "SHA-256 (hex) of the https:// router's public key, checked instead of the CAs")
	insecureRouter := fs.Bool("insecure-router", false, insecureRouterHelp)
	trustHash := fs.Bool("trust-http-hash", false, trustHTTPHashHelp)
	tokenFile := fs.String("token-file", "", tokenFileHelp)
	silence := fs.Duration("silence", client.DefaultSilence, "reconnect when no group comes for this long (through the router, avoiding the relay that went silent); 0 means wait forever")
	cli.Ranged(fs, "silence", cli.Durations(0, time.Hour))
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx, stdout, stderr := cmd.Context(), ios.Out, ios.ErrOut
		tok, err := readTokenFile("token-file", *tokenFile)
		if err != nil {
			return err
		}
		var u string
		if len(args) > 0 {
			u = args[0]
		}
		switch {
		case *name == "":
			return badUsage("--name is required")
		case *transport != client.TransportQUIC && *transport != client.TransportWebSocket:
			return badUsage("--transport %q: want quic or websocket", *transport)
		case *router == "" && (*routerSPKI != "" || *insecureRouter):
			return badUsage("--router-spki and --insecure-router need --router")
		}
		logger, _ := newLogger(stderr, "info")
		dial := &client.Options{Transport: *transport, TrustHTTPHash: *trustHash, Logger: logger,
			KeepAlive: client.KeepAlivePeriod(*silence)}
		ro := client.ResolverOptions{URL: u, Broadcast: *name, Token: tok, TrustHTTPHash: *trustHash}
		if *router != "" {
			if ro.RouterOptions, err = routerOptions(*router, *routerSPKI, *insecureRouter); err != nil {
				return err
			}
			ro.Router = *router
		} else if err := checkHashTrust(u, "", *trustHash); err != nil {
			return err
		}
		res, err := client.NewResolver(ro)
		if err != nil {
			return badUsage("%v", err)
		}
		// One line per reconnect: through the router to another relay, or
		// to the same URL (a relay restarted in place).
		return client.Listen(ctx, res, dial, client.ListenOptions{
			Broadcast: *name, Track: *track, Groups: *groups, Check: *check, Verbose: *verbose,
			Silence: *silence, Reconnect: true,
		}, stdout)
	}
	return cmd
}

// listenArgs: a URL, or none with --router.
func listenArgs(cmd *cobra.Command, args []string) error {
	if router, _ := cmd.Flags().GetString("router"); router != "" {
		if len(args) > 0 {
			return badUsage("give a URL or --router, not both")
		}
		return nil
	}
	_, err := checkURL(args)
	return err
}

// loadgenCmd is relay loadgen: listener load, measured.
func loadgenCmd(ios *cli.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "loadgen (--url URL | --router URL) --broadcast NAME --listeners N --duration D",
		Short: "open listener sessions and measure what they receive", Args: cli.NoArgs,
		Long: `relay loadgen opens --listeners sessions to a broadcast (at --url, or at the relays a --router
hands out), started --ramp per second, measures what they receive for --duration, and reports it.`}
	fs := cmd.Flags()
	rawURL := fs.String("url", "", "relay URL (http:// or https://)")
	router := fs.String("router", "", "router base URL: ask its /route for each listener's relay and its certificate hash")
	routerSPKI := fs.String("router-spki", "", "SHA-256 (hex) of the https:// router's public key, checked instead of the CAs")
	insecureRouter := fs.Bool("insecure-router", false, insecureRouterHelp)
	certHash := fs.String("certificate-sha256", "", "SHA-256 (hex) the --url relay's certificate must have, known from a trusted channel (nothing is fetched)")
	trustHash := fs.Bool("trust-http-hash", false, trustHTTPHashHelp)
	tokenFile := fs.String("token-file", "", tokenFileHelp+"; every listener presents it")
	name := fs.String("broadcast", "", "broadcast name")
	track := fs.String("track", "audio", "track name")
	listeners := fs.Int("listeners", 0, "listener sessions to open")
	cli.Ranged(fs, "listeners", cli.Ints(1, 1_000_000))
	ramp := fs.Float64("ramp", 0, "listeners started per second; 0 means as fast as possible")
	cli.Ranged(fs, "ramp", cli.Floats(0, 1_000_000))
	duration := fs.Duration("duration", 0, "how long to measure once every listener started")
	cli.Ranged(fs, "duration", cli.Durations(time.Millisecond, 24*time.Hour))
	freeze := fs.Float64("freeze", 0, "fraction of listeners to freeze (0 to 1)")
	cli.Ranged(fs, "freeze", cli.Floats(0, 1))
	freezeAt := fs.Duration("freeze-at", 0, "when to freeze, from the start of the measurement")
	cli.Ranged(fs, "freeze-at", cli.Durations(0, 24*time.Hour))
	freezeFor := fs.Duration("freeze-for", 0, "thaw the frozen listeners this long after they froze (0: frozen to the end, reported apart)")
	cli.Ranged(fs, "freeze-for", cli.Durations(0, 24*time.Hour))
	silence := fs.Duration("silence", client.DefaultSilence, "a listener with no new group, or no next frame of one, this long presumes its relay dead (with --reconnect it reconnects); also how recent its last frame must be at the end not to count as silent")
	cli.Ranged(fs, "silence", cli.Durations(time.Millisecond, time.Hour))
	late := fs.Duration("late", time.Second, "a frame older than this on arrival is late")
	cli.Ranged(fs, "late", cli.Durations(time.Millisecond, time.Hour))
	shards := fs.Int("shards", 0, "UDP sockets the listeners share; 0 means 32")
	cli.Ranged(fs, "shards", cli.Ints(0, 4096))
	asJSON := fs.Bool("json", false, "print the report as JSON")
	reconnect := fs.Bool("reconnect", false, "a listener whose session or subscription ends resolves, reconnects and resubscribes")
	idleTimeout := fs.Duration("idle-timeout", 30*time.Second, "QUIC idle timeout: how soon a listener notices a relay gone silent")
	cli.Ranged(fs, "idle-timeout", cli.Durations(time.Millisecond, time.Hour))
	ackFrequency := fs.Bool("ack-frequency", true, "listeners support the QUIC ACK frequency extension, so the relay may ask them to acknowledge every other audio packet; false acknowledges each, as listeners whose QUIC lacks it (Chromium's)")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx, stdout, stderr := cmd.Context(), ios.Out, ios.ErrOut
		set := fs.Changed
		switch {
		case (*rawURL == "") == (*router == ""):
			return badUsage("give exactly one of --url URL or --router URL")
		case *rawURL != "" && !strings.HasPrefix(*rawURL, "http://") && !strings.HasPrefix(*rawURL, "https://"):
			return badUsage("--url %q: must start with https:// or http://", *rawURL)
		case *router != "" && !strings.HasPrefix(*router, "http://") && !strings.HasPrefix(*router, "https://"):
			return badUsage("--router %q: must start with https:// or http://", *router)
		case *router == "" && (*routerSPKI != "" || *insecureRouter):
			return badUsage("--router-spki and --insecure-router need --router")
		case *router != "" && *certHash != "":
			return badUsage("--certificate-sha256 is for --url; the router answers each relay's hash")
		case *name == "":
			return badUsage("--broadcast is required")
		case *listeners < 1:
			return badUsage("--listeners %d: must be at least 1", *listeners)
		case *duration <= 0:
			return badUsage("--duration is required and must be positive")
		case set("freeze-at") && *freeze == 0:
			return badUsage("--freeze-at needs --freeze")
		case set("freeze-for") && *freeze == 0:
			return badUsage("--freeze-for needs --freeze")
		case *freezeAt > *duration:
			return badUsage("--freeze-at %v: must be within --duration", *freezeAt)
		}
		if *certHash != "" {
			if err := client.CheckHash(*certHash); err != nil {
				return badUsage("--certificate-sha256: %v", err)
			}
		}
		if *router != "" {
			if _, err := routerOptions(*router, *routerSPKI, *insecureRouter); err != nil {
				return err
			}
		} else if err := checkHashTrust(*rawURL, *certHash, *trustHash); err != nil {
			return err
		}
		logger, err := newLogger(stderr, *logLevel)
		if err != nil {
			return err
		}
		tok, err := readTokenFile("token-file", *tokenFile)
		if err != nil {
			return err
		}
		rep, err := loadgen.Run(ctx, loadgen.Options{
			Token: tok,
			URL:   *rawURL, Router: *router, Broadcast: *name, Track: *track, Listeners: *listeners, Ramp: *ramp,
			Duration: *duration, Freeze: *freeze, FreezeAt: *freezeAt, Late: *late, Shards: *shards, Logger: logger,
			Reconnect: *reconnect, IdleTimeout: *idleTimeout, CertificateHash: *certHash, TrustHTTPHash: *trustHash, NoAckFrequency: !*ackFrequency,
			FreezeFor: *freezeFor, Silence: *silence,
			RouterSPKI: *routerSPKI, InsecureRouter: *insecureRouter,
		})
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(rep)
		}
		rep.WriteText(stdout)
		return nil
	}
	return cmd
}

// routerCmd is relay router: GET /route, until its context ends.
func routerCmd(ios *cli.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "router --listen HOST:PORT --relays FILE",
		Short: "hand new listeners the relay process with the most headroom (GET /route)", Args: cli.NoArgs,
		Long: `relay router --listen HOST:PORT --relays FILE answers GET /route with the relay process of FILE
with the most headroom, and its certificate hash; SIGHUP reloads FILE.`}
	fs := cmd.Flags()
	listenAddr := fs.String("listen", "", "HOST:PORT to serve GET /route on")
	relaysFile := fs.String("relays", "", "relays file (JSON), reloaded when it changes or on SIGHUP")
	poll := fs.Duration("poll", time.Second, "how often to read each relay's /stats")
	cli.Ranged(fs, "poll", cli.Durations(10*time.Millisecond, time.Minute))
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	certFile := fs.String("cert", "", "serve over TLS with this certificate chain (PEM), re-read when it changes")
	keyFile := fs.String("key", "", "the --cert private key (PEM)")
	tlsKey := fs.String("tls-key", "", "serve over TLS with self-signed certificates for this key (relay keygen); clients pin its SPKI (logged as spki_sha256) with --router-spki")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx, stderr := cmd.Context(), ios.ErrOut
		switch {
		case *listenAddr == "":
			return badUsage("--listen is required (HOST:PORT)")
		case *relaysFile == "":
			return badUsage("--relays is required")
		case (*certFile == "") != (*keyFile == ""):
			return badUsage("--cert and --key must be given together")
		case *certFile != "" && *tlsKey != "":
			return badUsage("give --cert/--key or --tls-key, not both")
		}
		listenHost, _, err := net.SplitHostPort(*listenAddr)
		if err != nil {
			return badUsage("--listen %q: want HOST:PORT", *listenAddr)
		}
		logger, err := newLogger(stderr, *logLevel)
		if err != nil {
			return err
		}
		var tlsConf *tls.Config
		tlsAttrs := []any{"tls", false}
		switch {
		case *certFile != "":
			if tlsConf, err = router.CertFilesTLS(*certFile, *keyFile); err != nil {
				return err
			}
			tlsAttrs = []any{"tls", "certificate"}
		case *tlsKey != "":
			key, err := relay.LoadTLSKey(*tlsKey)
			if err != nil {
				return fmt.Errorf("--tls-key: %w", err)
			}
			if tlsConf, err = router.SelfSignedTLS(key, []string{listenHost}, nil); err != nil {
				return err
			}
			spki, err := relay.SPKIHash(key.Public())
			if err != nil {
				return err
			}
			tlsAttrs = []any{"tls", "self-signed", "spki_sha256", spki}
		default:
			if h := listenHost; !client.IsLoopback(h) {
				logger.Warn("serving /route over plain HTTP on a non-loopback address: clients trust the network to deliver relay certificate hashes unchanged; give --cert/--key or --tls-key", "listen", *listenAddr)
			}
		}
		rt, err := router.New(router.Options{File: *relaysFile, Poll: *poll, Logger: logger})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *listenAddr)
		if err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		ln = router.LimitListener(ln, router.Limits{})
		if tlsConf != nil {
			ln = tls.NewListener(ln, tlsConf)
		}
		srv := rt.HTTPServer(router.Limits{})
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-ctx.Done():
					_ = srv.Close()
					return
				case <-hup:
					if err := rt.Reload(); err != nil {
						logger.Error("reload relays file; keeping the previous one", "err", err)
					}
				}
			}
		}()
		go rt.Run(ctx)
		logger.Info("router listening", append([]any{"addr", ln.Addr().String(), "relays", *relaysFile}, tlsAttrs...)...)
		err = srv.Serve(ln)
		<-done
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
	return cmd
}
