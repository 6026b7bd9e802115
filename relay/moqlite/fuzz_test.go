package moqlite_test

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/relayfleet/relayfleet/relay/moqlite"
)

// FuzzDecode feeds arbitrary bytes to every decoder. Whatever decodes must
// re-encode to a body that decodes to the same encoding again.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		"03c0000000ff0dad02c0000000ff0dad01c0000000ff00000e02028000a455070b6d6f712d6c6974652d6a73",
		"046c697665", "02016103622f63", "0105726f6f6d31", "000a6c6976652f726f6f6d3105617564696f00",
		"0543e8", "", "00",
	} {
		b, _ := hex.DecodeString(s)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
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
		for _, mk := range msgs {
			m := mk()
			if err := m.DecodeBody(data); err != nil {
				continue
			}
			enc := m.AppendBody(nil)
			m2 := mk()
			if err := m2.DecodeBody(enc); err != nil {
				t.Fatalf("%T: re-decode of %x: %v", m, enc, err)
			}
			if enc2 := m2.AppendBody(nil); !bytes.Equal(enc, enc2) {
				t.Fatalf("%T: unstable encoding %x vs %x", m, enc, enc2)
			}
		}
		// Stream-level readers must not panic or over-allocate.
		r := bytes.NewReader(data)
		if _, err := moqlite.ReadGroupStart(r); err == nil {
			for i := 0; i < 16; i++ {
				if _, err := moqlite.ReadFrame(r); err != nil {
					break
				}
			}
		}
		_, _ = moqlite.ReadSetupBody(bytes.NewReader(data))
	})
}
