package backend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrRemain is wrapped by Sweep's error when boxes it should have removed
// may still exist.
var ErrRemain = errors.New("boxes remain")

// labelTier is the label Sweep insists on besides LabelFleet.
const labelTier = "tier"

// Sweep proves that no box carrying every label in labels remains: it
// lists them, deletes each, and lists again.
// It returns the boxes it found (and deleted). It refuses labels without a
// non-empty "fleet" label and "tier" label, so it can never sweep a whole
// account.
//
// When a delete fails or the second list still shows boxes, the error wraps
// ErrRemain and names them; found is returned then too. A box whose Delete
// failed counts as remaining even if the list no longer shows it, since a
// cloud's list may lag behind its deletes.
func Sweep(ctx context.Context, b Backend, labels map[string]string) (found []Box, err error) {
	if err := ValidLabels(labels); err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	for _, k := range []string{LabelFleet, labelTier} {
		if labels[k] == "" {
			return nil, fmt.Errorf("sweep: no %q label: refusing to sweep beyond one fleet's tier", k)
		}
	}
	found, err = b.List(ctx, labels)
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	var remain []Box
	var delErr error
	for _, box := range found {
		// Keep going: one box that will not go must not shield the others.
		if err := b.Delete(ctx, box.ID); err != nil {
			remain = append(remain, box)
			if delErr == nil {
				delErr = err
			}
		}
	}
	left, listErr := b.List(ctx, labels)
	for _, box := range left {
		if !slices.ContainsFunc(remain, func(r Box) bool { return r.ID == box.ID }) {
			remain = append(remain, box)
		}
	}
	switch {
	case listErr != nil && len(remain) == 0:
		return found, fmt.Errorf("sweep: checking that %d boxes are gone: %w", len(found), listErr)
	case listErr != nil:
		return found, fmt.Errorf("sweep: %w: %s; %w; checking: %w", ErrRemain, boxNames(remain), delErr, listErr)
	case len(remain) == 0:
		return found, nil
	case delErr != nil:
		return found, fmt.Errorf("sweep: %w: %s; %w", ErrRemain, boxNames(remain), delErr)
	}
	return found, fmt.Errorf("sweep: %w after delete: %s", ErrRemain, boxNames(remain))
}

// boxNames is "name (id), ..." sorted by name.
func boxNames(boxes []Box) string {
	boxes = slices.Clone(boxes)
	slices.SortFunc(boxes, func(a, b Box) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID))
	})
	names := make([]string, len(boxes))
	for i, b := range boxes {
		names[i] = fmt.Sprintf("%s (%s)", b.Name, b.ID)
	}
	return strings.Join(names, ", ")
}
