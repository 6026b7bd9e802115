package client_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/internal/oggtest"
)

type oggRead struct {
	p       []byte
	granule uint64
}

func readAll(t *testing.T, r *client.OggOpusReader) ([]oggRead, error) {
	t.Helper()
	var got []oggRead
	for {
		p, g, err := r.Next()
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return got, err
		}
		got = append(got, oggRead{p, g})
	}
}

func TestOggOpusReaderPackets(t *testing.T) {
	w := &oggtest.Writer{Serial: 0x1234}
	w.Headers()
	// Page 2: whole packets at the 255 edges: 254 bytes (one lacing
	// value), 255 (255 then 0), 510 (255, 255, 0) and 2 bytes.
	a, b, c, d := oggtest.Packet120(254, 'a'), oggtest.Packet120(255, 'b'), oggtest.Packet120(510, 'c'), oggtest.Packet120(2, 'd')
	const g0 = 312 + 4*5760
	w.Page(0, g0, a, b, c, d)
	// Pages 3 and 4: f, then e (600 bytes) starts on page 3 with two 255
	// lacing values and ends on page 4, before another d.
	f, e := oggtest.Packet120(20, 'f'), oggtest.Packet120(600, 'e')
	w.RawPage(0, g0+5760, append(oggtest.Lace(len(f)), 255, 255), append(append([]byte{}, f...), e[:510]...))
	w.RawPage(0x01, g0+3*5760, append([]byte{90}, oggtest.Lace(len(d))...), append(append([]byte{}, e[510:]...), d...))
	// Pages 5 and 6: a 255-byte packet whose terminating 0 lacing value is
	// alone on the next page; no packet ends on page 5 (granule -1). The
	// last page's granule trims the end.
	g, h := oggtest.Packet120(255, 'g'), oggtest.Packet120(3, 'h')
	w.RawPage(0, ^uint64(0), []byte{255}, g)
	w.RawPage(0x01|0x04, g0+5*5760-100, []byte{0, 3}, h)

	got, err := readAll(t, client.NewOggOpusReader(&w.Buf))
	if err != nil {
		t.Fatal(err)
	}
	want := []oggRead{
		{a, g0 - 3*5760}, {b, g0 - 2*5760}, {c, g0 - 5760}, {d, g0},
		{f, g0 + 5760},
		{e, g0 + 2*5760}, {d, g0 + 3*5760},
		{g, g0 + 4*5760}, {h, g0 + 5*5760 - 100},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d packets, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].p, want[i].p) {
			t.Errorf("packet %d: got %d bytes %.8q, want %d bytes %.8q", i, len(got[i].p), got[i].p, len(want[i].p), want[i].p)
		}
		if got[i].granule != want[i].granule {
			t.Errorf("packet %d: granule %d, want %d", i, got[i].granule, want[i].granule)
		}
	}
}

func TestOggOpusReaderGranuleStep(t *testing.T) {
	// Three pages of 120 ms packets: granules rise by 5760 a packet, the
	// last page trimmed at the end (RFC 7845 section 4.4).
	w := &oggtest.Writer{Serial: 7}
	w.Headers()
	var pkts [][]byte
	for i := range 8 {
		pkts = append(pkts, oggtest.Packet120(30+i, byte(i)))
	}
	w.Page(0, 312+3*5760, pkts[:3]...)
	w.Page(0, 312+6*5760, pkts[3:6]...)
	w.Page(0x04, 312+7*5760+1000, pkts[6:]...)
	got, err := readAll(t, client.NewOggOpusReader(&w.Buf))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 8 {
		t.Fatalf("got %d packets", len(got))
	}
	for i, r := range got {
		want := uint64(312 + (i+1)*5760)
		if i == 7 {
			want = 312 + 7*5760 + 1000
		}
		if r.granule != want || !bytes.Equal(r.p, pkts[i]) {
			t.Errorf("packet %d: granule %d (want %d), %d bytes", i, r.granule, want, len(r.p))
		}
	}
}

