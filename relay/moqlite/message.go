package moqlite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Versions and protocol identifiers.
const (
	// Version01 is moq-lite-01.
	Version01 uint64 = 0xff0dad01
	// Version02 is moq-lite-02, the version this package speaks.
	Version02 uint64 = 0xff0dad02
	// VersionIETF14 is moq-transport draft 14, offered by @moq/lite for compatibility.
	VersionIETF14 uint64 = 0xff00000e

	// ALPN is the QUIC ALPN (and WebTransport protocol) under which the
	// version is chosen by SETUP.
	ALPN = "moql"
)

// Bidirectional stream types: the first varint on a bidi stream.
const (
	StreamSession   uint64 = 0
	StreamAnnounce  uint64 = 1
	StreamSubscribe uint64 = 2
	StreamFetch     uint64 = 3
	StreamProbe     uint64 = 4
	StreamGoaway    uint64 = 5
	// StreamClientSetup is the draft-14 compatible CLIENT_SETUP type (0x20).
	StreamClientSetup uint64 = 0x20
	// StreamServerSetup is the draft-14 compatible SERVER_SETUP type (0x21).
	StreamServerSetup uint64 = 0x21
)

// UniGroup is the type byte that starts a group (unidirectional) stream.
const UniGroup byte = 0

// SETUP parameter keys (draft-14 numbering). Even keys carry a varint, odd
// keys carry bytes.
const (
	ParamPath           uint64 = 1
	ParamMaxRequestID   uint64 = 2
	ParamAuthToken      uint64 = 3
	ParamImplementation uint64 = 7
)

// Limits applied while decoding, so a peer cannot make us allocate much.
const (
	// MaxMessageSize bounds a control message body.
	MaxMessageSize = 64 << 10
	// MaxFrameSize bounds one frame payload (audio frames are tiny).
	MaxFrameSize = 1 << 20
	// MaxListLen bounds the entries of a decoded list (versions,
	// parameters, AnnounceInit suffixes).
	MaxListLen = 1024
	maxListLen = MaxListLen
)

var (
	// ErrTooLarge is returned when a size prefix exceeds the allowed maximum.
	ErrTooLarge = errors.New("moqlite: message too large")
	// ErrTrailing is returned when a message body has bytes left over.
	ErrTrailing = errors.New("moqlite: trailing bytes in message")
	// ErrMalformed is returned for invalid field values.
	ErrMalformed = errors.New("moqlite: malformed message")
)

// parser decodes fields from a message body; the first error sticks.
type parser struct {
	b   []byte
	err error
}

func (p *parser) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

func (p *parser) varint() uint64 {
	if p.err != nil {
		return 0
	}
	v, n, err := ParseVarint(p.b)
	if err != nil {
		p.fail(err)
		return 0
	}
	p.b = p.b[n:]
	return v
}

func (p *parser) u8() uint8 {
	if p.err != nil {
		return 0
	}
	if len(p.b) < 1 {
		p.fail(io.ErrUnexpectedEOF)
		return 0
	}
	v := p.b[0]
	p.b = p.b[1:]
	return v
}

func (p *parser) bool() bool {
	switch p.u8() {
	case 0:
		return false
	case 1:
		return true
	default:
		p.fail(fmt.Errorf("%w: invalid bool", ErrMalformed))
		return false
	}
}

func (p *parser) bytes() []byte {
	n := p.varint()
	if p.err != nil {
		return nil
	}
	if n > uint64(len(p.b)) {
		p.fail(io.ErrUnexpectedEOF)
		return nil
	}
	v := p.b[:n:n]
	p.b = p.b[n:]
	return v
}

func (p *parser) string() string {
	b := p.bytes()
	if p.err == nil && !utf8.Valid(b) {
		p.fail(fmt.Errorf("%w: invalid utf-8", ErrMalformed))
	}
	return string(b)
}

