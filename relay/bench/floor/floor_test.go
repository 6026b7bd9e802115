package floor_test

import (
	"testing"

	"github.com/relayfleet/relayfleet/relay/bench/floor"
)

// TestMeasure: both modes send every packet to the destinations (counted
// as they arrive) and take some CPU time per packet.
func TestMeasure(t *testing.T) {
	opt := floor.Options{Destinations: 50, Packets: 3000, Size: 520, Batch: 64}
	r, err := floor.Measure(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sendmsg %v, sendmmsg %v per packet", r.Sendmsg, r.Sendmmsg)
	if r.DeliveredSendmsg != opt.Packets || r.DeliveredSendmmsg != opt.Packets {
		t.Errorf("delivered %d (sendmsg) and %d (sendmmsg) of %d", r.DeliveredSendmsg, r.DeliveredSendmmsg, opt.Packets)
	}
	if r.Sendmsg <= 0 || r.Sendmmsg <= 0 {
		t.Errorf("no CPU time measured: %v, %v", r.Sendmsg, r.Sendmmsg)
	}
}

func TestBadOptions(t *testing.T) {
	if _, err := floor.Measure(floor.Options{Destinations: 1, Packets: 1, Size: 70000, Batch: 1}); err == nil {
		t.Error("a 70000-byte payload was accepted")
	}
}
