package moqlite

import (
	"errors"
	"sync/atomic"
)

// ErrOverBudget is returned when reading would take a Budget past its
// limit: the peer is holding more buffered data than it may.
var ErrOverBudget = errors.New("moqlite: buffered bytes over the session budget")

// Budget bounds the bytes that the readers sharing it (the streams of one
// session) hold at once. It is safe for concurrent use; a nil *Budget is no
// limit.
type Budget struct {
	limit int64
	used  atomic.Int64
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// Reserve takes n bytes from the budget and reports whether they fit;
// when they do not, nothing is taken.
func (b *Budget) Reserve(n int) bool {
	if b == nil || n <= 0 {
		return true
	}
	if b.used.Add(int64(n)) > b.limit {
		b.used.Add(-int64(n))
		return false
	}
	return true
}

// Release gives back n bytes taken with Reserve.
func (b *Budget) Release(n int) {
	if b != nil && n > 0 {
		b.used.Add(-int64(n))
	}
}

// Used is the bytes reserved now.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}