func TestOggOpusReaderErrors(t *testing.T) {
	audio := oggtest.Packet120(40, 'x')
	valid := func() *oggtest.Writer {
		w := &oggtest.Writer{Serial: 9}
		w.Headers()
		w.Page(0, 312+5760, audio)
		return w
	}
	cases := []struct {
		name  string
		build func() []byte
		want  string
	}{
		{"crc", func() []byte {
			b := valid().Buf.Bytes()
			b[len(b)-1] ^= 0x20
			return b
		}, "CRC mismatch"},
		{"capture pattern", func() []byte {
			b := valid().Buf.Bytes()
			b[0] = 'o'
			return b
		}, "OggS"},
		{"version", func() []byte {
			w := &oggtest.Writer{}
			w.Headers()
			b := w.Buf.Bytes()
			b[4] = 1 // the version check comes before the CRC check
			return b
		}, "version 1"},
		{"second stream", func() []byte {
			w := valid()
			w.Serial++
			w.Page(0, 312+2*5760, audio)
			return w.Buf.Bytes()
		}, "second logical stream"},
		{"not opus", func() []byte {
			w := &oggtest.Writer{}
			w.Page(0x02, 0, []byte("\x01vorbis\x00\x00\x00\x00\x02\x44\xac\x00\x00"))
			return w.Buf.Bytes()
		}, "not OpusHead"},
		{"no tags", func() []byte {
			w := &oggtest.Writer{}
			w.Page(0x02, 0, oggtest.OpusHead())
			w.Page(0, 5760, audio)
			return w.Buf.Bytes()
		}, "OpusTags"},
		{"no bos", func() []byte {
			w := &oggtest.Writer{}
			w.Page(0, 0, oggtest.OpusHead())
			return w.Buf.Bytes()
		}, "beginning-of-stream"},
		{"lost page", func() []byte {
			w := valid()
			w.Seq++
			w.Page(0, 312+2*5760, audio)
			return w.Buf.Bytes()
		}, "pages lost"},
		{"not continued", func() []byte {
			w := valid()
			w.RawPage(0, ^uint64(0), []byte{255}, bytes.Repeat([]byte{1}, 255))
			w.Page(0, 312+2*5760, audio)
			return w.Buf.Bytes()
		}, "not continued"},
		{"continues nothing", func() []byte {
			w := valid()
			w.RawPage(0x01, 312+2*5760, []byte{40}, audio)
			return w.Buf.Bytes()
		}, "never started"},
		{"ends in a packet", func() []byte {
			w := valid()
			w.RawPage(0, ^uint64(0), []byte{255}, bytes.Repeat([]byte{1}, 255))
			return w.Buf.Bytes()
		}, "inside a packet"},
		{"truncated", func() []byte {
			b := valid().Buf.Bytes()
			return b[:len(b)-3]
		}, "truncated"},
		{"empty", func() []byte { return nil }, "before the Opus headers"},
		{"bad toc", func() []byte {
			w := valid()
			w.Page(0, 312+2*5760, []byte{31<<3 | 3, 7}) // 140 ms
			return w.Buf.Bytes()
		}, "120 ms"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := client.NewOggOpusReader(bytes.NewReader(tc.build()))
			_, err := readAll(t, r)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if _, _, again := r.Next(); again == nil || again.Error() != err.Error() {
				t.Fatalf("second Next after the error: %v", again)
			}
		})
	}
	// The valid stream, for contrast, reads cleanly.
	got, err := readAll(t, client.NewOggOpusReader(bytes.NewReader(valid().Buf.Bytes())))
	if err != nil || len(got) != 1 || !bytes.Equal(got[0].p, audio) {
		t.Fatalf("valid stream: %v, %v", got, err)
	}
}

