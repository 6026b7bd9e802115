package relay

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/quic-go/quic-go"
)

// Stateless resets (RFC 9000 section 10.3). A relay process that dies
// without sending CONNECTION_CLOSE (killed, crashed, its box rebooted)
// leaves its clients' connections open on their side until their idle
// timeout. Its successor on the same port can end them at once with a
// stateless reset, but only if it derives the same reset tokens: quic-go
// makes a connection's token as HMAC-SHA256(key, connection ID), so every
// process on a port must use the same key. The key comes from a secret
// kept on the box (Config.ResetSecret): HKDF-SHA256 of the secret with the
// info "relayfleet stateless reset key <UDP port>", so the processes of
// one box (one per port) have different keys.
//
// What quic-go v0.64.1 needs to send one: a key on the Transport (without
// one it sends none at all), and an incoming short-header packet for a
// connection ID it does not know that is longer than 42 bytes
// (protocol.MinStatelessResetSize; smaller ones might themselves be
// resets). The connection ID length must be the same across processes (the
// Transport's default, 4 bytes, here): the successor reads the ID from the
// packet with its own length. A client only receiving audio sends small
// packets: its keep-alive PING is about 25 bytes and draws no reset; a
// stream write or a DATAGRAM of 32 bytes or more does (so do quic-go's
// path MTU probes, but a client that receives audio is done with those in
// its first second).

// MinResetSecret is the shortest secret Config.ResetSecret accepts.
const MinResetSecret = 32

// maxResetSecret bounds what LoadResetSecret reads.
const maxResetSecret = 4096

// LoadResetSecret reads a stateless reset secret file: at least
// MinResetSecret bytes (random ones; used as they are, newline included),
// at most 4 KiB, and not readable by other users.
func LoadResetSecret(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", file)
	}
	if fi.Mode().Perm()&0o004 != 0 {
		return nil, fmt.Errorf("%s: readable by every user (mode %04o); want 0600 or 0400", file, fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxResetSecret+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	switch {
	case len(b) > maxResetSecret:
		return nil, fmt.Errorf("%s: longer than %d bytes", file, maxResetSecret)
	case len(b) < MinResetSecret:
		return nil, fmt.Errorf("%s: %d bytes, want at least %d random bytes", file, len(b), MinResetSecret)
	}
	return b, nil
}

// statelessResetKey derives the quic-go stateless reset key for a UDP
// port from secret; a nil secret gives a random key (resets then only
// match this process's own connections).
func statelessResetKey(secret []byte, port int) (*quic.StatelessResetKey, error) {
	var key quic.StatelessResetKey
	if secret == nil {
		_, _ = rand.Read(key[:])
		return &key, nil
	}
	if len(secret) < MinResetSecret {
		return nil, fmt.Errorf("stateless reset secret: %d bytes, want at least %d", len(secret), MinResetSecret)
	}
	k, err := hkdf.Key(sha256.New, secret, nil, "relayfleet stateless reset key "+strconv.Itoa(port), len(key))
	if err != nil {
		return nil, fmt.Errorf("stateless reset key: %w", err)
	}
	copy(key[:], k)
	return &key, nil
}
