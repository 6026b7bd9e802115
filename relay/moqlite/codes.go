package moqlite

// Session close codes (QUIC CONNECTION_CLOSE application code / WebTransport session code).
const CodeGoingAway uint64 = 0x10 // the relay asks the client to reconnect elsewhere now

// GoAwayNotice is the payload of the QUIC (or WebTransport) DATAGRAM a
// relay sends a session some time (the grace) before it closes it with
// CodeGoingAway: a relayfleet extension to moq-lite (docs/clients.md). A
// client that knows it subscribes elsewhere while still reading this
// session (make-before-break); one that does not ignores it, as moq-lite
// defines no datagrams, and reconnects on the close.
var GoAwayNotice = []byte("moq-lite go-away")
