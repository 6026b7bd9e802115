package client

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Ogg page header flags (RFC 3533 section 6).
const (
	oggContinued = 0x01
	oggBOS       = 0x02
	oggEOS       = 0x04
)

// oggHeaderSize is the fixed part of a page header, before the segment table.
const oggHeaderSize = 27

// maxOggPacket bounds one packet reassembled from several pages.
const maxOggPacket = 1 << 20

// oggNoGranule is the granule position of a page on which no packet ends.
const oggNoGranule = ^uint64(0)

// oggCRCTable is Ogg's CRC-32: polynomial 0x04c11db7, not reflected,
// initial value 0, no final XOR.
var oggCRCTable = func() (t [256]uint32) {
	for i := range t {
		r := uint32(i) << 24
		for range 8 {
			if r&0x80000000 != 0 {
				r = r<<1 ^ 0x04c11db7
			} else {
				r <<= 1
			}
		}
		t[i] = r
	}
	return t
}()

func oggCRC(crc uint32, b []byte) uint32 {
	for _, c := range b {
		crc = crc<<8 ^ oggCRCTable[byte(crc>>24)^c]
	}
	return crc
}

// OggOpusReader reads the audio packets of an Ogg Opus stream (RFC 3533
// pages carrying RFC 7845's Opus mapping): one logical stream, whose
// OpusHead and OpusTags header packets it checks and skips. It reads no
// further ahead than the page it needs, so it suits a live pipe.
type OggOpusReader struct {
	r io.Reader

	pages      int    // pages read
	serial     uint32 // of the first page
	seq        uint32 // page sequence number of the last page
	packets    int    // complete packets, headers included
	partial    []byte // a packet continued on the next page
	continues  bool   // partial is in use (it may be empty)
	eos        bool   // the end-of-stream page was read
	granule    uint64 // granule position of the last audio page
	hasGranule bool

	queue   []oggPacket // audio packets of the last page not yet returned
	err     error       // sticky
	scratch [oggHeaderSize + 255]byte
}

type oggPacket struct {
	data    []byte
	granule uint64
}

// NewOggOpusReader returns a reader of the Ogg Opus stream r.
func NewOggOpusReader(r io.Reader) *OggOpusReader {
	return &OggOpusReader{r: r}
}

// Next returns the next audio packet and its granule position: the 48 kHz
// sample count at the end of the packet, pre-skip included (RFC 7845
// section 4). It returns io.EOF at the clean end of the stream, and an
// error for a damaged stream (bad capture pattern, version or CRC, lost
// pages, a second logical stream) or one that is not Opus.
func (o *OggOpusReader) Next() (packet []byte, granule uint64, err error) {
	for len(o.queue) == 0 {
		if o.err != nil {
			return nil, 0, o.err
		}
		if err := o.readPage(); err != nil {
			o.err = err
		}
	}
	p := o.queue[0]
	o.queue = o.queue[1:]
	return p.data, p.granule, nil
}

