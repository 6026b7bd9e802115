// Package udpbatch sends the packets of many QUIC connections that share one
// UDP socket with sendmmsg: Conn wraps a *net.UDPConn, and WriteMsgUDP calls
// made at about the same time by many goroutines (quic-go's per-connection
// send loops) leave in one system call.
//
// There is no timer. A writer that finds no send in progress becomes the
// sender: it yields once (runtime.Gosched) so that the goroutines already
// runnable can queue their packets, then sends what is queued, up to the
// batch size, and hands the turn to the next queued writer, if any. A
// packet written alone leaves after one yield. Every writer waits for its
// own packet and gets its own result, as with sendmsg: the byte count, or
// the error the kernel gave for that packet (EMSGSIZE, EIO for GSO, ...),
// wrapped like the standard library's (*net.OpError around an
// *os.SyscallError), so quic-go's checks on them work unchanged. Control
// messages (GSO segment size, ECN, source address) travel per packet.
//
// Sender is the system call alone, for callers that form their own batches
// (the kernel-floor measurement of relay/bench).
package udpbatch
