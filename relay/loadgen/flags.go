package loadgen

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/relay/client"
)

// Flags are the values of relay loadgen's flags: the Options they set
// directly, and those Run turns into Options. Changed says which flags
// were given (pflag.FlagSet.Changed).
type Flags struct {
	Options
	TokenFile, LogLevel string
	// AckFrequency is --ack-frequency, the opposite of
	// Options.NoAckFrequency.
	AckFrequency bool
	JSON         bool
	Changed      func(flag string) bool
}

// Run is relay loadgen: it checks the flags (bad ones are cli usage
// errors naming the flag), runs the load (Run) logging to stderr, and
// writes its report to stdout, as text or, with JSON, indented JSON.
func (f *Flags) Run(ctx context.Context, stdout, stderr io.Writer) error {
	o := f.Options
	switch {
	case (o.URL == "") == (o.Router == ""):
		return cli.Usagef("give exactly one of --url URL or --router URL")
	case o.URL != "" && !strings.HasPrefix(o.URL, "http://") && !strings.HasPrefix(o.URL, "https://"):
		return cli.Usagef("--url %q: must start with https:// or http://", o.URL)
	case o.Router != "" && !strings.HasPrefix(o.Router, "http://") && !strings.HasPrefix(o.Router, "https://"):
		return cli.Usagef("--router %q: must start with https:// or http://", o.Router)
	case o.Router == "" && (o.RouterSPKI != "" || o.InsecureRouter || o.RouterRegion != ""):
		return cli.Usagef("--router-spki, --insecure-router and --region need --router")
	case o.Router != "" && o.CertificateHash != "":
		return cli.Usagef("--certificate-sha256 is for --url; the router answers each relay's hash")
	case o.Broadcast == "":
		return cli.Usagef("--broadcast is required")
	case o.Listeners < 1:
		return cli.Usagef("--listeners %d: must be at least 1", o.Listeners)
	case o.Duration <= 0:
		return cli.Usagef("--duration is required and must be positive")
	case f.Changed("freeze-at") && o.Freeze == 0:
		return cli.Usagef("--freeze-at needs --freeze")
	case f.Changed("freeze-for") && o.Freeze == 0:
		return cli.Usagef("--freeze-for needs --freeze")
	case o.FreezeAt > o.Duration:
		return cli.Usagef("--freeze-at %v: must be within --duration", o.FreezeAt)
	}
	if o.CertificateHash != "" {
		if err := client.CheckHash(o.CertificateHash); err != nil {
			return cli.Usagef("--certificate-sha256: %v", err)
		}
	}
	if o.Router != "" {
		if _, err := client.CheckRouter(o.Router, o.RouterSPKI, o.InsecureRouter); err != nil {
			return err
		}
	} else if err := client.CheckHashTrust(o.URL, o.CertificateHash, o.TrustHTTPHash); err != nil {
		return err
	}
	var err error
	if o.Logger, err = cli.NewLogger(stderr, f.LogLevel); err != nil {
		return err
	}
	if o.Token, err = client.ReadTokenFile("token-file", f.TokenFile); err != nil {
		return err
	}
	o.TokenSource = client.TokenFileSource("token-file", f.TokenFile)
	o.NoAckFrequency = !f.AckFrequency
	rep, err := Run(ctx, o)
	if err != nil {
		return err
	}
	if f.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.WriteText(stdout)
	return nil
}

// PublishFlags are the values of relay publish's flags and its URL
// argument. Changed says which flags were given (pflag.FlagSet.Changed).
type PublishFlags struct {
	URL, Broadcast, Track, Transport string
	// Origins are the further URL arguments: relay publish URL URL...
	// publishes the same groups, with the same sequences, to each.
	Origins              []string
	Interval             time.Duration
	Frames, Size, Groups int
	// Paced publishes load-generator frames (Publish) instead of
	// client.RunPublish's patterns.
	Paced bool
	// Ogg, if given, is an Ogg Opus file ("-": ios.In) to publish
	// (client.RunPublishOgg), in real time if OggPace.
	Ogg                    string
	OggPace, TrustHTTPHash bool
	TokenFile              string
	Changed                func(flag string) bool
}

