package moqlite_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"testing"

	"github.com/relayfleet/relayfleet/relay/moqlite"
)

// Allocation bounds: decoding n bytes of input may allocate at most
// allocPerByte*n plus a constant. A peer's bytes are cheap to send and may
// arrive slowly (or never), so a reader allocates as bytes arrive, not what
// a length prefix declares: 4,096 streams each stalled after a header must
// not pin 4,096 declared sizes.
const (
	allocPerByte = 8 // generous: append growth reallocates
	// readSlack is the constant for the stream readers (ReadFrame,
	// ReadGroupStart, ReadMessage, ReadSetupBody): at 4,096 streams that
	// stall after a header it is 64 MiB at most.
	readSlack = 16 << 10
	// decodeSlack is the constant for DecodeBody, which works on a body
	// already read; a parameter list's map hint (up to 1,024 entries) is
	// what it is for.
	decodeSlack = 64 << 10
)

// checkAlloc fails t when f allocates more than allocPerByte*n+slack bytes.
// TotalAlloc counts every goroutine's allocations, so a figure over the
// bound is measured twice more and the smallest taken: only f's own
// allocations are in all three.
func checkAlloc(t *testing.T, what string, n int, slack uint64, f func()) {
	t.Helper()
	limit := allocPerByte*uint64(n) + slack
	got := allocated(f)
	for i := 0; i < 2 && got > limit; i++ {
		got = min(got, allocated(f))
	}
	if got > limit {
		t.Errorf("%s: %d bytes of input allocated %d bytes, want at most %d (%d per byte + %d)", what, n, got, limit, allocPerByte, slack)
	}
}

// FuzzDecode feeds arbitrary bytes to every decoder. Whatever decodes must
// re-encode to a body that decodes to the same encoding again, and no
// decoder or stream reader may allocate much more than the bytes it was
// given.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		"03c0000000ff0dad02c0000000ff0dad01c0000000ff00000e02028000a455070b6d6f712d6c6974652d6a73",
		"046c697665", "02016103622f63", "0105726f6f6d31", "000a6c6976652f726f6f6d3105617564696f00",
		"0543e8", "", "00",
		// A group start, then a frame header declaring 1 MiB and no payload.
		"0002010280100000",
		// A group header whose size prefix declares 64 KiB, and nothing more.
		"0080010000",
		// A control message whose size prefix declares 64 KiB.
		"80010000",
		// A setup length of 65,535 and no body.
		"ffff",
		// A parameter list of 1,024 entries, and nothing more.
		"4400",
	} {
		b, err := hex.DecodeString(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	msgs := []func() moqlite.Message{
		func() moqlite.Message { return new(moqlite.ClientSetup) },
		func() moqlite.Message { return new(moqlite.ServerSetup) },
		func() moqlite.Message { return new(moqlite.AnnounceInterest) },
		func() moqlite.Message { return new(moqlite.AnnounceInit) },
		func() moqlite.Message { return new(moqlite.Announce) },
		func() moqlite.Message { return new(moqlite.Subscribe) },
		func() moqlite.Message { return new(moqlite.SubscribeOk) },
		func() moqlite.Message { return new(moqlite.SubscribeUpdate) },
		func() moqlite.Message { return new(moqlite.GroupHeader) },
		func() moqlite.Message { return new(moqlite.SessionInfo) },
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, mk := range msgs {
			m := mk()
			if err := m.DecodeBody(data); err != nil {
				checkAlloc(t, fmt.Sprintf("%T.DecodeBody", m), len(data), decodeSlack, func() { _ = mk().DecodeBody(data) })
				continue
			}
			checkAlloc(t, fmt.Sprintf("%T.DecodeBody", m), len(data), decodeSlack, func() { _ = mk().DecodeBody(data) })
			enc := m.AppendBody(nil)
			m2 := mk()
			if err := m2.DecodeBody(enc); err != nil {
				t.Fatalf("%T: re-decode of %x: %v", m, enc, err)
			}
			if enc2 := m2.AppendBody(nil); !bytes.Equal(enc, enc2) {
				t.Fatalf("%T: unstable encoding %x vs %x", m, enc, enc2)
			}
		}
		// Stream-level readers must not panic or over-allocate: a group
		// stream (its start, then frames), a control message, a setup.
		group := func() {
			r := bytes.NewReader(data)
			if _, err := moqlite.ReadGroupStart(r); err == nil {
				for range 16 {
					if _, err := moqlite.ReadFrame(r); err != nil {
						break
					}
				}
			}
		}
		group()
		checkAlloc(t, "ReadGroupStart+ReadFrame", len(data), readSlack, group)
		checkAlloc(t, "ReadFrame", len(data), readSlack, func() {
			_, _ = moqlite.ReadFrame(bytes.NewReader(data))
		})
		checkAlloc(t, "ReadMessage", len(data), readSlack, func() {
			_ = moqlite.ReadMessage(bytes.NewReader(data), new(moqlite.Subscribe))
		})
		checkAlloc(t, "ReadSetupBody", len(data), readSlack, func() {
			_, _ = moqlite.ReadSetupBody(bytes.NewReader(data))
		})
		// A reader that hands over one byte at a time, as a slow peer's
		// stream does, must come to the same result.
		if want, err := moqlite.ReadFrame(bytes.NewReader(data)); err == nil {
			got, err := moqlite.ReadFrame(oneByteReader{bytes.NewReader(data)})
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("ReadFrame byte by byte: %x, %v; want %x", got, err, want)
			}
		}
	})
}

// oneByteReader returns at most one byte per Read.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}
