package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultProberWindow is how long a Prober listens per scrape.
const DefaultProberWindow = time.Second

// MaxProberWindow bounds the window a scrape may ask for.
const MaxProberWindow = 10 * time.Second

// Prober serves the fleet heartbeat probe to Prometheus the way the
// blackbox exporter serves its probes (the multi-target exporter
// pattern): GET /probe?target=HOST:PORT hears the heartbeat through that
// relay process for Window (or ?window=, at most MaxProberWindow) and
// answers its figures as metrics, so that an alert fires for a process
// that answers /metrics and /healthz but passes nothing from its origin
// on. The process's certificate hash is read from its /stats over
// http:// (TrustHTTPHash, as the router reads it): a target from a
// file_sd file carries no pin.
type Prober struct {
	Window time.Duration
	Logger *slog.Logger
	// probe replaces ProbeHeartbeat in tests.
	probe func(ctx context.Context, o ProbeOptions) (ProbeResult, error)
}

// ServeHTTP implements http.Handler: /probe as above.
func (p *Prober) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/probe" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if r.URL.Path != "/" {
			w.WriteHeader(http.StatusNotFound)
		}
		io.WriteString(w, "relay prober: GET /probe?target=HOST:PORT[&window=1s] hears the fleet heartbeat through that relay process\n")
		return
	}
	target := r.URL.Query().Get("target")
	if _, _, err := net.SplitHostPort(target); err != nil {
		http.Error(w, fmt.Sprintf("target %q: want HOST:PORT", target), http.StatusBadRequest)
		return
	}
	window := p.Window
	if window <= 0 {
		window = DefaultProberWindow
	}
	if v := r.URL.Query().Get("window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > MaxProberWindow {
			http.Error(w, fmt.Sprintf("window %q: want a duration up to %v", v, MaxProberWindow), http.StatusBadRequest)
			return
		}
		window = d
	}
	probe := p.probe
	if probe == nil {
		probe = ProbeHeartbeat
	}
	start := time.Now()
	res, err := probe(r.Context(), ProbeOptions{URL: "http://" + target + "/", Window: window,
		Dial: Options{TrustHTTPHash: true, Logger: p.Logger}})
	if err != nil && p.Logger != nil {
		p.Logger.Warn("heartbeat probe failed", "target", target, "err", err)
	}
	reg := prometheus.NewRegistry()
	gauge := func(name, help string, v float64) {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		g.Set(v)
		reg.MustRegister(g)
	}
	ok := 0.0
	if err == nil {
		ok = 1
	}
	gauge("relayfleet_heartbeat_probe_success", "1 when the probe connected to the relay process and subscribed to the fleet heartbeat", ok)
	gauge("relayfleet_heartbeat_probe_duration_seconds", "how long the probe took", time.Since(start).Seconds())
	if err == nil || errors.Is(err, context.Canceled) {
		due := int(window / DefaultHeartbeatInterval)
		gauge("relayfleet_heartbeat_groups", "heartbeat groups heard through the process in the window", float64(res.Groups))
		gauge("relayfleet_heartbeat_groups_due", "heartbeat groups the origin sent in the window", float64(due))
		gauge("relayfleet_heartbeat_lost", "heartbeat groups missing between the first and the last heard, and due after", float64(res.Lost))
		gauge("relayfleet_heartbeat_max_gap_seconds", "the longest time between two groups heard", res.MaxGap.Seconds())
	}
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}

// ProberFlags are relay prober's flags.
type ProberFlags struct {
	Listen string
	Window time.Duration
}

// Run is relay prober: it serves a Prober on Listen until ctx ends.
func (f *ProberFlags) Run(ctx context.Context, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", f.Listen)
	if err != nil {
		return fmt.Errorf("prober: %w", err)
	}
	srv := &http.Server{Handler: &Prober{Window: f.Window, Logger: logger}, ReadHeaderTimeout: 5 * time.Second}
	logger.Info("relay prober listening", "addr", ln.Addr().String())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("prober: %w", err)
	}
	return nil
}