func (o *OggOpusReader) readPage() error {
	h := o.scratch[:oggHeaderSize]
	if n, err := io.ReadFull(o.r, h); err != nil {
		switch {
		case err == io.EOF && o.continues:
			return fmt.Errorf("ogg: stream ends inside a packet: %w", io.ErrUnexpectedEOF)
		case err == io.EOF && o.packets < 2:
			return fmt.Errorf("ogg: stream ends before the Opus headers: %w", io.ErrUnexpectedEOF)
		case err == io.EOF:
			return io.EOF
		case err == io.ErrUnexpectedEOF:
			return fmt.Errorf("ogg: page %d: truncated header (%d bytes): %w", o.pages, n, err)
		}
		return err
	}
	page := o.pages
	if string(h[:4]) != "OggS" {
		return fmt.Errorf("ogg: page %d: no OggS capture pattern (not an Ogg stream, or lost sync)", page)
	}
	if h[4] != 0 {
		return fmt.Errorf("ogg: page %d: unsupported version %d", page, h[4])
	}
	flags := h[5]
	granule := binary.LittleEndian.Uint64(h[6:])
	serial := binary.LittleEndian.Uint32(h[14:])
	seq := binary.LittleEndian.Uint32(h[18:])
	wantCRC := binary.LittleEndian.Uint32(h[22:])
	nseg := int(h[26])
	lacing := o.scratch[oggHeaderSize : oggHeaderSize+nseg]
	if _, err := io.ReadFull(o.r, lacing); err != nil {
		return fmt.Errorf("ogg: page %d: truncated segment table: %w", page, noEOF(err))
	}
	size := 0
	for _, l := range lacing {
		size += int(l)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(o.r, body); err != nil {
		return fmt.Errorf("ogg: page %d: truncated body: %w", page, noEOF(err))
	}
	binary.LittleEndian.PutUint32(h[22:], 0)
	crc := oggCRC(0, o.scratch[:oggHeaderSize+nseg])
	crc = oggCRC(crc, body)
	if crc != wantCRC {
		return fmt.Errorf("ogg: page %d: CRC mismatch (page says %08x, computed %08x): corrupt stream", page, wantCRC, crc)
	}
	o.pages++

	switch {
	case page == 0 && flags&oggBOS == 0:
		return errors.New("ogg: page 0: not a beginning-of-stream page")
	case page == 0:
		o.serial = serial
	case serial != o.serial:
		return fmt.Errorf("ogg: page %d: second logical stream (serial %08x, first %08x): only one is supported", page, serial, o.serial)
	case o.eos:
		return fmt.Errorf("ogg: page %d: after the end-of-stream page", page)
	case flags&oggBOS != 0:
		return fmt.Errorf("ogg: page %d: beginning-of-stream flag on a later page", page)
	case seq != o.seq+1:
		return fmt.Errorf("ogg: page %d: sequence number %d after %d: pages lost", page, seq, o.seq)
	}
	o.seq = seq
	o.eos = flags&oggEOS != 0
	switch {
	case flags&oggContinued != 0 && !o.continues:
		return fmt.Errorf("ogg: page %d: continues a packet that never started", page)
	case flags&oggContinued == 0 && o.continues:
		return fmt.Errorf("ogg: page %d: previous packet not continued", page)
	}

	// Split the body into packets: a lacing value below 255 ends one.
	var done [][]byte
	off := 0
	for _, l := range lacing {
		o.partial = append(o.partial, body[off:off+int(l)]...)
		o.continues = true
		off += int(l)
		if len(o.partial) > maxOggPacket {
			return fmt.Errorf("ogg: page %d: packet larger than %d bytes", page, maxOggPacket)
		}
		if l < 255 {
			done = append(done, o.partial)
			o.partial, o.continues = nil, false
		}
	}
	if o.eos && o.continues {
		return fmt.Errorf("ogg: page %d: end of stream inside a packet", page)
	}
	return o.packetsDone(page, granule, done)
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// packetsDone checks the header packets and queues the audio packets that
// ended on one page, with their granule positions.
func (o *OggOpusReader) packetsDone(page int, granule uint64, done [][]byte) error {
	var audio [][]byte
	for _, p := range done {
		switch o.packets {
		case 0:
			if len(p) < 19 || string(p[:8]) != "OpusHead" {
				return errors.New("ogg: first packet is not OpusHead: not an Ogg Opus stream")
			}
			if p[8]>>4 != 0 {
				return fmt.Errorf("ogg: OpusHead version %d not supported", p[8])
			}
			if p[9] == 0 {
				return errors.New("ogg: OpusHead: zero channels")
			}
		case 1:
			if len(p) < 8 || string(p[:8]) != "OpusTags" {
				return errors.New("ogg: second packet is not OpusTags")
			}
		default:
			audio = append(audio, p)
		}
		o.packets++
	}
	if len(audio) == 0 {
		return nil
	}
	samples := make([]uint64, len(audio))
	var total uint64
	for i, p := range audio {
		n, err := packetSamples(p)
		if err != nil {
			return fmt.Errorf("ogg: page %d: audio packet %d: %w", page, o.packets-len(audio)+i-2, err)
		}
		samples[i] = uint64(n)
		total += uint64(n)
	}
	gran := make([]uint64, len(audio))
	switch {
	case granule == oggNoGranule:
		return fmt.Errorf("ogg: page %d: packets end on it but it has no granule position", page)
	case o.hasGranule:
		// Count on from the previous page; the last packet takes the
		// page's granule, which may trim the end of the stream.
		g := o.granule
		for i := range audio {
			g += samples[i]
			gran[i] = g
		}
	case granule >= total:
		// First audio page: count back from its granule.
		g := granule
		for i := len(audio) - 1; i >= 0; i-- {
			gran[i] = g
			g -= samples[i]
		}
	default:
		// A single short page trimmed at both ends: count on from 0.
		var g uint64
		for i := range audio {
			g += samples[i]
			gran[i] = min(g, granule)
		}
	}
	gran[len(gran)-1] = granule
	o.granule, o.hasGranule = granule, true
	for i, p := range audio {
		o.queue = append(o.queue, oggPacket{data: p, granule: gran[i]})
	}
	return nil
}

// opusFrameSamples is the frame size at 48 kHz of each Opus configuration
// (RFC 6716 section 3.1, table 2): SILK-only NB, MB and WB at 10, 20, 40
// and 60 ms; Hybrid SWB and FB at 10 and 20 ms; CELT-only NB, WB, SWB and
// FB at 2.5, 5, 10 and 20 ms.
var opusFrameSamples = [32]int{
	480, 960, 1920, 2880, // SILK NB
	480, 960, 1920, 2880, // SILK MB
	480, 960, 1920, 2880, // SILK WB
	480, 960, // Hybrid SWB
	480, 960, // Hybrid FB
	120, 240, 480, 960, // CELT NB
	120, 240, 480, 960, // CELT WB
	120, 240, 480, 960, // CELT SWB
	120, 240, 480, 960, // CELT FB
}

// packetSamples is the duration of an Opus packet in 48 kHz samples.
func packetSamples(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, errors.New("opus: empty packet")
	}
	frame := opusFrameSamples[p[0]>>3]
	var frames int
	switch p[0] & 3 {
	case 0:
		frames = 1
	case 1, 2:
		frames = 2
	case 3:
		if len(p) < 2 {
			return 0, errors.New("opus: code 3 packet without a frame count byte")
		}
		frames = int(p[1] & 0x3f)
		if frames == 0 {
			return 0, errors.New("opus: code 3 packet with zero frames")
		}
	}
	if n := frame * frames; n > 5760 {
		return 0, fmt.Errorf("opus: packet of %d frames of %v lasts more than 120 ms", frames, samplesDuration(frame))
	}
	return frame * frames, nil
}

func samplesDuration(n int) time.Duration {
	return time.Duration(n) * time.Second / 48000
}

// PacketDuration is the duration of an Opus packet, from its TOC byte
// (and, for code 3 packets, its frame count byte): RFC 6716 section 3.1.
// It fails for an empty packet and for one that breaks the 120 ms limit.
func PacketDuration(p []byte) (time.Duration, error) {
	n, err := packetSamples(p)
	if err != nil {
		return 0, err
	}
	return samplesDuration(n), nil
}
