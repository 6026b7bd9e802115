package router

import (
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// routeCounts counts /route answers: a relay named, or 503 (no relay with
// headroom).
type routeCounts struct{ routed, unavailable, limited atomic.Int64 }

// routerCollector exports the router's view of its relays on /metrics:
// relay_router_relays{state} (healthy, unhealthy, draining),
// relay_router_headroom (the healthy relays' polled headroom, summed) and
// relay_router_routes_total{result} (routed, unavailable, limited); per
// region (region.go): relay_router_region_relays{region} (healthy, not
// draining relays), relay_router_region_headroom{region} and
// relay_router_region_routes_total{region,result} (in_region, fallback,
// unavailable; region "unknown" for hints the relays file does not know).
type routerCollector struct {
	r                        *Router
	relays, headroom, routes *prometheus.Desc

	regionRelays, regionHeadroom, regionRoutes *prometheus.Desc
}

func newRouterCollector(r *Router) *routerCollector {
	return &routerCollector{
		r: r,
		relays: prometheus.NewDesc("relay_router_relays", "Relay processes in the relays file, by state (healthy, unhealthy: its last poll failed, draining).",
			[]string{"state"}, nil),
		headroom: prometheus.NewDesc("relay_router_headroom", "Listeners the healthy, not draining relays said they can take still, summed.", nil, nil),
		routes: prometheus.NewDesc("relay_router_routes_total", "Answers to /route: routed (a relay named), unavailable (503, no relay with headroom) or limited (503, over the router's rate, --rate and --burst).",
			[]string{"result"}, nil),
		regionRelays: prometheus.NewDesc("relay_router_region_relays", "Healthy, not draining relay processes of each region (relays without a region under \"none\").",
			[]string{"region"}, nil),
		regionHeadroom: prometheus.NewDesc("relay_router_region_headroom", "Listeners the healthy, not draining relays of each region said they can take still, summed.",
			[]string{"region"}, nil),
		regionRoutes: prometheus.NewDesc("relay_router_region_routes_total", "Answers to /route for listeners of a region (its region= hint, else its address's prefix): in_region, fallback (a relay of another region: none of its own had room) or unavailable (503).",
			[]string{"region", "result"}, nil),
	}
}

func (c *routerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.relays
	ch <- c.headroom
	ch <- c.routes
	ch <- c.regionRelays
	ch <- c.regionHeadroom
	ch <- c.regionRoutes
}

func (c *routerCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{"healthy": 0, "unhealthy": 0, "draining": 0}
	headroom := 0
	regionRelays, regionHeadroom := map[string]int{}, map[string]int{}
	c.r.mu.Lock()
	for rg := range c.r.knownRegion {
		regionRelays[rg], regionHeadroom[rg] = 0, 0
	}
	for _, s := range c.r.relays {
		switch {
		case s.Draining:
			counts["draining"]++
		case s.Healthy:
			counts["healthy"]++
			headroom += s.Headroom
			if len(c.r.knownRegion) > 0 {
				regionRelays[orNone(s.Region)]++
				regionHeadroom[orNone(s.Region)] += s.Headroom
			}
		default:
			counts["unhealthy"]++
		}
	}
	c.r.mu.Unlock()
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.relays, prometheus.GaugeValue, float64(n), state)
	}
	ch <- prometheus.MustNewConstMetric(c.headroom, prometheus.GaugeValue, float64(headroom))
	ch <- prometheus.MustNewConstMetric(c.routes, prometheus.CounterValue, float64(c.r.counts.routed.Load()), "routed")
	ch <- prometheus.MustNewConstMetric(c.routes, prometheus.CounterValue, float64(c.r.counts.unavailable.Load()), "unavailable")
	ch <- prometheus.MustNewConstMetric(c.routes, prometheus.CounterValue, float64(c.r.counts.limited.Load()), "limited")
	for rg, n := range regionRelays {
		ch <- prometheus.MustNewConstMetric(c.regionRelays, prometheus.GaugeValue, float64(n), rg)
		ch <- prometheus.MustNewConstMetric(c.regionHeadroom, prometheus.GaugeValue, float64(regionHeadroom[rg]), rg)
	}
	for rg, m := range c.r.rcounts.snapshot() {
		for result, n := range m {
			ch <- prometheus.MustNewConstMetric(c.regionRoutes, prometheus.CounterValue, float64(n), rg, result)
		}
	}
}

func (r *Router) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newRouterCollector(r))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
