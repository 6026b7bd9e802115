package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/version"
)

// run runs the relay command line in-process with an empty stdin.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return Execute(ctx, args, &cli.IOStreams{In: strings.NewReader(""), Out: stdout, ErrOut: stderr})
}

func relayCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

// TestEveryNumericFlagHasARange: every count, size, rate and duration
// flag of every command is bounded (cli.Ranged beside its declaration).
func TestEveryNumericFlagHasARange(t *testing.T) {
	numeric := 0
	cli.Walk(newRoot(&cli.IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard}), func(c *cobra.Command) {
		if u := cli.UnrangedFlags(c.Flags()); len(u) > 0 {
			t.Errorf("%s: no cli.Ranged for %s", c.CommandPath(), strings.Join(u, ", "))
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if cli.Numeric(f) {
				numeric++
			}
		})
	})
	if numeric < 30 {
		t.Errorf("the walk saw %d numeric flags; relay serve alone has 11", numeric)
	}
}

// commandsOf are the relay's commands with flags (all but version).
func commandsOf(t *testing.T) []*cobra.Command {
	t.Helper()
	var out []*cobra.Command
	for _, c := range newRoot(&cli.IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard}).Commands() {
		if c.Name() != "version" {
			out = append(out, c)
		}
	}
	if len(out) != 10 {
		t.Fatalf("%d commands besides version, want 10", len(out))
	}
	return out
}

// TestBadFlags: one line naming the flag, exit status 2, for bad flags
// and values of every command.
func TestBadFlags(t *testing.T) {
	const l = "--listen=127.0.0.1:0"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", l, "--send-batch", "5000"}, "relay serve: flag --send-batch: 5000 is out of range: want 1 to 1024"},
		{[]string{"serve", l, "--ack-delay", "5s"}, "relay serve: flag --ack-delay: 5s is out of range: want 1ms to 1s"},
		{[]string{"serve", l, "--pto-ack-delay", "2s"}, "relay serve: flag --pto-ack-delay: 2s is out of range: want 0s to 1s"},
		{[]string{"serve", l, "--listener-ack-delay", "2s"}, "relay serve: flag --listener-ack-delay: 2s is out of range: want 0s to 1s"},
		{[]string{"serve", l, "--listener-ack-threshold", "0"}, "relay serve: flag --listener-ack-threshold: 0 is out of range: want 1 to 100"},
		{[]string{"serve", l, "--max-listeners", "99999999999"}, "relay serve: flag --max-listeners: 99999999999 is out of range: want 0 to 10000000"},
		{[]string{"serve", l, "--reap-after", "0s"}, "relay serve: flag --reap-after: 0s is out of range: want 1s to 24h"},
		{[]string{"serve", l, "--shed-rate", "1e9"}, "relay serve: flag --shed-rate: 1e+09 is out of range: want 0.01 to 100000"},
		{[]string{"serve", l, "--shutdown-grace", "1h"}, "relay serve: flag --shutdown-grace: 1h0m0s is out of range: want 0s to 10m"},
		{[]string{"serve", l, "--notice-grace", "2m"}, "relay serve: flag --notice-grace: 2m0s is out of range: want 0s to 1m"},
		{[]string{"serve", l, "--pprof=sometimes"}, `relay serve: flag --pprof: invalid value "sometimes": invalid syntax`},
		{[]string{"serve", "-listen", "127.0.0.1:0"}, "relay serve: flag -listen: unknown flag (flags are spelled --name)"},
		{[]string{"serve", "--listen"}, "relay serve: flag --listen: needs a value"},
		{[]string{"serve", "--listen", "127.0.0.1:70000"}, `relay serve: --listen "127.0.0.1:70000": port must be a number from 0 to 65535`},
		{[]string{"serve", l, "--log-level", "loud"}, `relay serve: flag --log-level: "loud" is not debug, info, warn or error`},
		{[]string{"router", "--listen", "127.0.0.1:0", "--relays", "f", "--poll", "1ms"}, "relay router: flag --poll: 1ms is out of range: want 10ms to 1m"},
		{[]string{"token", "--key", "k", "--publish", "a", "--ttl", "9000h"}, "relay token: flag --ttl: 9000h0m0s is out of range: want 1s to 8760h"},
		{[]string{"publish", "http://127.0.0.1:1/", "--name", "x", "--interval", "0s"}, "relay publish: flag --interval: 0s is out of range: want 1ms to 1m"},
		{[]string{"publish", "http://127.0.0.1:1/", "--name", "x", "--frames", "0"}, "relay publish: flag --frames: 0 is out of range: want 1 to 1000"},
		{[]string{"publish", "http://127.0.0.1:1/", "--name", "x", "--size", "99999999"}, "relay publish: flag --size: 99999999 is out of range: want 16 to 1048576"},
		{[]string{"publish", "http://127.0.0.1:1/", "--name", "x", "--groups", "x"}, `relay publish: flag --groups: invalid value "x": invalid syntax`},
		{[]string{"listen", "http://127.0.0.1:1/", "--name", "x", "--check", "-1"}, "relay listen: flag --check: -1 is out of range: want 0 to 1048576"},
		{[]string{"listen", "http://127.0.0.1:1/", "--name", "x", "--silence", "2h"}, "relay listen: flag --silence: 2h0m0s is out of range: want 0s to 1h"},
		{[]string{"listen", "http://127.0.0.1:1/", "--name", "x", "--groups", "-2"}, "relay listen: flag --groups: -2 is out of range: want 0 to 1000000000"},
		{[]string{"loadgen", "--url", "http://127.0.0.1:1/", "--broadcast", "x", "--listeners", "99999999999999", "--duration", "1s"}, "relay loadgen: flag --listeners: 99999999999999 is out of range: want 1 to 1000000"},
		{[]string{"loadgen", "--url", "http://127.0.0.1:1/", "--broadcast", "x", "--listeners", "1", "--duration", "48h"}, "relay loadgen: flag --duration: 48h0m0s is out of range: want 1ms to 24h"},
		{[]string{"loadgen", "--url", "http://127.0.0.1:1/", "--broadcast", "x", "--listeners", "1", "--duration", "1s", "--freeze", "1.5"}, "relay loadgen: flag --freeze: 1.5 is out of range: want 0 to 1"},
		{[]string{"loadgen", "--url", "http://127.0.0.1:1/", "--broadcast", "x", "--listeners", "1", "--duration", "1s", "--ramp", "-1"}, "relay loadgen: flag --ramp: -1 is out of range: want 0 to 1000000"},
		{[]string{"loadgen", "--url", "http://127.0.0.1:1/", "--broadcast", "x", "--listeners", "1", "--duration", "1s", "--shards", "100000"}, "relay loadgen: flag --shards: 100000 is out of range: want 0 to 4096"},
		{[]string{"loadgen", "--url", "http://127.0.0.1:1/", "--broadcast", "x", "--listeners", "1", "--duration", "1s", "--idle-timeout", "0s"}, "relay loadgen: flag --idle-timeout: 0s is out of range: want 1ms to 1h"},
		{[]string{"loadgen", "--url", "http://127.0.0.1:1/", "--broadcast", "x", "--listeners", "1", "--duration", "1s", "--late", "2h"}, "relay loadgen: flag --late: 2h0m0s is out of range: want 1ms to 1h"},
		{[]string{"keygen", "--out"}, "relay keygen: flag --out: needs a value"},
		{[]string{"pin", "--bogus"}, "relay pin: flag --bogus: unknown flag"},
		{[]string{"prober", "--window", "1m"}, "relay prober: flag --window: 1m0s is out of range: want 100ms to 10s"},
		{[]string{"prober", "extra"}, `relay prober: unexpected argument "extra"`},
		{[]string{"--bogus"}, "relay: flag --bogus: unknown flag"},
		{[]string{"nope"}, `relay: unknown command "nope" (try relay help)`},
		{[]string{"completion", "tcsh"}, `relay completion: unknown shell "tcsh" (want bash, zsh, fish or powershell)`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := relayCLI(t, tc.args...)
			if code != 2 || errOut != tc.want+"\n" || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q\nwant exit 2, stderr %q", code, out, errOut, tc.want)
			}
		})
	}
}

