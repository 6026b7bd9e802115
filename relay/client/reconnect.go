package client

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/coder/websocket"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"

	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// A live-audio listener has two ways to learn that its relay is gone:
// the relay says so (a session close: going-away 0x10 from a relay being
// shed or stopped, a stateless reset from a relay restarted on the same
// port, an idle timeout), or nothing comes. Audio comes in groups every
// frame interval, so the absence of a group for a few intervals is the
// fastest and most general signal: NextGroupWithin turns it into
// ErrSilent. ReconnectReason names both kinds for logs and counters and
// says which are worth reconnecting for.

// ErrSilent is no group within the silence timeout: the path is presumed dead.
var ErrSilent = errors.New("client: no group within the silence timeout")

// DefaultSilence is the default silence timeout: 8 frames of 120 ms.
const DefaultSilence = 960 * time.Millisecond

// Relay session close codes (see package relay): the ones a client acts on.
const (
	codeOK           = 0
	codeInternal     = 1
	codeUnauthorized = 2
	codeProtocol     = 3
	codeVersion      = 5
	codeOverloaded   = 7
	codeTokenExpired = 8
)

// Reconnect reasons returned by ReconnectReason.
const (
	ReasonSilent           = "silent"             // ErrSilent
	ReasonGoingAway        = "going-away"         // close code 0x10, WebSocket 1001
	ReasonStatelessReset   = "stateless-reset"    // the relay restarted on the same port
	ReasonIdleTimeout      = "idle-timeout"       // QUIC idle timeout: nothing came back
	ReasonHandshakeTimeout = "handshake-timeout"  // the relay did not answer a dial
	ReasonClosed           = "closed"             // the session ended (code 0, a dropped connection)
	ReasonOverloaded       = "refused-overloaded" // the relay is full or draining (code 7, WebSocket 1013)
	ReasonRelayError       = "relay-error"        // the relay's internal error (code 1)
	ReasonTrackEnded       = "track-ended"        // the relay ended the track (the publisher went)
	ReasonTokenExpired     = "token-expired"      // code 8: the token expired; reconnect with a fresh one (TokenSource)
	ReasonStreamReset      = "stream-reset"       // the relay reset the subscription
	ReasonTransportError   = "transport-error"    // a QUIC transport error (a TLS failure among them)
	ReasonUnreachable      = "unreachable"        // a network error dialling or talking
	ReasonTimeout          = "timeout"            // a deadline passed
	ReasonError            = "error"              // anything else
	// Not retried:
	ReasonUnauthorized = "unauthorized" // code 2, WebSocket 1008: a new token is needed
	ReasonProtocol     = "protocol"     // code 3 or 5: this client and the relay disagree
	ReasonCancelled    = "cancelled"    // context.Canceled: the caller stopped
	ReasonConfig       = "config"       // the client's own settings refuse the relay
)

// ReconnectReason says why err should make a listener reconnect now through the router:
// "silent", "going-away", "stateless-reset", "idle-timeout", "closed", "refused-overloaded",... ; ok
// false for errors that must not be retried (unauthorized, ctx cancelled).
//
// context.DeadlineExceeded is "timeout" and retried: a dial's own
// deadline passing is worth another try; a caller whose own context ended
// checks that first. A nil err is ("", false).
func ReconnectReason(err error) (reason string, ok bool) {
	if err == nil {
		return "", false
	}
	if errors.Is(err, ErrSilent) {
		return ReasonSilent, true
	}
	if errors.Is(err, context.Canceled) {
		return ReasonCancelled, false
	}
	if errors.Is(err, ErrHashOverHTTP) || errors.Is(err, ErrClearTextRouter) {
		return ReasonConfig, false
	}
	var (
		sr  *quic.StatelessResetError
		it  *quic.IdleTimeoutError
		ht  *quic.HandshakeTimeoutError
		ae  *quic.ApplicationError
		te  *quic.TransportError
		se  *quic.StreamError
		wse *webtransport.SessionError
		wst *webtransport.StreamError
		ce  *transport.CloseError
		wce websocket.CloseError
		ne  net.Error
	)
	switch {
	case errors.As(err, &sr):
		return ReasonStatelessReset, true
	case errors.As(err, &it):
		return ReasonIdleTimeout, true
	case errors.As(err, &ht):
		return ReasonHandshakeTimeout, true
	case errors.As(err, &ae):
		return codeReason(uint64(ae.ErrorCode))
	case errors.As(err, &wse):
		return codeReason(uint64(wse.ErrorCode))
	case errors.As(err, &ce) && ce.Status < 0:
		return codeReason(ce.Code)
	case errors.As(err, &wce):
		return wsStatusReason(wce.Code)
	case errors.As(err, &te):
		return ReasonTransportError, true
	case errors.Is(err, ErrTrackEnded):
		return ReasonTrackEnded, true
	case errors.As(err, &se), errors.As(err, &wst):
		return ReasonStreamReset, true
	case errors.Is(err, ErrClosed), errors.Is(err, transport.ErrSessionClosed):
		return ReasonClosed, true
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout, true
	case errors.As(err, &ne):
		if ne.Timeout() {
			return ReasonTimeout, true
		}
		return ReasonUnreachable, true
	}
	return ReasonError, true
}

