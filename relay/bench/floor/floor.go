// Package floor measures the kernel's own cost of sending UDP packets on
// this machine: the CPU time (user plus system, from getrusage for the
// sending thread, not wall clock) per packet sent from one socket to many
// loopback destinations, with one sendmsg per packet and with sendmmsg
// batches. relay/bench prints the relay's cost per packet as a multiple of
// these, measured in the same run.
package floor

import (
	"fmt"
	"net"
	"runtime"
	"syscall"
	"time"

	"github.com/relayfleet/relayfleet/relay/internal/udpbatch"
)

// Options shape one measurement.
type Options struct {
	// Destinations is how many loopback sockets (127.0.0.1, one port
	// each) the packets go to, in turn.
	Destinations int
	// Packets is how many packets each mode sends. Each destination's
	// receive buffer must hold its share: the destinations are read only
	// after the timing, to count what arrived.
	Packets int
	// Size is the UDP payload of each packet, in bytes.
	Size int
	// Batch is the packets per sendmmsg.
	Batch int
}

// Result is one measurement: CPU time per packet with one sendmsg each
// and with sendmmsg batches, and the packets the destinations received in
// each mode.
type Result struct {
	Sendmsg, Sendmmsg                   time.Duration
	DeliveredSendmsg, DeliveredSendmmsg int
}

// Measure sends opt.Packets packets in each mode and times them.
func Measure(opt Options) (Result, error) {
	if opt.Destinations < 1 || opt.Packets < 1 || opt.Size < 1 || opt.Size > 65507 || opt.Batch < 1 {
		return Result{}, fmt.Errorf("floor: bad options %+v", opt)
	}
	var res Result
	var err error
	if res.Sendmsg, res.DeliveredSendmsg, err = measure(opt, false); err != nil {
		return res, fmt.Errorf("floor, sendmsg: %w", err)
	}
	if res.Sendmmsg, res.DeliveredSendmmsg, err = measure(opt, true); err != nil {
		return res, fmt.Errorf("floor, sendmmsg: %w", err)
	}
	return res, nil
}

func measure(opt Options, batched bool) (perPacket time.Duration, delivered int, err error) {
	dests := make([]*net.UDPConn, 0, opt.Destinations)
	defer func() {
		for _, d := range dests {
			d.Close()
		}
	}()
	addrs := make([]*net.UDPAddr, 0, opt.Destinations)
	for range opt.Destinations {
		d, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return 0, 0, err
		}
		dests = append(dests, d)
		addrs = append(addrs, d.LocalAddr().(*net.UDPAddr))
	}
	src, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return 0, 0, err
	}
	defer src.Close()
	payload := make([]byte, opt.Size)
	var sender *udpbatch.Sender
	msgs := make([]udpbatch.Message, opt.Batch)
	if batched {
		if sender, err = udpbatch.NewSender(src); err != nil {
			return 0, 0, err
		}
	}

	// The sending thread's own CPU time: lock this goroutine to it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0, err := threadCPU()
	if err != nil {
		return 0, 0, err
	}
	var sendErr error
	if batched {
		for i := 0; i < opt.Packets && sendErr == nil; {
			k := min(opt.Batch, opt.Packets-i)
			for j := range k {
				msgs[j] = udpbatch.Message{Buf: payload, Addr: addrs[(i+j)%len(addrs)]}
			}
			sender.Send(msgs[:k])
			for _, m := range msgs[:k] {
				if m.Err != nil {
					sendErr = m.Err
				}
			}
			i += k
		}
	} else {
		for i := 0; i < opt.Packets && sendErr == nil; i++ {
			_, _, sendErr = src.WriteMsgUDP(payload, nil, addrs[i%len(addrs)])
		}
	}
	cpu1, err := threadCPU()
	if err != nil {
		return 0, 0, err
	}
	if sendErr != nil {
		return 0, 0, sendErr
	}
	delivered = drain(dests, opt.Size)
	return (cpu1 - cpu0) / time.Duration(opt.Packets), delivered, nil
}

// drain counts the packets queued at the destinations, reading without
// waiting.
func drain(dests []*net.UDPConn, size int) int {
	buf := make([]byte, size+1)
	n := 0
	for _, d := range dests {
		rc, err := d.SyscallConn()
		if err != nil {
			continue
		}
		_ = rc.Read(func(fd uintptr) bool {
			for {
				m, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_DONTWAIT)
				if err != nil {
					return true
				}
				if m == size {
					n++
				}
			}
		})
	}
	return n
}

// threadCPU is the calling thread's user plus system CPU time.
func threadCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
