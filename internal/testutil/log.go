package testutil

import (
	"log/slog"
	"os"
)

// Logger is a logger for the code under test: it discards, unless
// RELAY_TEST_LOG is set, when it writes everything from debug up to
// stderr.
func Logger() *slog.Logger {
	if os.Getenv("RELAY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
