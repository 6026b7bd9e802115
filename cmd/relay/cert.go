package main

import (
	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/relay"
)

// keygenCmd is relay keygen: it writes a new ECDSA P-256 key for serve
// --tls-key and prints its SPKI pin.
func keygenCmd(ios *cli.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "keygen --out FILE", Short: "write an ECDSA P-256 key for --tls-key and print its SPKI sha256", Args: cli.NoArgs}
	out := cmd.Flags().String("out", "", "file to write the key to (mode 0600; an existing file is not overwritten)")
	cmd.RunE = func(*cobra.Command, []string) error { return relay.Keygen(*out, ios.Out) }
	return cmd
}

// pinCmd is relay pin: it prints the SPKI pin of a key.
func pinCmd(ios *cli.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "pin --tls-key FILE", Short: "print the SPKI sha256 of a key", Args: cli.NoArgs}
	keyFile := cmd.Flags().String("tls-key", "", "key file (as relay keygen writes)")
	cmd.RunE = func(*cobra.Command, []string) error { return relay.PrintPin(*keyFile, ios.Out) }
	return cmd
}
