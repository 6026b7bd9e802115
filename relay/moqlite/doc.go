// Package moqlite is a pure codec for the moq-lite-02 wire format as spoken by
// the @moq/lite 0.2.2 client (moq-dev/moq, js/lite/src/lite).
//
// It knows QUIC variable-length integers, size-prefixed messages, the
// draft-14 style SETUP exchange (client 0x20 / server 0x21 with a big-endian
// u16 length), the bidirectional stream types, the announce and subscribe
// messages and the group streams with their frames. It does no I/O beyond
// reading from an io.Reader and appending to byte slices.
package moqlite
