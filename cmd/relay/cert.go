package main

import (
	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/relay"
)

// keygenCmd is relay keygen: it writes a new ECDSA P-256 key for serve
// --tls-key and prints its SPKI pin; with --auth, an Ed25519 token key
// file for serve --auth-key and relay token --key, and prints its public
// line.
func keygenCmd(ios *cli.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "keygen --out FILE [--auth]", Short: "write an ECDSA P-256 key for --tls-key and print its SPKI sha256, or with --auth an Ed25519 token key", Args: cli.NoArgs,
		Long: `relay keygen --out FILE writes an ECDSA P-256 key for relay serve --tls-key and prints its SPKI sha256.

relay keygen --auth --out FILE writes a token key file instead: one line ed25519-private:BASE64
(standard base64 of the 32-byte seed). relay serve --auth-key FILE verifies tokens with it and
relay token --key FILE signs them. It prints the key's ed25519-public:BASE64 line: a file of such
lines (each optionally followed by until=RFC3339) lets another relay verify tokens without being
able to sign any.`}
	out := cmd.Flags().String("out", "", "file to write the key to (mode 0600; an existing file is not overwritten)")
	auth := cmd.Flags().Bool("auth", false, "write an Ed25519 token key file (relay serve --auth-key, relay token --key) instead of a TLS key")
	cmd.RunE = func(*cobra.Command, []string) error { return relay.Keygen(*out, *auth, ios.Out) }
	return cmd
}

// pinCmd is relay pin: it prints the SPKI pin of a key.
func pinCmd(ios *cli.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "pin --tls-key FILE", Short: "print the SPKI sha256 of a key", Args: cli.NoArgs}
	keyFile := cmd.Flags().String("tls-key", "", "key file (as relay keygen writes)")
	cmd.RunE = func(*cobra.Command, []string) error { return relay.PrintPin(*keyFile, ios.Out) }
	return cmd
}
