package moqlite_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/relayfleet/relayfleet/relay/moqlite"
)

func TestVarintRoundTrip(t *testing.T) {
	tests := []struct {
		v    uint64
		want string
	}{
		{0, "00"},
		{37, "25"},
		{63, "3f"},
		{64, "4040"},
		{15293, "7bbd"},
		{16383, "7fff"},
		{16384, "80004000"},
		{494878333, "9d7f3e7d"},
		{1<<30 - 1, "bfffffff"},
		{1 << 30, "c000000040000000"},
		{151288809941952652, "c2197c5eff14e88c"},
		{moqlite.MaxVarint, "ffffffffffffffff"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			b := moqlite.AppendVarint(nil, tt.v)
			if got := hex.EncodeToString(b); got != tt.want {
				t.Fatalf("AppendVarint(%d) = %s, want %s", tt.v, got, tt.want)
			}
			if moqlite.VarintLen(tt.v) != len(b) {
				t.Fatalf("VarintLen(%d) = %d, want %d", tt.v, moqlite.VarintLen(tt.v), len(b))
			}
			v, n, err := moqlite.ParseVarint(b)
			if err != nil || v != tt.v || n != len(b) {
				t.Fatalf("ParseVarint = %d, %d, %v", v, n, err)
			}
			v, err = moqlite.ReadVarint(bytes.NewReader(b))
			if err != nil || v != tt.v {
				t.Fatalf("ReadVarint = %d, %v", v, err)
			}
			if _, err := moqlite.ReadVarint(bytes.NewReader(b[:len(b)-1])); len(b) > 1 && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("truncated ReadVarint err = %v", err)
			}
		})
	}
	if _, err := moqlite.ReadVarint(bytes.NewReader(nil)); err != io.EOF {
		t.Fatalf("empty ReadVarint err = %v, want io.EOF", err)
	}
}

func TestMessageRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		msg  moqlite.Message
		zero func() moqlite.Message
	}{
		{"client setup", &moqlite.ClientSetup{Versions: []uint64{moqlite.Version02, moqlite.Version01}, Params: moqlite.Params{{Key: 2, Value: 9}, {Key: 7, Bytes: []byte("x")}}}, func() moqlite.Message { return new(moqlite.ClientSetup) }},
		{"server setup", &moqlite.ServerSetup{Version: moqlite.Version02}, func() moqlite.Message { return new(moqlite.ServerSetup) }},
		{"announce interest", &moqlite.AnnounceInterest{Prefix: "live/"}, func() moqlite.Message { return new(moqlite.AnnounceInterest) }},
		{"announce init", &moqlite.AnnounceInit{Suffixes: []string{"a", "b/c", ""}}, func() moqlite.Message { return new(moqlite.AnnounceInit) }},
		{"announce active", &moqlite.Announce{Active: true, Suffix: "room"}, func() moqlite.Message { return new(moqlite.Announce) }},
		{"announce ended", &moqlite.Announce{Active: false, Suffix: "room"}, func() moqlite.Message { return new(moqlite.Announce) }},
		{"subscribe", &moqlite.Subscribe{ID: 1 << 40, Broadcast: "b", Track: "audio", Priority: 255}, func() moqlite.Message { return new(moqlite.Subscribe) }},
		{"subscribe ok", &moqlite.SubscribeOk{}, func() moqlite.Message { return new(moqlite.SubscribeOk) }},
		{"subscribe update", &moqlite.SubscribeUpdate{Priority: 4}, func() moqlite.Message { return new(moqlite.SubscribeUpdate) }},
		{"session info", &moqlite.SessionInfo{Bitrate: 64000}, func() moqlite.Message { return new(moqlite.SessionInfo) }},
		{"group", &moqlite.GroupHeader{Subscribe: 3, Sequence: 1 << 20}, func() moqlite.Message { return new(moqlite.GroupHeader) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wire := moqlite.AppendMessage(nil, tt.msg)
			got := tt.zero()
			if err := moqlite.ReadMessage(bytes.NewReader(wire), got); err != nil {
				t.Fatalf("ReadMessage: %v", err)
			}
			if !reflect.DeepEqual(normalize(got), normalize(tt.msg)) {
				t.Fatalf("round trip = %#v, want %#v", got, tt.msg)
			}
			// One more byte inside the size prefix must be rejected.
			body := append(tt.msg.AppendBody(nil), 0)
			if err := tt.zero().DecodeBody(body); err == nil {
				t.Fatalf("DecodeBody accepted a trailing byte")
			}
			// Every strict prefix of a non-empty body must be rejected.
			full := tt.msg.AppendBody(nil)
			for i := 0; i < len(full); i++ {
				if err := tt.zero().DecodeBody(full[:i]); err == nil {
					t.Fatalf("DecodeBody accepted %d of %d bytes", i, len(full))
				}
			}
		})
	}
}

