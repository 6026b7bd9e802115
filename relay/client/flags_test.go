package client_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/relay/client"
)

// usage fails t unless err is a cli usage error (exit 2) whose text
// starts with want.
func usage(t *testing.T, what string, err error, want string) {
	t.Helper()
	var ue *cli.UsageError
	if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("%s: %v\nwant the usage error %q", what, err, want)
	}
}

func TestCheckURLArg(t *testing.T) {
	if u, err := client.CheckURLArg([]string{"https://h:1/x"}); err != nil || u != "https://h:1/x" {
		t.Errorf("CheckURLArg: %q, %v", u, err)
	}
	_, err := client.CheckURLArg(nil)
	usage(t, "no URL", err, "want exactly one URL argument, got 0")
	_, err = client.CheckURLArg([]string{"http://a", "http://b"})
	usage(t, "two URLs", err, "want exactly one URL argument, got 2")
	_, err = client.CheckURLArg([]string{"ftp://a"})
	usage(t, "ftp", err, `URL "ftp://a": must start with https:// or http://`)
}

func TestCheckListenArgs(t *testing.T) {
	if err := client.CheckListenArgs("http://127.0.0.1:1", nil); err != nil {
		t.Errorf("--router alone: %v", err)
	}
	if err := client.CheckListenArgs("", []string{"http://127.0.0.1:1/"}); err != nil {
		t.Errorf("URL alone: %v", err)
	}
	usage(t, "both", client.CheckListenArgs("http://127.0.0.1:1", []string{"http://x"}), "give a URL or --router, not both")
	usage(t, "neither", client.CheckListenArgs("", nil), "want exactly one URL argument, got 0")
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if tok, err := client.ReadTokenFile("token-file", ""); tok != "" || err != nil {
		t.Errorf("no file: %q, %v", tok, err)
	}
	if tok, err := client.ReadTokenFile("token-file", write("ok", "  abc.def.ghi\n")); tok != "abc.def.ghi" || err != nil {
		t.Errorf("a token: %q, %v", tok, err)
	}
	_, err := client.ReadTokenFile("token-file", filepath.Join(dir, "none"))
	usage(t, "no such file", err, "--token-file: open ")
	empty := write("empty", "\n")
	_, err = client.ReadTokenFile("tf", empty)
	usage(t, "empty", err, "--tf "+empty+": empty; want one token")
	for _, bad := range []string{"a b", "a\nb", "a&b", "a#b", "a?b"} {
		p := write("bad", bad)
		_, err = client.ReadTokenFile("token-file", p)
		usage(t, bad, err, "--token-file "+p+": want one token (no spaces, lines, '&', '#' or '?')")
	}
	long := write("long", strings.Repeat("x", 8<<10+1))
	_, err = client.ReadTokenFile("token-file", long)
	usage(t, "long", err, "--token-file "+long+": longer than 8 KiB; want one token")
}

func TestCheckHashTrust(t *testing.T) {
	const pin = "#spki=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, ok := range []struct {
		raw, hash string
		trust     bool
	}{
		{"http://127.0.0.1:1/", "", false},
		{"https://relay.example:443/", "", false},
		{"http://relay.example:1/" + pin, "", false},
		{"http://relay.example:1/", "00", false},
		{"http://relay.example:1/", "", true},
	} {
		if err := client.CheckHashTrust(ok.raw, ok.hash, ok.trust); err != nil {
			t.Errorf("CheckHashTrust(%q, %q, %v): %v", ok.raw, ok.hash, ok.trust, err)
		}
	}
	usage(t, "clear text", client.CheckHashTrust("http://relay.example:1/", "", false),
		"URL http://relay.example:1/: its certificate hash would come over plain HTTP from a host that is not loopback")
	usage(t, "bad pin", client.CheckHashTrust("http://127.0.0.1:1/#spki=zz", "", false), `URL "http://127.0.0.1:1/#spki=zz": `)
}

func TestCheckRouter(t *testing.T) {
	o, err := client.CheckRouter("http://127.0.0.1:1", "", false)
	if err != nil || o.SPKI != "" || o.Insecure {
		t.Errorf("loopback router: %+v, %v", o, err)
	}
	if _, err := client.CheckRouter("http://router.example:1", "", true); err != nil {
		t.Errorf("--insecure-router: %v", err)
	}
	_, err = client.CheckRouter("ftp://r", "", false)
	usage(t, "ftp", err, `--router "ftp://r": must start with https:// or http://`)
	_, err = client.CheckRouter("https://r:1", "zz", false)
	usage(t, "bad spki", err, "--router-spki: ")
	_, err = client.CheckRouter("http://router.example:1", "", false)
	usage(t, "clear text", err, "--router http://router.example:1: an http:// router that is not on loopback answers in clear text")
}

// TestListenFlagsErrors: relay listen's bad flags are usage errors
// naming the flag, before anything is dialled.
func TestListenFlagsErrors(t *testing.T) {
	ok := client.ListenFlags{URL: "http://127.0.0.1:1/", Broadcast: "b", Track: "audio", Transport: client.TransportQUIC}
	for _, tc := range []struct {
		set  func(*client.ListenFlags)
		want string
	}{
		{func(f *client.ListenFlags) { f.Broadcast = "" }, "--name is required"},
		{func(f *client.ListenFlags) { f.Transport = "tcp" }, `--transport "tcp": want quic or websocket`},
		{func(f *client.ListenFlags) { f.RouterSPKI = "ab" }, "--router-spki, --insecure-router and --region need --router"},
		{func(f *client.ListenFlags) { f.Region = "eu" }, "--router-spki, --insecure-router and --region need --router"},
		{func(f *client.ListenFlags) { f.URL = "http://relay.example:1/" }, "URL http://relay.example:1/: its certificate hash would come over plain HTTP"},
		{func(f *client.ListenFlags) { f.URL, f.Router = "", "http://router.example:1" }, "--router http://router.example:1: an http:// router"},
		{func(f *client.ListenFlags) { f.TokenFile = filepath.Join(t.TempDir(), "none") }, "--token-file: open "},
	} {
		f := ok
		tc.set(&f)
		var out, errOut bytes.Buffer
		usage(t, tc.want, f.Run(context.Background(), &out, &errOut), tc.want)
		if out.Len() != 0 {
			t.Errorf("%s: stdout %q", tc.want, out.String())
		}
	}
}
