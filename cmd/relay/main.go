// Command relay is the relayfleet relay: `relay serve` runs the moq-lite
// relay, `relay token` signs access tokens, and `relay publish` and
// `relay listen` are test clients.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage:
  relay serve --listen HOST:PORT [--cert FILE --key FILE] [--auth-key FILE] [--udp-buffer BYTES] [--log-level LEVEL]
  relay token --key FILE (--publish PREFIX | --subscribe PREFIX) [--ttl 1h]
  relay publish URL --name BROADCAST [--track audio] [--interval 120ms] [--frames 1] [--size 160] [--groups 0]
  relay listen URL --name BROADCAST [--track audio] [--groups 0] [--check SIZE] [-v]
URLs are https://HOST:PORT/PATH (verified certificate) or http://HOST:PORT/PATH
(the certificate hash is fetched from /certificate.sha256 and pinned).
`

// usageError is bad command-line input: exit status 2, one line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func badUsage(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stderr)
	case "token":
		err = token(args[1:], stdout)
	case "publish":
		err = publish(ctx, args[1:], stdout, stderr)
	case "listen":
		err = listen(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		err = badUsage("unknown command %q (want serve, token, publish or listen)", args[0])
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "relay %s: %s\n", args[0], ue.msg)
		return 2
	default:
		fmt.Fprintf(stderr, "relay %s: %v\n", args[0], err)
		return 1
	}
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parse parses flags, allowing positional arguments before them, and
// returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, badUsage("see 'relay help'")
			}
			return nil, badUsage("%v", err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, badUsage("--log-level: %q is not debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("serve")
	listenAddr := fs.String("listen", "", "HOST:PORT for UDP (QUIC, WebTransport) and TCP (HTTP, WebSocket)")
	certFile := fs.String("cert", "", "TLS certificate chain (PEM)")
	keyFile := fs.String("key", "", "TLS private key (PEM)")
	authKey := fs.String("auth-key", "", "file with the token signing key")
	udpBuffer := fs.String("udp-buffer", strconv.Itoa(relay.DefaultUDPBuffer), "UDP buffer size to ask for, in bytes (suffixes KiB, MiB)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return badUsage("unexpected argument %q", pos[0])
	}
	if *listenAddr == "" {
		return badUsage("--listen is required (HOST:PORT)")
	}
	if _, port, err := net.SplitHostPort(*listenAddr); err != nil {
		return badUsage("--listen %q: want HOST:PORT", *listenAddr)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return badUsage("--listen %q: port must be a number from 0 to 65535", *listenAddr)
	}
	if (*certFile == "") != (*keyFile == "") {
		return badUsage("--cert and --key must be given together")
	}
	buf, err := parseBytes(*udpBuffer)
	if err != nil || buf <= 0 {
		return badUsage("--udp-buffer %q: want a positive number of bytes", *udpBuffer)
	}
	logger, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	cfg := relay.Config{Listen: *listenAddr, UDPBuffer: buf, Logger: logger}
	if *certFile != "" {
		cfg.Certificate, err = tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return fmt.Errorf("load certificate: %w", err)
		}
	}
	if *authKey != "" {
		cfg.AuthKey, err = relay.LoadAuthKey(*authKey)
		if err != nil {
			return err
		}
	}
	return relay.Run(ctx, cfg, nil)
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

func token(args []string, stdout io.Writer) error {
	fs := newFlags("token")
	keyFile := fs.String("key", "", "file with the token signing key")
	pub := fs.String("publish", "", "broadcast path prefix the token may publish under")
	sub := fs.String("subscribe", "", "broadcast path prefix the token may subscribe under")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return badUsage("unexpected argument %q", pos[0])
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *keyFile == "" {
		return badUsage("--key is required")
	}
	if set["publish"] == set["subscribe"] {
		return badUsage("give exactly one of --publish PREFIX or --subscribe PREFIX")
	}
	if *ttl <= 0 {
		return badUsage("--ttl %v: must be positive", *ttl)
	}
	key, err := relay.LoadAuthKey(*keyFile)
	if err != nil {
		return err
	}
	tok, err := relay.NewToken(key, *pub, *sub, set["publish"], set["subscribe"], *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
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

func publish(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("publish")
	name := fs.String("name", "", "broadcast name")
	track := fs.String("track", "audio", "track name")
	interval := fs.Duration("interval", 120*time.Millisecond, "time between groups")
	frames := fs.Int("frames", 1, "frames per group")
	size := fs.Int("size", 160, "bytes per frame")
	groups := fs.Int("groups", 0, "groups to send; 0 means until interrupted")
	transport := fs.String("transport", client.TransportQUIC, "quic or websocket")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	u, err := checkURL(pos)
	if err != nil {
		return err
	}
	switch {
	case *name == "":
		return badUsage("--name is required")
	case *interval <= 0:
		return badUsage("--interval %v: must be positive", *interval)
	case *frames < 1:
		return badUsage("--frames %d: must be at least 1", *frames)
	case *size < 16 || *size > 1<<20:
		return badUsage("--size %d: must be from 16 to 1048576", *size)
	case *groups < 0:
		return badUsage("--groups %d: must not be negative", *groups)
	case *transport != client.TransportQUIC && *transport != client.TransportWebSocket:
		return badUsage("--transport %q: want quic or websocket", *transport)
	}
	logger, _ := newLogger(stderr, "info")
	return client.RunPublish(ctx, u, &client.Options{Logger: logger, Transport: *transport}, client.PublishOptions{
		Broadcast: *name, Track: *track, Interval: *interval, FramesPerGroup: *frames, FrameSize: *size, Groups: *groups,
	}, stdout)
}

func listen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("listen")
	name := fs.String("name", "", "broadcast name")
	track := fs.String("track", "audio", "track name")
	groups := fs.Int("groups", 0, "stop after this many groups; 0 means until interrupted")
	check := fs.Int("check", 0, "check frames are `relay publish` patterns of this size")
	verbose := fs.Bool("v", false, "print one line per group")
	transport := fs.String("transport", client.TransportQUIC, "quic or websocket")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	u, err := checkURL(pos)
	if err != nil {
		return err
	}
	switch {
	case *name == "":
		return badUsage("--name is required")
	case *groups < 0:
		return badUsage("--groups %d: must not be negative", *groups)
	case *check < 0:
		return badUsage("--check %d: must not be negative", *check)
	case *transport != client.TransportQUIC && *transport != client.TransportWebSocket:
		return badUsage("--transport %q: want quic or websocket", *transport)
	}
	logger, _ := newLogger(stderr, "info")
	return client.RunListen(ctx, u, &client.Options{Logger: logger, Transport: *transport}, client.ListenOptions{
		Broadcast: *name, Track: *track, Groups: *groups, Check: *check, Verbose: *verbose,
	}, stdout)
}
