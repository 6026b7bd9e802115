package main

import (
	"crypto/ecdsa"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/relay"
)

// checkCertFlags checks serve's certificate flags: --cert with --key,
// --tls-key and --acme-domain exclude each other, and the other --acme-
// flags need --acme-domain.
func checkCertFlags(fs *pflag.FlagSet) error {
	val := func(name string) string { return fs.Lookup(name).Value.String() }
	certFile, keyFile, domain := val("cert"), val("key"), val("acme-domain")
	if (certFile == "") != (keyFile == "") {
		return badUsage("--cert and --key must be given together")
	}
	var modes []string
	if certFile != "" {
		modes = append(modes, "--cert/--key")
	}
	if val("tls-key") != "" {
		modes = append(modes, "--tls-key")
	}
	if domain != "" {
		modes = append(modes, "--acme-domain")
	}
	if len(modes) > 1 {
		return badUsage("%s exclude each other: give certificate files, a key for self-signed certificates, or an ACME domain", strings.Join(modes, " and "))
	}
	for _, f := range []string{"acme-email", "acme-ca", "acme-ca-root", "acme-dir"} {
		if val(f) != "" && domain == "" {
			return badUsage("--%s needs --acme-domain", f)
		}
	}
	if domain != "" {
		if strings.ContainsAny(domain, "/:*@ ") || strings.HasPrefix(domain, ".") || strings.HasSuffix(domain, ".") || !strings.Contains(domain, ".") {
			return badUsage("--acme-domain %q: want a DNS name such as relay.example.com", domain)
		}
	}
	if ca := val("acme-ca"); ca != "" {
		if u, err := url.Parse(ca); err != nil || u.Scheme != "https" || u.Host == "" {
			return badUsage("--acme-ca %q: want the https:// URL of an ACME directory", ca)
		}
	}
	return nil
}

// loadRoots reads PEM certificates into a pool.
func loadRoots(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s: no PEM certificates in it", path)
	}
	return pool, nil
}

// keygenCmd is relay keygen: it writes a new ECDSA P-256 key for serve
// --tls-key and prints its SPKI pin.
func keygenCmd(ios *cli.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "keygen --out FILE", Short: "write an ECDSA P-256 key for --tls-key and print its SPKI sha256", Args: cli.NoArgs}
	fs := cmd.Flags()
	out := fs.String("out", "", "file to write the key to (mode 0600; an existing file is not overwritten)")
	cmd.RunE = func(*cobra.Command, []string) error {
		stdout := ios.Out
		switch {
		case *out == "":
			return badUsage("--out is required (the FILE to write the key to)")
		}
		key, err := relay.WriteTLSKey(*out)
		if err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		return printPin(stdout, key)
	}
	return cmd
}

// printPin prints the SPKI pin of key, as serve logs it (spki_sha256).
func printPin(w io.Writer, key *ecdsa.PrivateKey) error {
	spki, err := relay.SPKIHash(&key.PublicKey)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, spki)
	return nil
}

// pinCmd is relay pin: it prints the SPKI pin of a key.
func pinCmd(ios *cli.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "pin --tls-key FILE", Short: "print the SPKI sha256 of a key", Args: cli.NoArgs}
	fs := cmd.Flags()
	keyFile := fs.String("tls-key", "", "key file (as relay keygen writes)")
	cmd.RunE = func(*cobra.Command, []string) error {
		stdout := ios.Out
		switch {
		case *keyFile == "":
			return badUsage("--tls-key is required (the key FILE)")
		}
		key, err := relay.LoadTLSKey(*keyFile)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("--tls-key: %s does not exist", *keyFile)
			}
			return fmt.Errorf("--tls-key: %w", err)
		}
		return printPin(stdout, key)
	}
	return cmd
}
