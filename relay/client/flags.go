package client

import (
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
)

// The checks of the relay's command-line flags and arguments that name
// relays and routers: their errors are cli usage errors naming the flag.

// CheckURLArg checks the one URL argument of relay publish and relay
// listen and returns it: exactly one, http:// or https://.
func CheckURLArg(args []string) (string, error) {
	if len(args) != 1 {
		return "", cli.Usagef("want exactly one URL argument, got %d", len(args))
	}
	u := args[0]
	if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		return "", cli.Usagef("URL %q: must start with https:// or http://", u)
	}
	return u, nil
}

// CheckListenArgs checks relay listen's arguments: a URL (CheckURLArg),
// or none when router (--router) is given.
func CheckListenArgs(router string, args []string) error {
	if router != "" {
		if len(args) > 0 {
			return cli.Usagef("give a URL or --router, not both")
		}
		return nil
	}
	_, err := CheckURLArg(args)
	return err
}

// ReadTokenFile reads the token in file, one word of at most 8 KiB; flag
// names the flag the file came from, for the errors. No file is no token.
func ReadTokenFile(flag, file string) (string, error) {
	if file == "" {
		return "", nil
	}
	f, err := os.Open(file)
	if err != nil {
		return "", cli.Usagef("--%s: %v", flag, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 8<<10+1))
	if err != nil {
		return "", cli.Usagef("--%s %s: %v", flag, file, err)
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case len(b) > 8<<10:
		return "", cli.Usagef("--%s %s: longer than 8 KiB; want one token", flag, file)
	case tok == "":
		return "", cli.Usagef("--%s %s: empty; want one token", flag, file)
	case strings.ContainsAny(tok, " \t\r\n&#?"):
		return "", cli.Usagef("--%s %s: want one token (no spaces, lines, '&', '#' or '?')", flag, file)
	}
	return tok, nil
}

// TokenFileSource is a ResolverOptions.TokenSource that reads file
// (ReadTokenFile) at every connection and reconnection, so that a token
// replaced in the file is the one presented after the relay closed the
// session for an expired token; nil without a file.
func TokenFileSource(flag, file string) func(context.Context) (string, error) {
	if file == "" {
		return nil
	}
	return func(context.Context) (string, error) { return ReadTokenFile(flag, file) }
}

// CheckHashTrust refuses an http:// relay URL raw on another host whose
// certificate hash would be fetched in clear text, unless it is pinned
// (#spki=, or a known hash) or the network is trusted (trust,
// --trust-http-hash).
func CheckHashTrust(raw, hash string, trust bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return cli.Usagef("URL %q: %v", raw, err)
	}
	pin, err := URLPin(u)
	if err != nil {
		return cli.Usagef("URL %q: %v", raw, err)
	}
	if u.Scheme != "http" || pin != "" || hash != "" {
		return nil
	}
	if err := CheckHashFetch(u, trust); err != nil {
		return cli.Usagef("URL %s: its certificate hash would come over plain HTTP from a host that is not loopback; pin the relay's key (URL#spki=HEX, from relay pin), ask a router (--router), or pass --trust-http-hash to trust the network", raw)
	}
	return nil
}

// CheckRouter checks --router, --router-spki and --insecure-router and
// returns the RouterOptions they make.
func CheckRouter(router, spki string, insecure bool) (RouterOptions, error) {
	o := RouterOptions{SPKI: spki, Insecure: insecure}
	if !strings.HasPrefix(router, "http://") && !strings.HasPrefix(router, "https://") {
		return o, cli.Usagef("--router %q: must start with https:// or http://", router)
	}
	if spki != "" {
		if err := CheckHash(spki); err != nil {
			return o, cli.Usagef("--router-spki: %v", err)
		}
	}
	if _, err := NewRouterClient(router, o); err != nil {
		switch {
		case errors.Is(err, ErrClearTextRouter):
			return o, cli.Usagef("--router %s: an http:// router that is not on loopback answers in clear text, relay certificate hashes included; use https:// (with --router-spki HEX for a self-signed router) or pass --insecure-router to trust the network", router)
		case spki != "":
			return o, cli.Usagef("--router-spki: %v", err)
		default:
			return o, cli.Usagef("--router: %v", err)
		}
	}
	return o, nil
}

// ListenFlags are the values of relay listen's flags and its URL
// argument ("" with Router).
type ListenFlags struct {
	URL, Broadcast, Track, Transport string
	Router, RouterSPKI, TokenFile    string
	// Region is the listener's region hint to the router (--region).
	Region                        string
	InsecureRouter, TrustHTTPHash bool
	Groups, Check                 int
	Verbose                       bool
	Silence                       time.Duration
}

// Run is relay listen: it checks the flags, then listens to Broadcast at
// the relay at URL, or at the relay Router hands out, reconnecting (one
// line on stdout each time) until ctx ends or Groups groups came; its
// log goes to stderr.
func (f *ListenFlags) Run(ctx context.Context, stdout, stderr io.Writer) error {
	tok, err := ReadTokenFile("token-file", f.TokenFile)
	if err != nil {
		return err
	}
	switch {
	case f.Broadcast == "":
		return cli.Usagef("--name is required")
	case f.Transport != TransportQUIC && f.Transport != TransportWebSocket:
		return cli.Usagef("--transport %q: want quic or websocket", f.Transport)
	case f.Router == "" && (f.RouterSPKI != "" || f.InsecureRouter || f.Region != ""):
		return cli.Usagef("--router-spki, --insecure-router and --region need --router")
	}
	logger, _ := cli.NewLogger(stderr, "info")
	dial := &Options{Transport: f.Transport, TrustHTTPHash: f.TrustHTTPHash, Logger: logger,
		KeepAlive: KeepAlivePeriod(f.Silence)}
	ro := ResolverOptions{URL: f.URL, Broadcast: f.Broadcast, Token: tok, TrustHTTPHash: f.TrustHTTPHash,
		TokenSource: TokenFileSource("token-file", f.TokenFile)}
	if f.Router != "" {
		if ro.RouterOptions, err = CheckRouter(f.Router, f.RouterSPKI, f.InsecureRouter); err != nil {
			return err
		}
		ro.Router, ro.RouterOptions.Region = f.Router, f.Region
	} else if err := CheckHashTrust(f.URL, "", f.TrustHTTPHash); err != nil {
		return err
	}
	res, err := NewResolver(ro)
	if err != nil {
		return cli.Usagef("%v", err)
	}
	// One line per reconnect: through the router to another relay, or
	// to the same URL (a relay restarted in place).
	return Listen(ctx, res, dial, ListenOptions{
		Broadcast: f.Broadcast, Track: f.Track, Groups: f.Groups, Check: f.Check, Verbose: f.Verbose,
		Silence: f.Silence, Reconnect: true,
	}, stdout)
}
