package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// notifySystemd tells systemd (when NOTIFY_SOCKET is set) that the relay is
// ready, pings the watchdog while ctx lasts and the relay answers, and says
// STOPPING at the end. Without systemd it does nothing.
func notifySystemd(ctx context.Context, r *Relay, logger *slog.Logger) (stop func()) {
	if ok, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		logger.Warn("sd_notify ready", "err", err)
	} else if !ok {
		return func() {}
	}
	done := make(chan struct{})
	exited := make(chan struct{})
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval <= 0 {
		close(exited)
	} else {
		go func() {
			defer close(exited)
			t := time.NewTicker(interval / 2)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					// Only a relay whose core answers gets to feed the watchdog.
					if r.ctx.Err() == nil {
						_ = r.Server().Stats()
						_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
					}
				case <-done:
					return
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	return func() {
		close(done)
		<-exited
		_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
	}
}
