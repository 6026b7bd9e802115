package relay

import (
	"context"
	"testing"
)

// TestShedOrder: listeners go first; publishers and cluster links (a
// token that may subscribe to everything) last.
func TestShedOrder(t *testing.T) {
	s := NewServer(ServerOptions{Logger: testLogger()})
	ctx := context.Background()
	mk := func(perms Permissions, broadcasts int) *session {
		sess := &session{srv: s, ctx: ctx, perms: perms, broadcasts: broadcasts}
		s.sessions[sess] = struct{}{}
		return sess
	}
	var last []*session
	for range 20 {
		mk(Permissions{subscribe: []string{"live"}}, 0) // listener with a token
		mk(Permissions{all: true}, 0)                   // listener, no auth
	}
	last = append(last, mk(Permissions{subscribe: []string{""}}, 0)) // cluster link
	last = append(last, mk(Permissions{all: true}, 1))               // publisher
	last = append(last, mk(Permissions{publish: []string{"live"}}, 2))
	order := s.shedOrder()
	if len(order) != 43 {
		t.Fatalf("%d sessions in the order, want 43", len(order))
	}
	isLast := map[*session]bool{}
	for _, sess := range last {
		isLast[sess] = true
	}
	for i, sess := range order {
		if isLast[sess] != (i >= 40) {
			t.Fatalf("session %d of the order (%+v, %d broadcasts) out of place", i, sess.perms, sess.broadcasts)
		}
	}
}
