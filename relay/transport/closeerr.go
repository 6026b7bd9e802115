package transport

import (
	"errors"
	"fmt"

	"github.com/coder/websocket"
)

// CloseError is how a WebSocket session ended when the peer said why: the
// application code and reason of its qmux CLOSE frame, or the WebSocket
// close status. It wraps ErrSessionClosed, and a *websocket.CloseError
// when the status is what the peer sent, so that callers can tell a
// going-away close (code 0x10, status 1001) from a crash.
type CloseError struct {
	// Code is the application error code of a qmux CLOSE frame (0 when
	// only a WebSocket close status came).
	Code   uint64
	Reason string
	// Status is the WebSocket close status, or -1 when a CLOSE frame
	// came before any.
	Status websocket.StatusCode
	err    error // the websocket error, if any
}

func (e *CloseError) Error() string {
	if e.Status >= 0 {
		return fmt.Sprintf("%v: closed by peer: websocket status %d: %s", ErrSessionClosed, int(e.Status), e.Reason)
	}
	return fmt.Sprintf("%v: closed by peer: code %d: %s", ErrSessionClosed, e.Code, e.Reason)
}

// Unwrap returns ErrSessionClosed and the websocket close error.
func (e *CloseError) Unwrap() []error {
	if e.err != nil {
		return []error{ErrSessionClosed, e.err}
	}
	return []error{ErrSessionClosed}
}

// readError is the session's end after a failed WebSocket read: a
// *CloseError when the peer sent a close status, else err wrapped.
func readError(err error) error {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return &CloseError{Status: ce.Code, Reason: ce.Reason, err: err}
	}
	return fmt.Errorf("%w: %v", ErrSessionClosed, err)
}
