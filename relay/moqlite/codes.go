package moqlite

// Session close codes (QUIC CONNECTION_CLOSE application code / WebTransport session code).
const CodeGoingAway uint64 = 0x10 // the relay asks the client to reconnect elsewhere now
