package router

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// Flags are the values of relay router's flags.
type Flags struct {
	Listen, Relays, LogLevel      string
	Poll                          time.Duration
	CertFile, KeyFile, TLSKeyFile string
	// RequirePins routes only relays with an spki_sha256 pin.
	RequirePins bool
	// Rate and Burst bound /route (Options.Rate, Options.Burst); a Rate
	// of 0 means no limit (the command's default is DefaultRate).
	Rate  float64
	Burst int
}

// Run is relay router: it checks the flags (bad ones are cli usage errors
// naming the flag) and serves GET /route for the relays of f.Relays on
// f.Listen, over TLS with --cert/--key or --tls-key, logging to stderr,
// until ctx ends; SIGHUP reloads the relays file.
func (f *Flags) Run(ctx context.Context, stderr io.Writer) error {
	switch {
	case f.Listen == "":
		return cli.Usagef("--listen is required (HOST:PORT)")
	case f.Relays == "":
		return cli.Usagef("--relays is required")
	case (f.CertFile == "") != (f.KeyFile == ""):
		return cli.Usagef("--cert and --key must be given together")
	case f.CertFile != "" && f.TLSKeyFile != "":
		return cli.Usagef("give --cert/--key or --tls-key, not both")
	case f.Rate < 0 || math.IsNaN(f.Rate) || math.IsInf(f.Rate, 0):
		return cli.Usagef("--rate %v: want requests a second, 0 or more (0: no limit)", f.Rate)
	case f.Rate > 0 && f.Burst < 1:
		return cli.Usagef("--burst %d: want 1 or more", f.Burst)
	}
	listenHost, _, err := net.SplitHostPort(f.Listen)
	if err != nil {
		return cli.Usagef("--listen %q: want HOST:PORT", f.Listen)
	}
	logger, err := cli.NewLogger(stderr, f.LogLevel)
	if err != nil {
		return err
	}
	var tlsConf *tls.Config
	tlsAttrs := []any{"tls", false}
	switch {
	case f.CertFile != "":
		if tlsConf, err = CertFilesTLS(f.CertFile, f.KeyFile); err != nil {
			return err
		}
		tlsAttrs = []any{"tls", "certificate"}
	case f.TLSKeyFile != "":
		key, err := relay.LoadTLSKey(f.TLSKeyFile)
		if err != nil {
			return fmt.Errorf("--tls-key: %w", err)
		}
		if tlsConf, err = SelfSignedTLS(key, []string{listenHost}, nil); err != nil {
			return err
		}
		spki, err := relay.SPKIHash(key.Public())
		if err != nil {
			return err
		}
		tlsAttrs = []any{"tls", "self-signed", "spki_sha256", spki}
	default:
		if !client.IsLoopback(listenHost) {
			logger.Warn("serving /route over plain HTTP on a non-loopback address: clients trust the network to deliver relay certificate hashes unchanged; give --cert/--key or --tls-key", "listen", f.Listen)
		}
	}
	rt, err := New(Options{File: f.Relays, Poll: f.Poll, Logger: logger, RequirePins: f.RequirePins, Rate: f.Rate, Burst: f.Burst})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	ln = LimitListener(ln, Limits{})
	if tlsConf != nil {
		ln = tls.NewListener(ln, tlsConf)
	}
	srv := rt.HTTPServer(Limits{})
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
	logger.Info("router listening", append([]any{"addr", ln.Addr().String(), "relays", f.Relays}, tlsAttrs...)...)
	err = srv.Serve(ln)
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
