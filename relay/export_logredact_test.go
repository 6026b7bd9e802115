package relay

import "log/slog"

// RedactTokensForTest is redactTokens for the external tests.
func RedactTokensForTest(l *slog.Logger) *slog.Logger { return slog.New(redactTokens(l.Handler())) }