func TestOggOpusReaderEOFIsClean(t *testing.T) {
	w := &oggtest.Writer{}
	w.Headers()
	r := client.NewOggOpusReader(&w.Buf)
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("headers only: %v, want io.EOF", err)
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("again: %v, want io.EOF", err)
	}
	// A stream cut inside its headers is an unexpected EOF.
	w = &oggtest.Writer{}
	w.Page(0x02, 0, oggtest.OpusHead())
	if _, _, err := client.NewOggOpusReader(&w.Buf).Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("OpusHead only: %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestPacketDuration(t *testing.T) {
	toc := func(config, code byte) byte { return config<<3 | code }
	cases := []struct {
		p    []byte
		want time.Duration
	}{
		{[]byte{toc(0, 0)}, 10 * time.Millisecond},  // SILK NB
		{[]byte{toc(1, 0)}, 20 * time.Millisecond},  // SILK NB
		{[]byte{toc(2, 0)}, 40 * time.Millisecond},  // SILK NB
		{[]byte{toc(3, 0)}, 60 * time.Millisecond},  // SILK NB
		{[]byte{toc(7, 0)}, 60 * time.Millisecond},  // SILK MB
		{[]byte{toc(9, 0)}, 20 * time.Millisecond},  // SILK WB
		{[]byte{toc(12, 0)}, 10 * time.Millisecond}, // Hybrid SWB
		{[]byte{toc(15, 0)}, 20 * time.Millisecond}, // Hybrid FB
		{[]byte{toc(16, 0)}, 2500 * time.Microsecond},
		{[]byte{toc(17, 0)}, 5 * time.Millisecond},
		{[]byte{toc(18, 0)}, 10 * time.Millisecond},
		{[]byte{toc(31, 0)}, 20 * time.Millisecond},                   // CELT FB
		{[]byte{toc(3, 1), 0}, 120 * time.Millisecond},                // two 60 ms frames, equal
		{[]byte{toc(3, 2), 1, 0}, 120 * time.Millisecond},             // two 60 ms frames, different sizes
		{[]byte{toc(1, 3), 6}, 120 * time.Millisecond},                // code 3: six 20 ms frames
		{[]byte{toc(31, 3), 6 | 0x80 | 0x40}, 120 * time.Millisecond}, // VBR and padding bits ignored
		{[]byte{toc(16, 3), 48}, 120 * time.Millisecond},              // 48 frames of 2.5 ms
		{[]byte{toc(11, 3), 2}, 120 * time.Millisecond},               // two 60 ms SILK WB frames
		{[]byte{toc(20, 3), 3}, 7500 * time.Microsecond},
	}
	for _, tc := range cases {
		got, err := client.PacketDuration(tc.p)
		if err != nil || got != tc.want {
			t.Errorf("PacketDuration(% x) = %v, %v; want %v", tc.p, got, err, tc.want)
		}
	}
	for _, bad := range [][]byte{nil, {toc(1, 3)}, {toc(1, 3), 0}, {toc(1, 3), 7}, {toc(3, 3), 3}, {toc(16, 3), 49}} {
		if d, err := client.PacketDuration(bad); err == nil {
			t.Errorf("PacketDuration(% x) = %v, want an error", bad, d)
		}
	}
}

// TestOggOpusReaderFFmpeg reads what ffmpeg's libopus encoder writes with
// the demo's flags: 120 ms voip packets at 48 kHz mono.
func TestOggOpusReaderFFmpeg(t *testing.T) {
	ffmpeg := testutil.Require(t, "ffmpeg", "ffmpeg")
	file := filepath.Join(t.TempDir(), "sine.ogg")
	cmd := exec.Command(ffmpeg, "-hide_banner", "-loglevel", "error", "-f", "lavfi",
		"-i", "sine=frequency=440:sample_rate=48000:duration=2",
		"-c:a", "libopus", "-ar", "48000", "-ac", "1", "-b:a", "32k",
		"-frame_duration", "120", "-application", "voip", "-f", "ogg", file)
	if out, err := cmd.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "Unknown encoder") {
			testutil.Skipf(t, "this ffmpeg has no libopus: %s", out)
		}
		t.Fatalf("ffmpeg: %v\n%s", err, out)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := readAll(t, client.NewOggOpusReader(f))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got); n < 2000/120-2 || n > 2000/120+2 {
		t.Errorf("%d packets, want about 2 s / 120 ms = %d", n, 2000/120)
	}
	for i, r := range got {
		d, err := client.PacketDuration(r.p)
		if err != nil || d != 120*time.Millisecond {
			t.Errorf("packet %d (TOC %#02x): duration %v, %v; want 120ms", i, r.p[0], d, err)
		}
		if i == 0 {
			continue
		}
		step := r.granule - got[i-1].granule
		// The last page's granule trims the stream to its real end.
		if step != 5760 && !(i == len(got)-1 && step > 0 && step <= 5760) {
			t.Errorf("packet %d: granule %d, %d after the previous; want 5760", i, r.granule, step)
		}
	}
	t.Logf("%d packets, TOC %#02x, first granule %d, last %d", len(got), got[0].p[0], got[0].granule, got[len(got)-1].granule)
}
