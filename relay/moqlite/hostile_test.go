package moqlite_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"testing"

	"github.com/relayfleet/relayfleet/relay/moqlite"
)

// allocated returns the bytes f allocates (TotalAlloc), over a few runs,
// the smallest: background allocations only ever add.
func allocated(f func()) uint64 {
	best := ^uint64(0)
	for range 5 {
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		f()
		runtime.ReadMemStats(&b)
		best = min(best, b.TotalAlloc-a.TotalAlloc)
	}
	return best
}

// A length prefix alone must not buy a peer the memory it declares: a
// frame header of ~1 MiB followed by a few bytes and the end of the stream
// allocates about what arrived, not 1 MiB.
func TestReadFrameAllocatesAsBytesArrive(t *testing.T) {
	declared := moqlite.MaxFrameSize - 1
	in := moqlite.AppendVarint(nil, uint64(declared))
	in = append(in, "only a few bytes"...)
	readers := map[string]func(io.Reader) ([]byte, error){
		"ReadFrame": moqlite.ReadFrame,
		"ReadFrameBudget": func(r io.Reader) ([]byte, error) {
			return moqlite.ReadFrameBudget(r, moqlite.NewBudget(1<<30))
		},
		"ReadMessageBody": func(r io.Reader) ([]byte, error) { return moqlite.ReadMessageBody(r, moqlite.MaxFrameSize) },
	}
	for name, read := range readers {
		t.Run(name, func(t *testing.T) {
			var err error
			n := allocated(func() { _, err = read(bytes.NewReader(in)) })
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("err = %v, want unexpected EOF", err)
			}
			if n > 64<<10 {
				t.Fatalf("a truncated frame declaring %d bytes allocated %d bytes; want under 64 KiB", declared, n)
			}
			t.Logf("declared %d, allocated %d", declared, n)
		})
	}
	// The setup body's u16 length too.
	setup := []byte{0xff, 0xff, 1, 2, 3}
	var err error
	if n := allocated(func() { _, err = moqlite.ReadSetupBody(bytes.NewReader(setup)) }); n > 8<<10 {
		t.Fatalf("a truncated setup declaring 65535 bytes allocated %d bytes (err %v)", n, err)
	}
}

// Frames of every size round-trip through the growing buffer, one byte at
// a time as well as all at once.
func TestReadFrameSizes(t *testing.T) {
	for _, size := range []int{0, 1, 160, 1023, 1024, 1025, 4096, 70000, moqlite.MaxFrameSize} {
		payload := make([]byte, size)
		for i := range payload {
			payload[i] = byte(i * 7)
		}
		in := moqlite.AppendFrame(nil, payload)
		for _, r := range []io.Reader{bytes.NewReader(in), io.LimitReader(&oneByte{bytes.NewReader(in)}, int64(len(in)))} {
			// While growing, the old and the new buffer are both held.
			b := moqlite.NewBudget(2 * moqlite.MaxFrameSize)
			got, err := moqlite.ReadFrameBudget(r, b)
			if err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("size %d: err %v, equal %v", size, err, bytes.Equal(got, payload))
			}
			if b.Used() != int64(size) {
				t.Fatalf("size %d: %d bytes reserved after the read, want %d", size, b.Used(), size)
			}
		}
	}
}

type oneByte struct{ r io.Reader }

func (o *oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), 1)]) }

// The budget is shared: frames in progress on several streams count
// together, and one that would pass the limit fails with ErrOverBudget,
// leaving nothing reserved for itself.
func TestReadFrameBudget(t *testing.T) {
	b := moqlite.NewBudget(100 << 10)
	frame := moqlite.AppendFrame(nil, make([]byte, 40<<10))
	if _, err := moqlite.ReadFrameBudget(bytes.NewReader(frame), b); err != nil {
		t.Fatal(err)
	}
	// 40 KiB held; the next frame's buffers peak at 32 + 40 KiB.
	if _, err := moqlite.ReadFrameBudget(bytes.NewReader(frame), b); !errors.Is(err, moqlite.ErrOverBudget) {
		t.Fatalf("second 40 KiB frame on a 100 KiB budget: err = %v, want ErrOverBudget", err)
	}
	if b.Used() != 40<<10 {
		t.Fatalf("used %d after the refused frame, want %d", b.Used(), 40<<10)
	}
	// A truncated frame gives back what it took.
	if _, err := moqlite.ReadFrameBudget(bytes.NewReader(frame[:10<<10]), b); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated: err = %v", err)
	}
	b.Release(40 << 10)
	if b.Used() != 0 {
		t.Fatalf("used %d after release, want 0", b.Used())
	}
	// A nil budget is no limit.
	if _, err := moqlite.ReadFrameBudget(bytes.NewReader(frame), nil); err != nil {
		t.Fatal(err)
	}
}

// AppendAnnounceInit never writes a message a peer cannot decode: past
// MaxListLen suffixes, or MaxMessageSize bytes, the rest follow as active
// Announces; a name too long for any message is left out and counted.
func TestAppendAnnounceInitSplits(t *testing.T) {
	var names []string
	for i := range 3000 {
		names = append(names, fmt.Sprintf("room/%05d", i))
	}
	long := string(bytes.Repeat([]byte("x"), 40<<10))
	tooLong := string(bytes.Repeat([]byte("y"), moqlite.MaxMessageSize))
	names = append(names, long, long+"2", tooLong)
	b, skipped := moqlite.AppendAnnounceInit(nil, names)
	if skipped != 1 {
		t.Fatalf("skipped %d, want 1", skipped)
	}
	r := bytes.NewReader(b)
	var init moqlite.AnnounceInit
	if err := moqlite.ReadMessage(r, &init); err != nil {
		t.Fatalf("decode init: %v", err)
	}
	got := append([]string(nil), init.Suffixes...)
	for {
		var a moqlite.Announce
		err := moqlite.ReadMessage(r, &a)
		if err == io.EOF {
			break
		}
		if err != nil || !a.Active {
			t.Fatalf("decode announce after %d names: %v (active %v)", len(got), err, a.Active)
		}
		got = append(got, a.Suffix)
	}
	if want := names[:len(names)-1]; !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %d names, want the %d that fit, in order", len(got), len(want))
	}
	// The plain encoder's output for the same list is what broke peers.
	all := moqlite.AppendMessage(nil, &moqlite.AnnounceInit{Suffixes: names[:moqlite.MaxListLen+1]})
	if err := moqlite.ReadMessage(bytes.NewReader(all), &init); err == nil {
		t.Fatal("an AnnounceInit of MaxListLen+1 names decoded; the split is not needed?")
	}
}
