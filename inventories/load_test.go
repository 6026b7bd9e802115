package inventories

import (
	"errors"
	"testing"
)

// TestChecked: a decoding error comes back as it is and check is not
// called; check's error is placed in the file, at its field's line.
func TestChecked(t *testing.T) {
	type doc struct {
		Version int
		Name    string
	}
	data := []byte("version: 1\nname: x\n")
	var v doc
	d, err := decodeStrict("f.yaml", data, &v)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	bad := func(*doc) error { calls++; return fieldErr("name", "not x") }
	_, err = checked(&v, d, nil, bad)
	var e *Error
	if !errors.As(err, &e) || e.File != "f.yaml" || e.Field != "name" || e.Line != 2 || calls != 1 {
		t.Errorf("check error = %#v, calls %d; want f.yaml line 2, field name", err, calls)
	}
	decodeErr := errors.New("decode")
	if got, err := checked(&v, nil, decodeErr, bad); got != nil || err != decodeErr || calls != 1 {
		t.Errorf("decode error: %v, %v, calls %d; want it as it is, check not called", got, err, calls)
	}
	if got, err := checked(&v, d, nil, func(*doc) error { return nil }); got != &v || err != nil {
		t.Errorf("good: %v, %v", got, err)
	}
}