// codeReason maps a relay's session close code.
func codeReason(code uint64) (string, bool) {
	switch code {
	case moqlite.CodeGoingAway:
		return ReasonGoingAway, true
	case codeOK:
		return ReasonClosed, true
	case codeOverloaded:
		return ReasonOverloaded, true
	case codeInternal:
		return ReasonRelayError, true
	case codeTokenExpired:
		return ReasonTokenExpired, true
	case codeUnauthorized:
		return ReasonUnauthorized, false
	case codeProtocol, codeVersion:
		return ReasonProtocol, false
	}
	return ReasonClosed, true
}

// wsStatusReason maps a WebSocket close status.
func wsStatusReason(st websocket.StatusCode) (string, bool) {
	switch st {
	case websocket.StatusGoingAway:
		return ReasonGoingAway, true
	case websocket.StatusTryAgainLater:
		return ReasonOverloaded, true
	case websocket.StatusPolicyViolation:
		return ReasonUnauthorized, false
	case websocket.StatusProtocolError:
		return ReasonProtocol, false
	case websocket.StatusInternalError:
		return ReasonRelayError, true
	}
	return ReasonClosed, true
}

// NextGroupWithin is NextGroup that fails with ErrSilent when no group starts within d (d<=0: no limit).
// The subscription stays as it was: the caller closes it (and its
// session) to reconnect elsewhere.
func (sub *Subscription) NextGroupWithin(ctx context.Context, d time.Duration) (*GroupReader, error) {
	if d <= 0 {
		return sub.NextGroup(ctx)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	// Halfway, a probe: a relay process restarted on the same port
	// answers it with a stateless reset, so that the subscription ends
	// with the reason before the silence timeout.
	p := time.AfterFunc(d/2, sub.s.probe)
	defer p.Stop()
	return sub.nextGroup(ctx, t.C)
}

// probe sends one packet to the relay that a relay restarted on the same
// port answers with a stateless reset (raw QUIC and WebTransport; see
// transport.ProbeSize), and nothing on other transports.
func (s *Session) probe() {
	if p, ok := s.t.(interface{ Probe() error }); ok && s.ctx.Err() == nil {
		if err := p.Probe(); err != nil {
			s.log.Debug("probe", "err", err)
		}
	}
}

// KeepAlivePeriod is the QUIC keep-alive period for a listener with the
// given silence timeout: half of it, between 100 ms and 10 s.
//
// quic-go (v0.64.1, Conn.nextKeepAliveTime) sends a keep-alive PING only
// once no packet has been received for max(period, 1.5 PTO): while the
// relay sends audio the listener sends nothing but ACKs, and ACKs stop
// with the audio. The PING after the audio stopped is what a relay
// process restarted on the same port answers with a stateless reset, so
// the listener learns of the restart within about half its silence
// timeout instead of at its idle timeout. On an idle session it costs
// one small packet per period.
func KeepAlivePeriod(silence time.Duration) time.Duration {
	if silence <= 0 {
		silence = DefaultSilence
	}
	return min(max(silence/2, 100*time.Millisecond), 10*time.Second)
}

// QUICConfig is the QUIC configuration of a listener with the given
// silence timeout (<= 0: DefaultSilence), as Dial uses it: a 30 s idle
// timeout, KeepAlivePeriod(silence), datagrams enabled, which
// NextGroupWithin's probes need, the ACK frequency extension (a relay may
// ask the listener to acknowledge every other audio packet instead of
// each: half the ACKs it reads), stream credit given in batches (a
// MAX_STREAMS for every group stream finished made each ACK ack-eliciting,
// in a packet of its own), and a 3 s handshake idle timeout (not
// quic-go's 5 s: a relay that does not answer is given up sooner, and the
// router asked for another). Callers that dial QUIC themselves and hand
// the connection to NewSession should start from it.
func QUICConfig(silence time.Duration) *quic.Config {
	c := &quic.Config{
		HandshakeIdleTimeout: 3 * time.Second,
		MaxIdleTimeout:       30 * time.Second,
		KeepAlivePeriod:      KeepAlivePeriod(silence),
		EnableDatagrams:      true,
	}
	SetAckFrequency(c, true)
	return c
}

// quicConfig is the QUIC configuration Dial uses.
func (o *Options) quicConfig() *quic.Config {
	c := QUICConfig(DefaultSilence)
	if o.KeepAlive > 0 {
		c.KeepAlivePeriod = o.KeepAlive
	}
	if o.TuneQUIC != nil {
		o.TuneQUIC(c)
	}
	return c
}

// webTransportQUICConfig is quicConfig with what WebTransport needs.
func (o *Options) webTransportQUICConfig() *quic.Config {
	c := o.quicConfig()
	c.EnableDatagrams = true
	c.EnableStreamResetPartialDelivery = true
	return c
}
