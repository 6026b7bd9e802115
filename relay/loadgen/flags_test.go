package loadgen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/loadgen"
)

func usageErr(t *testing.T, what string, err error, want string) {
	t.Helper()
	var ue *cli.UsageError
	if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("%s: %v\nwant the usage error %q", what, err, want)
	}
}

// given is a Changed that answers true for names.
func given(names ...string) func(string) bool {
	return func(n string) bool {
		for _, m := range names {
			if m == n {
				return true
			}
		}
		return false
	}
}

// TestFlagsErrors: relay loadgen's bad flags are usage errors naming the
// flag, in the command's order, before any listener starts.
func TestFlagsErrors(t *testing.T) {
	ok := loadgen.Flags{Options: loadgen.Options{URL: "http://127.0.0.1:1/", Broadcast: "b", Listeners: 1, Duration: time.Second},
		LogLevel: "warn", AckFrequency: true}
	for _, tc := range []struct {
		set  func(*loadgen.Flags)
		want string
	}{
		{func(f *loadgen.Flags) { f.Router = "http://127.0.0.1:2/" }, "give exactly one of --url URL or --router URL"},
		{func(f *loadgen.Flags) { f.URL = "" }, "give exactly one of --url URL or --router URL"},
		{func(f *loadgen.Flags) { f.URL = "ftp://x" }, `--url "ftp://x": must start with https:// or http://`},
		{func(f *loadgen.Flags) { f.URL, f.Router = "", "ftp://x" }, `--router "ftp://x": must start with https:// or http://`},
		{func(f *loadgen.Flags) { f.InsecureRouter = true }, "--router-spki, --insecure-router and --region need --router"},
		{func(f *loadgen.Flags) { f.RouterRegion = "eu" }, "--router-spki, --insecure-router and --region need --router"},
		{func(f *loadgen.Flags) { f.URL, f.Router, f.CertificateHash = "", "http://127.0.0.1:2/", "ab" }, "--certificate-sha256 is for --url; the router answers each relay's hash"},
		{func(f *loadgen.Flags) { f.Broadcast = "" }, "--broadcast is required"},
		{func(f *loadgen.Flags) { f.Listeners = 0 }, "--listeners 0: must be at least 1"},
		{func(f *loadgen.Flags) { f.Duration = 0 }, "--duration is required and must be positive"},
		{func(f *loadgen.Flags) { f.Changed = given("freeze-at") }, "--freeze-at needs --freeze"},
		{func(f *loadgen.Flags) { f.Changed = given("freeze-for") }, "--freeze-for needs --freeze"},
		{func(f *loadgen.Flags) { f.Freeze, f.FreezeAt = 0.5, 2*time.Second }, "--freeze-at 2s: must be within --duration"},
		{func(f *loadgen.Flags) { f.CertificateHash = "zz" }, "--certificate-sha256: "},
		{func(f *loadgen.Flags) { f.URL = "http://relay.example:1/" }, "URL http://relay.example:1/: its certificate hash would come over plain HTTP"},
		{func(f *loadgen.Flags) { f.URL, f.Router = "", "http://router.example:1/" }, "--router http://router.example:1/: an http:// router"},
		{func(f *loadgen.Flags) { f.LogLevel = "loud" }, `flag --log-level: "loud" is not debug, info, warn or error`},
		{func(f *loadgen.Flags) { f.TokenFile = filepath.Join(t.TempDir(), "none") }, "--token-file: open "},
	} {
		f := ok
		f.Changed = given()
		tc.set(&f)
		var out, errOut bytes.Buffer
		usageErr(t, tc.want, f.Run(context.Background(), &out, &errOut), tc.want)
		if out.Len() != 0 {
			t.Errorf("%s: stdout %q", tc.want, out.String())
		}
	}
}

// TestPublishFlagsErrors: relay publish's bad flags are usage errors
// naming the flag, before anything is dialled.
func TestPublishFlagsErrors(t *testing.T) {
	ok := loadgen.PublishFlags{URL: "http://127.0.0.1:1/", Broadcast: "b", Track: "audio", Transport: client.TransportQUIC,
		Interval: 120 * time.Millisecond, Frames: 1, Size: 160}
	for _, tc := range []struct {
		set  func(*loadgen.PublishFlags)
		want string
	}{
		{func(f *loadgen.PublishFlags) { f.Broadcast = "" }, "--name is required"},
		{func(f *loadgen.PublishFlags) { f.Changed = given("ogg-pace") }, "--ogg-pace needs --ogg"},
		{func(f *loadgen.PublishFlags) { f.Paced, f.Transport = true, client.TransportWebSocket }, "--paced: only with --transport quic"},
		{func(f *loadgen.PublishFlags) { f.Transport = "tcp" }, `--transport "tcp": want quic or websocket`},
		{func(f *loadgen.PublishFlags) { f.URL = "http://relay.example:1/" }, "URL http://relay.example:1/: its certificate hash would come over plain HTTP"},
		{func(f *loadgen.PublishFlags) { f.Changed = given("ogg") }, "--ogg: give a file, or - for stdin"},
		{func(f *loadgen.PublishFlags) { f.Ogg, f.Broadcast, f.Changed = "x", "", given("ogg") }, "--name is required"},
		{func(f *loadgen.PublishFlags) { f.Ogg, f.Changed = "x", given("ogg", "paced", "size") },
			"--ogg excludes --paced, --size (--paced, --frames, --size, --interval and --groups are for generated frames)"},
		{func(f *loadgen.PublishFlags) { f.Ogg, f.Transport, f.Changed = "x", "tcp", given("ogg") }, `--transport "tcp": want quic or websocket`},
		{func(f *loadgen.PublishFlags) { f.Ogg, f.URL, f.Changed = "x", "http://relay.example:1/", given("ogg") }, "URL http://relay.example:1/: its certificate hash would come over plain HTTP"},
		{func(f *loadgen.PublishFlags) { f.TokenFile = filepath.Join(t.TempDir(), "none") }, "--token-file: open "},
	} {
		f := ok
		f.Changed = given()
		tc.set(&f)
		var out, errOut bytes.Buffer
		ios := &cli.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
		usageErr(t, tc.want, f.Run(context.Background(), ios), tc.want)
		if out.Len() != 0 {
			t.Errorf("%s: stdout %q", tc.want, out.String())
		}
	}
}

// TestFlagsRunWritesTheReport: Flags.Run measures and writes the report,
// as indented JSON with JSON, else as text.
func TestFlagsRunWritesTheReport(t *testing.T) {
	r := startRelayAndPublisher(t, 1)
	for _, asJSON := range []bool{true, false} {
		f := loadgen.Flags{Options: loadgen.Options{URL: fmt.Sprintf("http://%s/", r.Addr()), Broadcast: "live", Listeners: 2,
			Duration: 300 * time.Millisecond, Late: time.Hour, Silence: 5 * time.Second},
			LogLevel: "error", AckFrequency: true, JSON: asJSON, Changed: given()}
		var out, errOut bytes.Buffer
		if err := f.Run(context.Background(), &out, &errOut); err != nil {
			t.Fatal(err)
		}
		if asJSON {
			var rep loadgen.Report
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Connected != 2 || !strings.Contains(out.String(), "\n  \"") {
				t.Errorf("JSON report %q: %v", out.String(), err)
			}
		} else if out.Len() == 0 || strings.HasPrefix(out.String(), "{") {
			t.Errorf("text report %q", out.String())
		}
	}
}
