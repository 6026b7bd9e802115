package cli

import (
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
)

// ParseBytes parses a size in bytes, a whole number with an optional
// suffix KiB, MiB or GiB, that is at most limit.
func ParseBytes(s string, limit int64) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if n > limit/mult {
		return 0, errors.New("too large")
	}
	return n * mult, nil
}

// NewLogger is a text logger writing to w at level (debug, info, warn or
// error, the value of a --log-level flag); another level is a usage error
// naming the flag.
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, Usagef("flag --log-level: %q is not debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
