package udpbatch

import (
	"net"
	"runtime"
	"sync"
	"sync/atomic"
)

// DefaultSize is the largest batch Conn sends in one system call; more
// only makes the last writer of a batch wait longer. relay/bench measures
// the kernel's cost per packet at this size.
const DefaultSize = 64

// Message is one packet for Send: its bytes, its control messages (may be
// nil) and its destination. Send fills N (bytes sent) and Err.
type Message struct {
	Buf  []byte
	OOB  []byte
	Addr *net.UDPAddr
	N    int
	Err  error
}

// Conn is a *net.UDPConn whose writes are batched. Reads and everything
// else are the UDPConn's own. Conn does not own the socket: closing the
// UDPConn fails the writes still queued, and Conn holds no goroutine.
type Conn struct {
	*net.UDPConn
	size int
	s    *sender

	mu      sync.Mutex
	pending []*request
	turn    bool // a writer is sending; false implies pending is empty

	batches, packets atomic.Int64
}

type request struct {
	msg  Message
	done chan bool // true: the caller's turn to send
}

var requests = sync.Pool{New: func() any { return &request{done: make(chan bool, 1)} }}

// New wraps c. size is the most packets per system call; below 1 it is
// DefaultSize. On systems without sendmmsg every packet is sent on its own.
func New(c *net.UDPConn, size int) (*Conn, error) {
	if size < 1 {
		size = DefaultSize
	}
	s, err := newSender(c, size)
	if err != nil {
		return nil, err
	}
	return &Conn{UDPConn: c, size: size, s: s}, nil
}

// Stats is how many system calls sent how many packets so far.
func (c *Conn) Stats() (batches, packets int64) { return c.batches.Load(), c.packets.Load() }

// WriteTo sends b to addr (a *net.UDPAddr) through the batch.
func (c *Conn) WriteTo(b []byte, addr net.Addr) (int, error) {
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return 0, &net.OpError{Op: "write", Net: "udp", Source: c.LocalAddr(), Addr: addr, Err: net.InvalidAddrError("not a UDP address")}
	}
	n, _, err := c.WriteMsgUDP(b, nil, ua)
	return n, err
}

// WriteToUDP sends b to addr through the batch.
func (c *Conn) WriteToUDP(b []byte, addr *net.UDPAddr) (int, error) {
	n, _, err := c.WriteMsgUDP(b, nil, addr)
	return n, err
}

// WriteMsgUDP queues b with its control messages oob for addr and returns
// once that packet has been sent or has failed. b and oob are not copied:
// they are read during the call only.
func (c *Conn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	r := requests.Get().(*request)
	r.msg = Message{Buf: b, OOB: oob, Addr: addr}
	c.mu.Lock()
	c.pending = append(c.pending, r)
	mine := !c.turn
	c.turn = true
	c.mu.Unlock()
	if mine || <-r.done {
		c.sendTurn()
		<-r.done // sendTurn always sends the turn holder's packet
	}
	n, err = r.msg.N, r.msg.Err
	if err == nil {
		oobn = len(oob)
	}
	r.msg = Message{}
	requests.Put(r)
	return n, oobn, err
}

// sendTurn runs with the turn: the caller's request is the first pending.
// It sends one batch, completes it, and passes the turn to the next
// pending writer or ends it.
func (c *Conn) sendTurn() {
	c.mu.Lock()
	if len(c.pending) < c.size {
		// Let the goroutines already runnable queue their packets.
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
	}
	k := min(len(c.pending), c.size)
	batch := c.s.take(c.pending[:k])
	rest := copy(c.pending, c.pending[k:])
	clear(c.pending[rest:])
	c.pending = c.pending[:rest]
	c.mu.Unlock()

	c.s.send(c, batch)
	c.batches.Add(1)
	c.packets.Add(int64(k))

	// Complete the batch before the turn can pass: the next sender reuses
	// the arrays batch lives in.
	for _, r := range batch {
		r.done <- false
	}
	c.mu.Lock()
	var next *request
	if len(c.pending) > 0 {
		next = c.pending[0]
	} else {
		c.turn = false
	}
	c.mu.Unlock()
	if next != nil {
		next.done <- true
	}
}
