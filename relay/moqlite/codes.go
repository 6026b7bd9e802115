package moqlite

// CodeGoingAway is a session close code (QUIC CONNECTION_CLOSE application
// code / WebTransport session code): the relay asks the client to reconnect
// elsewhere now.
const CodeGoingAway uint64 = 0x10

// GoAwayNotice is the payload of the QUIC (or WebTransport) DATAGRAM a
// relay sends a session some time (the grace) before it closes it with
// CodeGoingAway: a relayfleet extension to moq-lite (docs/clients.md). A
// client that knows it subscribes elsewhere while still reading this
// session (make-before-break); one that does not ignores it, as moq-lite
// defines no datagrams, and reconnects on the close.
var GoAwayNotice = []byte("moq-lite go-away")
