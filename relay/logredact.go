package relay

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
)

// tokenInURL matches the value of a jwt query parameter.
var tokenInURL = regexp.MustCompile(`([?&]jwt=)[^&#\s"]*`)

// redactTokens returns a handler that passes records to h with every
// ?jwt= value replaced by REDACTED. The HTTP/3 server logs each request's
// URI at debug level, and WebTransport clients (the listen page, `relay
// listen --transport webtransport`) carry their token there.
func redactTokens(h slog.Handler) slog.Handler { return redactHandler{h} }

type redactHandler struct{ h slog.Handler }

func (r redactHandler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, redactString(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

func (r redactHandler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = redactAttr(a)
	}
	return redactHandler{r.h.WithAttrs(red)}
}

func (r redactHandler) WithGroup(name string) slog.Handler { return redactHandler{r.h.WithGroup(name)} }

func redactString(s string) string {
	if !strings.Contains(s, "jwt=") {
		return s
	}
	return tokenInURL.ReplaceAllString(s, "${1}REDACTED")
}

func redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, redactString(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, x := range g {
			red[i] = redactAttr(x)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		// An error or a URL that holds a token becomes its redacted text;
		// anything else stays as it is.
		var text string
		switch x := v.Any().(type) {
		case error:
			text = x.Error()
		case interface{ String() string }:
			text = x.String()
		}
		if red := redactString(text); red != text {
			return slog.String(a.Key, red)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