// TestHelp: relay CMD -h and relay help CMD print the command's flags,
// spelled --flag, and exit 0.
func TestHelp(t *testing.T) {
	for _, c := range commandsOf(t) {
		out, errOut, code := relayCLI(t, c.Name(), "-h")
		if code != 0 || errOut != "" || !strings.HasPrefix(out, "usage: relay "+c.Use+" [flags]\n") || !strings.Contains(out, "\n      --") {
			t.Errorf("relay %s -h: exit %d, stderr %q, stdout:\n%s", c.Name(), code, errOut, out)
		}
		if help, _, code := relayCLI(t, "help", c.Name()); code != 0 || help != out {
			t.Errorf("relay help %s: exit %d\n%s\nwant:\n%s", c.Name(), code, help, out)
		}
	}
	if out, _, _ := relayCLI(t, "serve", "-h"); !strings.HasPrefix(out, "usage: relay serve [flags]\n") {
		t.Errorf("relay serve -h:\n%s", out)
	}
	serve, _, _ := relayCLI(t, "serve", "--help")
	if !strings.Contains(serve, "--listen string") || !strings.Contains(serve, "--shed-rate float") {
		t.Errorf("relay serve --help:\n%s", serve)
	}
	if out, _, code := relayCLI(t, "-h"); code != 0 || !strings.Contains(out, "relay serve --listen") {
		t.Errorf("relay -h: exit %d\n%s", code, out)
	}
}

func TestVersion(t *testing.T) {
	want := "relay " + version.String() + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if out, errOut, code := relayCLI(t, args...); code != 0 || out != want || errOut != "" {
			t.Errorf("relay %s: exit %d, stdout %q, stderr %q; want %q", args[0], code, out, errOut, want)
		}
	}
}

func TestCompletion(t *testing.T) {
	if out, _, code := relayCLI(t, "completion", "bash"); code != 0 || !strings.Contains(out, "__start_relay") {
		t.Errorf("relay completion bash: exit %d\n%.300s", code, out)
	}
	out, _, code := relayCLI(t, "__complete", "serve", "--shut")
	if code != 0 || !strings.Contains(out, "--shutdown-grace\t") || strings.Contains(out, "--listen") {
		t.Errorf("relay __complete serve --shut: exit %d\n%s", code, out)
	}
}

// TestLoadgenEndsOnCancel: relay loadgen against a relay that is not
// there, for an hour, ends soon after its context does (SIGTERM or SIGINT
// in the binary: cmd/relay's TestVersionStamped sends them to serve and
// router).
func TestLoadgenEndsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"loadgen", "--url", "http://127.0.0.1:1/x", "--broadcast", "b", "--listeners", "2", "--duration", "1h"}, io.Discard, io.Discard)
	}()
	select {
	case code := <-done:
		t.Fatalf("loadgen ended by itself with %d before the cancel", code)
	case <-time.After(time.Second):
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("loadgen still running 30s after its context ended")
	}
}
