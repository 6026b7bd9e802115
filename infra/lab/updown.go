package lab

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// MaxUp is the most boxes Up brings up at once (fleet lab up N).
const MaxUp = 200

// Starter is what Up needs of a lab: *Lab, or a fake in tests.
type Starter interface {
	EnsureImage(ctx context.Context) (string, error)
	Get(ctx context.Context, name string) (Box, error)
	Start(ctx context.Context, spec Spec) (Box, error)
	Wait(ctx context.Context, name string) error
	Delete(ctx context.Context, name string) error
}

var _ Starter = (*Lab)(nil)

// Started is one box of Up: up (Err nil) in Took, or already running
// before (WasRunning), or failed.
type Started struct {
	Box        Box
	Took       time.Duration
	WasRunning bool
	Err        error
}

// rollbackTimeout bounds removing the boxes of an interrupted Up.
const rollbackTimeout = 2 * time.Minute

// UpName is the name of the i-th box (from 0) Up starts: box1, box2, ...
func UpName(i int) string { return fmt.Sprintf("box%d", i+1) }

// Up brings boxes box1..boxN of shape up: it makes sure of the image,
// starts them in order (quick: their addresses follow their names), then
// waits for them together. It returns every box's result, in order, and
// the errors of those that failed, joined.
//
// When ctx ends first (a signal), the boxes this call started are
// removed, on a context of their own, so that none is left half up; those
// that ran before stay. The error then says which were removed, and there
// are no results.
func Up(ctx context.Context, l Starter, n int, shape Shape) ([]Started, error) {
	if n < 1 || n > MaxUp {
		return nil, fmt.Errorf("want the number of boxes (1-%d), got %d", MaxUp, n)
	}
	if _, err := l.EnsureImage(ctx); err != nil {
		return nil, err
	}
	results := make([]Started, n)
	starts := make([]time.Time, n)
	for i := range results {
		r := &results[i]
		name := UpName(i)
		prev, err := l.Get(ctx, name)
		r.WasRunning = err == nil && prev.State == StateRunning
		starts[i] = time.Now()
		r.Box, r.Err = l.Start(ctx, Spec{Name: name, Shape: shape, Labels: map[string]string{"fleet": "lab"}})
	}
	var wg sync.WaitGroup
	for i := range results {
		r := &results[i]
		if r.Err != nil {
			continue
		}
		wg.Go(func() {
			r.Err = l.Wait(ctx, r.Box.Name)
			r.Took = time.Since(starts[i])
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, rollback(ctx, l, results)
	}
	var errs []error
	for _, r := range results {
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
	}
	return results, errors.Join(errs...)
}

// rollback removes the boxes of an interrupted Up that did not run
// before it.
func rollback(ctx context.Context, l Starter, results []Started) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	var removed []string
	for i, r := range results {
		if r.WasRunning {
			continue
		}
		name := UpName(i)
		if err := l.Delete(cctx, name); err != nil {
			return fmt.Errorf("%w; removing %s: %v", ctx.Err(), name, err)
		}
		removed = append(removed, name)
	}
	return fmt.Errorf("removed the boxes it had started (%s)", strings.Join(removed, ", "))
}

// Remover is what Down needs of a lab: *Lab, or a fake in tests.
type Remover interface {
	List(ctx context.Context, labels map[string]string) ([]Box, error)
	Delete(ctx context.Context, name string) error
	Cleanup(ctx context.Context) error
}

var _ Remover = (*Lab)(nil)

// Down deletes every box of the lab, all at once, then, when every one
// went, what the lab holds besides (Cleanup: the bridge). It returns the
// names of the boxes it deleted, in the lab's order, and the errors of
// those it could not, joined.
func Down(ctx context.Context, l Remover) ([]string, error) {
	boxes, err := l.List(ctx, nil)
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(boxes))
	var wg sync.WaitGroup
	for i, b := range boxes {
		wg.Go(func() { errs[i] = l.Delete(ctx, b.Name) })
	}
	wg.Wait()
	var deleted []string
	for i, b := range boxes {
		if errs[i] == nil {
			deleted = append(deleted, b.Name)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return deleted, err
	}
	return deleted, l.Cleanup(ctx)
}