func (p *parser) count() int {
	n := p.varint()
	if p.err == nil && n > maxListLen {
		p.fail(fmt.Errorf("%w: list of %d entries", ErrTooLarge, n))
		return 0
	}
	return int(n)
}

func (p *parser) finish() error {
	if p.err != nil {
		if errors.Is(p.err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: truncated", ErrMalformed)
		}
		return p.err
	}
	if len(p.b) != 0 {
		return ErrTrailing
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = AppendVarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// Message is a moq-lite message body that can be size-prefixed.
type Message interface {
	// AppendBody appends the message body without its size prefix.
	AppendBody(b []byte) []byte
	// DecodeBody parses a complete body; leftover bytes are an error.
	DecodeBody(body []byte) error
}

// AppendMessage appends m with its varint size prefix.
func AppendMessage(b []byte, m Message) []byte {
	body := m.AppendBody(nil)
	b = AppendVarint(b, uint64(len(body)))
	return append(b, body...)
}

// ReadMessageBody reads a varint size prefix and that many bytes from r.
// A clean end of stream before the prefix is returned as io.EOF.
func ReadMessageBody(r io.Reader, max int) ([]byte, error) {
	n, err := ReadVarint(r)
	if err != nil {
		return nil, err
	}
	if n > uint64(max) {
		return nil, fmt.Errorf("%w: %d bytes", ErrTooLarge, n)
	}
	body, err := readBody(r, int(n), nil)
	if err != nil {
		return nil, fmt.Errorf("read message: %w", err)
	}
	return body, nil
}

// firstChunk is the most readBody allocates before any byte of a body has
// arrived; it then at most doubles what it holds, so a peer that declares a
// large size and stalls costs this much, not the size it declared.
const firstChunk = 1 << 10

// readBody reads exactly n bytes from r, allocating as they arrive: a
// buffer of min(n, firstChunk) first, doubled (up to n) each time it
// fills. When b is not nil every allocation is reserved in it first; on
// success the n bytes stay reserved (the caller releases them), on error
// nothing does. An early end of stream is io.ErrUnexpectedEOF.
func readBody(r io.Reader, n int, b *Budget) ([]byte, error) {
	size := min(n, firstChunk)
	if !b.Reserve(size) {
		return nil, ErrOverBudget
	}
	buf := make([]byte, size)
	got := 0
	for {
		m, err := io.ReadFull(r, buf[got:])
		got += m
		if err != nil {
			b.Release(len(buf))
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if got == n {
			return buf, nil
		}
		// Both buffers are held while copying: reserve the new one whole,
		// then give back the old.
		size := min(n, 2*len(buf))
		if !b.Reserve(size) {
			b.Release(len(buf))
			return nil, ErrOverBudget
		}
		next := make([]byte, size)
		copy(next, buf[:got])
		b.Release(len(buf))
		buf = next
	}
}

// ReadMessage reads one size-prefixed message from r into m.
func ReadMessage(r io.Reader, m Message) error {
	body, err := ReadMessageBody(r, MaxMessageSize)
	if err != nil {
		return err
	}
	return m.DecodeBody(body)
}

// Param is one SETUP parameter. Even keys carry Value, odd keys carry Bytes.
type Param struct {
	Key   uint64
	Value uint64
	Bytes []byte
}

// Params is an ordered SETUP parameter list.
type Params []Param

// Bytes returns the bytes of the odd-keyed parameter key.
func (ps Params) Bytes(key uint64) ([]byte, bool) {
	for _, p := range ps {
		if p.Key == key && key%2 == 1 {
			return p.Bytes, true
		}
	}
	return nil, false
}

// Varint returns the value of the even-keyed parameter key.
func (ps Params) Varint(key uint64) (uint64, bool) {
	for _, p := range ps {
		if p.Key == key && key%2 == 0 {
			return p.Value, true
		}
	}
	return 0, false
}

func (ps Params) appendTo(b []byte) []byte {
	b = AppendVarint(b, uint64(len(ps)))
	for _, p := range ps {
		b = AppendVarint(b, p.Key)
		if p.Key%2 == 0 {
			b = AppendVarint(b, p.Value)
		} else {
			b = AppendVarint(b, uint64(len(p.Bytes)))
			b = append(b, p.Bytes...)
		}
	}
	return b
}

func (p *parser) params() Params {
	n := p.count()
	var ps Params
	seen := make(map[uint64]bool, n)
	for i := 0; i < n && p.err == nil; i++ {
		k := p.varint()
		if seen[k] {
			p.fail(fmt.Errorf("%w: duplicate parameter %d", ErrMalformed, k))
			break
		}
		seen[k] = true
		if k%2 == 0 {
			ps = append(ps, Param{Key: k, Value: p.varint()})
		} else {
			ps = append(ps, Param{Key: k, Bytes: p.bytes()})
		}
	}
	return ps
}

// ClientSetup is the client's SETUP, sent after stream type 0x20 with a u16
// big-endian length: the versions it supports and its parameters.
type ClientSetup struct {
	Versions []uint64
	Params   Params
}

// AppendBody implements Message.
func (m *ClientSetup) AppendBody(b []byte) []byte {
	b = AppendVarint(b, uint64(len(m.Versions)))
	for _, v := range m.Versions {
		b = AppendVarint(b, v)
	}
	return m.Params.appendTo(b)
}

// DecodeBody implements Message.
func (m *ClientSetup) DecodeBody(body []byte) error {
	p := parser{b: body}
	n := p.count()
	m.Versions = nil
	for i := 0; i < n && p.err == nil; i++ {
		m.Versions = append(m.Versions, p.varint())
	}
	m.Params = p.params()
	if err := p.finish(); err != nil {
		return fmt.Errorf("client setup: %w", err)
	}
	return nil
}

// Supports reports whether the client offered version v.
func (m *ClientSetup) Supports(v uint64) bool {
	for _, x := range m.Versions {
		if x == v {
			return true
		}
	}
	return false
}

// ServerSetup is the server's answer, sent after stream type 0x21 with a u16
// big-endian length: the chosen version and parameters.
type ServerSetup struct {
	Version uint64
	Params  Params
}

// AppendBody implements Message.
func (m *ServerSetup) AppendBody(b []byte) []byte {
	b = AppendVarint(b, m.Version)
	return m.Params.appendTo(b)
}

// DecodeBody implements Message.
func (m *ServerSetup) DecodeBody(body []byte) error {
	p := parser{b: body}
	m.Version = p.varint()
	m.Params = p.params()
	if err := p.finish(); err != nil {
		return fmt.Errorf("server setup: %w", err)
	}
	return nil
}

// AppendSetup appends a SETUP message: its stream type varint, a u16
// big-endian body length and the body.
func AppendSetup(b []byte, typ uint64, m Message) ([]byte, error) {
	body := m.AppendBody(nil)
	if len(body) > 0xffff {
		return b, fmt.Errorf("setup: %w", ErrTooLarge)
	}
	b = AppendVarint(b, typ)
	b = binary.BigEndian.AppendUint16(b, uint16(len(body)))
	return append(b, body...), nil
}

// ReadSetupBody reads the u16 big-endian length and body of a SETUP message
// whose type varint has already been read.
func ReadSetupBody(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, fmt.Errorf("read setup length: %w", err)
	}
	body, err := readBody(r, int(binary.BigEndian.Uint16(l[:])), nil)
	if err != nil {
		return nil, fmt.Errorf("read setup: %w", err)
	}
	return body, nil
}

// AnnounceInterest opens an announce stream: the prefix whose broadcasts the
// opener wants to hear about.
type AnnounceInterest struct {
	Prefix string
}

// AppendBody implements Message.
func (m *AnnounceInterest) AppendBody(b []byte) []byte { return appendString(b, m.Prefix) }

// DecodeBody implements Message.
func (m *AnnounceInterest) DecodeBody(body []byte) error {
	p := parser{b: body}
	m.Prefix = p.string()
	if err := p.finish(); err != nil {
		return fmt.Errorf("announce interest: %w", err)
	}
	return nil
}

// AnnounceInit answers an AnnounceInterest with the suffixes of every
// broadcast active under the prefix (lite-01 and lite-02 only).
type AnnounceInit struct {
	Suffixes []string
}

// AppendBody implements Message.
func (m *AnnounceInit) AppendBody(b []byte) []byte {
	b = AppendVarint(b, uint64(len(m.Suffixes)))
	for _, s := range m.Suffixes {
		b = appendString(b, s)
	}
	return b
}

// DecodeBody implements Message.
func (m *AnnounceInit) DecodeBody(body []byte) error {
	p := parser{b: body}
	n := p.count()
	m.Suffixes = nil
	for i := 0; i < n && p.err == nil; i++ {
		m.Suffixes = append(m.Suffixes, p.string())
	}
	if err := p.finish(); err != nil {
		return fmt.Errorf("announce init: %w", err)
	}
	return nil
}

// AppendAnnounceInit appends an AnnounceInit listing suffixes that a peer
// can decode (at most MaxListLen suffixes and MaxMessageSize bytes), then
// an active Announce for each suffix that did not fit, in order. A suffix
// too long for any message is left out; skipped says how many were.
func AppendAnnounceInit(b []byte, suffixes []string) (out []byte, skipped int) {
	fits := func(s string) bool { return 1+VarintLen(uint64(len(s)))+len(s) <= MaxMessageSize }
	size, n := VarintLen(MaxListLen), 0 // the count's varint, at its largest
	var init AnnounceInit
	for n < len(suffixes) && len(init.Suffixes) < MaxListLen {
		s := suffixes[n]
		l := VarintLen(uint64(len(s))) + len(s)
		if size+l > MaxMessageSize {
			break
		}
		n++
		if !fits(s) {
			skipped++
			continue
		}
		init.Suffixes = append(init.Suffixes, s)
		size += l
	}
	b = AppendMessage(b, &init)
	for _, s := range suffixes[n:] {
		if !fits(s) {
			skipped++
			continue
		}
		b = AppendMessage(b, &Announce{Active: true, Suffix: s})
	}
	return b, skipped
}

// Announce updates one broadcast under the announce prefix.
type Announce struct {
	Active bool
	Suffix string
}

// AppendBody implements Message.
func (m *Announce) AppendBody(b []byte) []byte {
	b = appendBool(b, m.Active)
	return appendString(b, m.Suffix)
}

// DecodeBody implements Message.
func (m *Announce) DecodeBody(body []byte) error {
	p := parser{b: body}
	m.Active = p.bool()
	m.Suffix = p.string()
	if err := p.finish(); err != nil {
		return fmt.Errorf("announce: %w", err)
	}
	return nil
}

// Subscribe opens a subscribe stream for one track of one broadcast. ID is
// chosen by the subscriber and echoed in every group header.
type Subscribe struct {
	ID        uint64
	Broadcast string
	Track     string
	Priority  uint8
}

// AppendBody implements Message.
func (m *Subscribe) AppendBody(b []byte) []byte {
	b = AppendVarint(b, m.ID)
	b = appendString(b, m.Broadcast)
	b = appendString(b, m.Track)
	return append(b, m.Priority)
}

// DecodeBody implements Message.
func (m *Subscribe) DecodeBody(body []byte) error {
	p := parser{b: body}
	m.ID = p.varint()
	m.Broadcast = p.string()
	m.Track = p.string()
	m.Priority = p.u8()
	if err := p.finish(); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	return nil
}

// SubscribeOk accepts a subscription. In lite-02 its body is empty.
type SubscribeOk struct{}

// AppendBody implements Message.
func (m *SubscribeOk) AppendBody(b []byte) []byte { return b }

// DecodeBody implements Message.
func (m *SubscribeOk) DecodeBody(body []byte) error {
	if len(body) != 0 {
		return fmt.Errorf("subscribe ok: %w", ErrTrailing)
	}
	return nil
}

// SubscribeUpdate changes a subscription's priority (lite-02).
type SubscribeUpdate struct {
	Priority uint8
}

// AppendBody implements Message.
func (m *SubscribeUpdate) AppendBody(b []byte) []byte { return append(b, m.Priority) }

// DecodeBody implements Message.
func (m *SubscribeUpdate) DecodeBody(body []byte) error {
	p := parser{b: body}
	m.Priority = p.u8()
	if err := p.finish(); err != nil {
		return fmt.Errorf("subscribe update: %w", err)
	}
	return nil
}

// SessionInfo may be sent by the server on the session stream (lite-02).
type SessionInfo struct {
	Bitrate uint64
}

// AppendBody implements Message.
func (m *SessionInfo) AppendBody(b []byte) []byte { return AppendVarint(b, m.Bitrate) }

// DecodeBody implements Message.
func (m *SessionInfo) DecodeBody(body []byte) error {
	p := parser{b: body}
	m.Bitrate = p.varint()
	if err := p.finish(); err != nil {
		return fmt.Errorf("session info: %w", err)
	}
	return nil
}

// GroupHeader starts a group stream after the UniGroup type byte.
type GroupHeader struct {
	Subscribe uint64
	Sequence  uint64
}

// AppendBody implements Message.
func (m *GroupHeader) AppendBody(b []byte) []byte {
	b = AppendVarint(b, m.Subscribe)
	return AppendVarint(b, m.Sequence)
}

// DecodeBody implements Message.
func (m *GroupHeader) DecodeBody(body []byte) error {
	p := parser{b: body}
	m.Subscribe = p.varint()
	m.Sequence = p.varint()
	if err := p.finish(); err != nil {
		return fmt.Errorf("group: %w", err)
	}
	return nil
}

// AppendGroupStart appends the type byte and header that open a group stream.
func AppendGroupStart(b []byte, h GroupHeader) []byte {
	b = append(b, UniGroup)
	return AppendMessage(b, &h)
}

// ReadGroupStart reads the type byte and header of a group stream.
func ReadGroupStart(r io.Reader) (GroupHeader, error) {
	var t [1]byte
	if _, err := io.ReadFull(r, t[:]); err != nil {
		return GroupHeader{}, fmt.Errorf("read group type: %w", err)
	}
	if t[0] != UniGroup {
		return GroupHeader{}, fmt.Errorf("%w: unknown uni stream type %d", ErrMalformed, t[0])
	}
	var h GroupHeader
	if err := ReadMessage(r, &h); err != nil {
		return GroupHeader{}, err
	}
	return h, nil
}

// AppendFrame appends one frame: its varint length and payload.
func AppendFrame(b, payload []byte) []byte {
	b = AppendVarint(b, uint64(len(payload)))
	return append(b, payload...)
}

// ReadFrame reads one frame from a group stream. The end of the group is
// io.EOF. Memory is allocated as the payload arrives, not on the length
// prefix.
func ReadFrame(r io.Reader) ([]byte, error) {
	return ReadMessageBody(r, MaxFrameSize)
}

// ReadFrameBudget is ReadFrame with every allocation reserved in b first:
// a frame that would take b past its limit fails with ErrOverBudget. On
// success len(frame) bytes stay reserved in b until the caller releases
// them; on error nothing stays reserved. A nil b is no limit.
func ReadFrameBudget(r io.Reader, b *Budget) ([]byte, error) {
	n, err := ReadVarint(r)
	if err != nil {
		return nil, err
	}
	if n > MaxFrameSize {
		return nil, fmt.Errorf("%w: %d bytes", ErrTooLarge, n)
	}
	frame, err := readBody(r, int(n), b)
	if err != nil {
		if errors.Is(err, ErrOverBudget) {
			return nil, err
		}
		return nil, fmt.Errorf("read message: %w", err)
	}
	return frame, nil
}
