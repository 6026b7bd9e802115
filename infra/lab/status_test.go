package lab

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"
)

func TestWriteStatus(t *testing.T) {
	var b bytes.Buffer
	if err := WriteStatus(&b, nil, false); err != nil {
		t.Fatal(err)
	}
	if want := "no lab boxes (fleet lab up N makes some)\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
	b.Reset()
	if err := WriteStatus(&b, []BoxStatus{}, true); err != nil {
		t.Fatal(err)
	}
	if want := "[]\n"; b.String() != want {
		t.Errorf("--json got %q, want %q", b.String(), want)
	}
	b.Reset()
	boxes := []BoxStatus{{Name: "box1", Address: "10.0.0.2", State: StateRunning, Cores: 1, CPUs: "1", RAM: 1 << 30, MemoryUsed: 100 << 20, SSH: true}}
	if err := WriteStatus(&b, boxes, false); err != nil {
		t.Fatal(err)
	}
	want := "BOX   ADDRESS   STATE    CORES  CPUS  MEMORY        SSH\n" +
		"box1  10.0.0.2  " + StateRunning + "  1      1     100/1024 MiB  ok\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}

func TestWriteStarted(t *testing.T) {
	var b bytes.Buffer
	box := Box{Name: "box1", Address: netip.MustParseAddr("10.0.0.2"), Cores: 2, RAM: 2 << 30}
	WriteStarted(&b, []Started{{Box: box, Took: 1500 * time.Millisecond}, {Box: box, WasRunning: true}, {Box: box, Err: errors.New("no")}})
	want := "box1\t10.0.0.2\t2 cores\t2048 MiB\tready in 1.5s\nbox1\t10.0.0.2\t2 cores\t2048 MiB\talready running\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
