package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in    string
		limit int64
		want  int64
		bad   bool
	}{
		{"0", 1<<31 - 1, 0, false},
		{"7340032", 1<<31 - 1, 7340032, false},
		{"4KiB", 1<<31 - 1, 4 << 10, false},
		{"7MiB", 1<<31 - 1, 7 << 20, false},
		{"1GiB", 1<<31 - 1, 1 << 30, false},
		{"2GiB", 1<<31 - 1, 0, true}, // 2^31 > 2^31-1
		{"3GiB", 1 << 62, 3 << 30, false},
		{"-1", 1 << 62, -1, false}, // the caller refuses sizes below 1
		{"12x", 1 << 62, 0, true},
		{"KiB", 1 << 62, 0, true},
		{"1kib", 1 << 62, 0, true},
		{"9999999999GiB", 1 << 62, 0, true},
		{"99999999999999999999", 1 << 62, 0, true},
	} {
		got, err := ParseBytes(tc.in, tc.limit)
		if (err != nil) != tc.bad || (!tc.bad && got != tc.want) {
			t.Errorf("ParseBytes(%q, %d) = %d, %v; want %d, error %v", tc.in, tc.limit, got, err, tc.want, tc.bad)
		}
	}
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	l, err := NewLogger(&buf, "warn")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	l.Warn("shown")
	if s := buf.String(); strings.Contains(s, "hidden") || !strings.Contains(s, "level=WARN msg=shown") {
		t.Errorf("log: %q", s)
	}
	_, err = NewLogger(&buf, "loud")
	var ue *UsageError
	if !errors.As(err, &ue) || err.Error() != `flag --log-level: "loud" is not debug, info, warn or error` {
		t.Errorf("NewLogger(loud): %v", err)
	}
}