// normalize maps nil and empty slices to the same value for comparison.
func normalize(m moqlite.Message) moqlite.Message {
	switch v := m.(type) {
	case *moqlite.ServerSetup:
		c := *v
		if len(c.Params) == 0 {
			c.Params = nil
		}
		return &c
	case *moqlite.ClientSetup:
		c := *v
		if len(c.Params) == 0 {
			c.Params = nil
		}
		return &c
	}
	return m
}

// Byte strings below were produced by the encoders of the published npm
// package @moq/lite 0.2.2 (dist/lite/*.js, dist/ietf/setup.js) with the
// exact arguments its Connection.connect, Publisher and Subscriber use.
func TestWireFromMoqLiteJS(t *testing.T) {
	t.Run("client setup", func(t *testing.T) {
		wire := mustHex(t, "20002c03c0000000ff0dad02c0000000ff0dad01c0000000ff00000e02028000a455070b6d6f712d6c6974652d6a73")
		r := bytes.NewReader(wire)
		typ, err := moqlite.ReadVarint(r)
		if err != nil || typ != moqlite.StreamClientSetup {
			t.Fatalf("type = %#x, %v", typ, err)
		}
		body, err := moqlite.ReadSetupBody(r)
		if err != nil {
			t.Fatal(err)
		}
		var cs moqlite.ClientSetup
		if err := cs.DecodeBody(body); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cs.Versions, []uint64{moqlite.Version02, moqlite.Version01, moqlite.VersionIETF14}) {
			t.Fatalf("versions = %x", cs.Versions)
		}
		if v, ok := cs.Params.Varint(moqlite.ParamMaxRequestID); !ok || v != 42069 {
			t.Fatalf("max request id = %d, %v", v, ok)
		}
		if v, ok := cs.Params.Bytes(moqlite.ParamImplementation); !ok || string(v) != "moq-lite-js" {
			t.Fatalf("implementation = %q, %v", v, ok)
		}
		again, err := moqlite.AppendSetup(nil, moqlite.StreamClientSetup, &cs)
		if err != nil || !bytes.Equal(again, wire) {
			t.Fatalf("re-encoded %x, want %x (%v)", again, wire, err)
		}
	})
	t.Run("server setup", func(t *testing.T) {
		got, err := moqlite.AppendSetup(nil, moqlite.StreamServerSetup, &moqlite.ServerSetup{Version: moqlite.Version02})
		if err != nil {
			t.Fatal(err)
		}
		if want := "210009c0000000ff0dad0200"; hex.EncodeToString(got) != want {
			t.Fatalf("server setup = %x, want %s", got, want)
		}
	})
	tests := []struct {
		name string
		hex  string
		typ  int64 // stream type varint before the message, -1 if none
		msgs []moqlite.Message
		zero func() moqlite.Message
	}{
		{"announce interest", "0105046c697665", int64(moqlite.StreamAnnounce), []moqlite.Message{&moqlite.AnnounceInterest{Prefix: "live"}}, func() moqlite.Message { return new(moqlite.AnnounceInterest) }},
		{"announce init", "0702016103622f63", -1, []moqlite.Message{&moqlite.AnnounceInit{Suffixes: []string{"a", "b/c"}}}, func() moqlite.Message { return new(moqlite.AnnounceInit) }},
		{"announce", "070105726f6f6d31070005726f6f6d31", -1, []moqlite.Message{&moqlite.Announce{Active: true, Suffix: "room1"}, &moqlite.Announce{Suffix: "room1"}}, func() moqlite.Message { return new(moqlite.Announce) }},
		{"subscribe", "0213000a6c6976652f726f6f6d3105617564696f00", int64(moqlite.StreamSubscribe), []moqlite.Message{&moqlite.Subscribe{Broadcast: "live/room1", Track: "audio"}}, func() moqlite.Message { return new(moqlite.Subscribe) }},
		{"subscribe big id", "098001117001780174c8", -1, []moqlite.Message{&moqlite.Subscribe{ID: 70000, Broadcast: "x", Track: "t", Priority: 200}}, func() moqlite.Message { return new(moqlite.Subscribe) }},
		{"subscribe ok", "00", -1, []moqlite.Message{&moqlite.SubscribeOk{}}, func() moqlite.Message { return new(moqlite.SubscribeOk) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wire := mustHex(t, tt.hex)
			r := bytes.NewReader(wire)
			var enc []byte
			if tt.typ >= 0 {
				typ, err := moqlite.ReadVarint(r)
				if err != nil || typ != uint64(tt.typ) {
					t.Fatalf("type = %d, %v", typ, err)
				}
				enc = moqlite.AppendVarint(enc, typ)
			}
			for _, want := range tt.msgs {
				got := tt.zero()
				if err := moqlite.ReadMessage(r, got); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("decoded %#v, want %#v", got, want)
				}
				enc = moqlite.AppendMessage(enc, want)
			}
			if r.Len() != 0 {
				t.Fatalf("%d bytes left", r.Len())
			}
			if !bytes.Equal(enc, wire) {
				t.Fatalf("encoded %x, want %x", enc, wire)
			}
		})
	}
	t.Run("group stream", func(t *testing.T) {
		wire := mustHex(t, "00030543e80301020300")
		r := bytes.NewReader(wire)
		h, err := moqlite.ReadGroupStart(r)
		if err != nil || h != (moqlite.GroupHeader{Subscribe: 5, Sequence: 1000}) {
			t.Fatalf("header = %+v, %v", h, err)
		}
		f1, err := moqlite.ReadFrame(r)
		if err != nil || !bytes.Equal(f1, []byte{1, 2, 3}) {
			t.Fatalf("frame 1 = %x, %v", f1, err)
		}
		f2, err := moqlite.ReadFrame(r)
		if err != nil || len(f2) != 0 {
			t.Fatalf("frame 2 = %x, %v", f2, err)
		}
		if _, err := moqlite.ReadFrame(r); err != io.EOF {
			t.Fatalf("end of group err = %v, want io.EOF", err)
		}
		enc := moqlite.AppendGroupStart(nil, h)
		enc = moqlite.AppendFrame(enc, []byte{1, 2, 3})
		enc = moqlite.AppendFrame(enc, nil)
		if !bytes.Equal(enc, wire) {
			t.Fatalf("encoded %x, want %x", enc, wire)
		}
	})
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name string
		hex  string
		msg  moqlite.Message
		want error
	}{
		{"bad bool", "0205", new(moqlite.Announce), moqlite.ErrMalformed},
		{"bad utf8", "0001ff", new(moqlite.Announce), moqlite.ErrMalformed},
		{"string past end", "09", new(moqlite.AnnounceInterest), moqlite.ErrMalformed},
		{"huge list", "80010000", new(moqlite.AnnounceInit), moqlite.ErrTooLarge},
		{"duplicate param", "01c0000000ff0dad02020202020203", new(moqlite.ClientSetup), moqlite.ErrMalformed},
		{"trailing", "010000", new(moqlite.AnnounceInit), moqlite.ErrTrailing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.msg.DecodeBody(mustHex(t, tt.hex))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	t.Run("oversized message", func(t *testing.T) {
		wire := moqlite.AppendVarint(nil, moqlite.MaxMessageSize+1)
		if _, err := moqlite.ReadMessageBody(bytes.NewReader(wire), moqlite.MaxMessageSize); !errors.Is(err, moqlite.ErrTooLarge) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("unknown uni type", func(t *testing.T) {
		if _, err := moqlite.ReadGroupStart(bytes.NewReader([]byte{1, 0})); !errors.Is(err, moqlite.ErrMalformed) {
			t.Fatalf("err = %v", err)
		}
	})
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