// Run is relay publish: it checks the flags (bad ones are cli usage
// errors naming the flag) and publishes to URL, test frames or the Ogg
// file, until ctx ends or Groups groups went; lines go to ios.Out, the
// log to ios.ErrOut.
func (f *PublishFlags) Run(ctx context.Context, ios *cli.IOStreams) error {
	stdout, stderr := ios.Out, ios.ErrOut
	tok, err := client.ReadTokenFile("token-file", f.TokenFile)
	if err != nil {
		return err
	}
	u, err := client.WithToken(f.URL, tok)
	if err != nil {
		return err
	}
	// The further origins, with the token (the generated frames' path
	// reads the token file again at each connection instead).
	var origins []string
	for _, o := range f.Origins {
		if _, err := client.CheckURLArg([]string{o}); err != nil {
			return err
		}
		ou, err := client.WithToken(o, tok)
		if err != nil {
			return err
		}
		if err := client.CheckHashTrust(ou, "", f.TrustHTTPHash); err != nil {
			return err
		}
		origins = append(origins, ou)
	}
	set := f.Changed
	if set("ogg") {
		var other []string
		for _, fl := range []string{"paced", "frames", "size", "interval", "groups"} {
			if set(fl) {
				other = append(other, "--"+fl)
			}
		}
		switch {
		case f.Broadcast == "":
			return cli.Usagef("--name is required")
		case f.Ogg == "":
			return cli.Usagef("--ogg: give a file, or - for stdin")
		case len(other) > 0:
			return cli.Usagef("--ogg excludes %s (--paced, --frames, --size, --interval and --groups are for generated frames)", strings.Join(other, ", "))
		case f.Transport != client.TransportQUIC && f.Transport != client.TransportWebSocket:
			return cli.Usagef("--transport %q: want quic or websocket", f.Transport)
		}
		if err := client.CheckHashTrust(u, "", f.TrustHTTPHash); err != nil {
			return err
		}
		pace := f.Ogg != "-"
		if set("ogg-pace") {
			pace = f.OggPace
		}
		in := ios.In
		if f.Ogg != "-" {
			file, err := os.Open(f.Ogg)
			if err != nil {
				return err
			}
			defer file.Close()
			in = file
		}
		logger, _ := cli.NewLogger(stderr, "info")
		return client.RunPublishOgg(ctx, u, &client.Options{Logger: logger, Transport: f.Transport, TrustHTTPHash: f.TrustHTTPHash}, client.OggPublishOptions{
			Broadcast: f.Broadcast, Track: f.Track, Input: in, Pace: pace, Origins: origins,
		}, stdout)
	}
	switch {
	case set("ogg-pace"):
		return cli.Usagef("--ogg-pace needs --ogg")
	case f.Broadcast == "":
		return cli.Usagef("--name is required")
	case f.Paced && f.Transport != client.TransportQUIC:
		return cli.Usagef("--paced: only with --transport quic")
	case f.Transport != client.TransportQUIC && f.Transport != client.TransportWebSocket:
		return cli.Usagef("--transport %q: want quic or websocket", f.Transport)
	}
	if err := client.CheckHashTrust(u, "", f.TrustHTTPHash); err != nil {
		return err
	}
	logger, _ := cli.NewLogger(stderr, "info")
	if f.Paced {
		return Publish(ctx, u, PublishOptions{
			Broadcast: f.Broadcast, Track: f.Track, FrameTime: f.Interval, FramesPerGroup: f.Frames, FrameSize: f.Size, Logger: logger,
			TrustHTTPHash: f.TrustHTTPHash, Origins: origins,
		})
	}
	// The token file is read again at each reconnect: the relay closes
	// the session when its token expires.
	return client.RunPublish(ctx, f.URL, &client.Options{Logger: logger, Transport: f.Transport, TrustHTTPHash: f.TrustHTTPHash}, client.PublishOptions{
		Broadcast: f.Broadcast, Track: f.Track, Interval: f.Interval, FramesPerGroup: f.Frames, FrameSize: f.Size, Groups: f.Groups,
		TokenSource: client.TokenFileSource("token-file", f.TokenFile), Origins: f.Origins,
	}, stdout)
}
