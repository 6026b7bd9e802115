//go:build lab && monitor

package labtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/plot"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/monitoring"
	"github.com/relayfleet/relayfleet/relay/wire"
)

// TestMonitorLab: Debian's Prometheus scrapes a lab box's two relay
// processes through the target files fleet monitor writes; one process is
// given a tiny receive buffer (a drop-in adding --udp-buffer 4096) and
// blasted with datagrams from this machine, and Prometheus's own API shows
// every target up, the drop alert firing for that process only, and every
// dashboard query answered. fleet status shows DROPS first. Its lab is its
// own: bridge rfmon0, subnet 10.231.93.0/24.
func TestMonitorLab(t *testing.T) {
	prom := testutil.Require(t, "prometheus", "prometheus")
	lf := upLabFleet(t, labFleetSpec{LabDir: "/var/lib/relayfleet/lab-monitor", Bridge: "rfmon0", Subnet: "10.231.93.0/24", Inventory: `version: 1
name: monitor
access:
  load_generators: [10.231.0.0/16]
steady:
  - name: mon
    provider: lab
    shape: small
    count: 1
    processes: 2
    base_port: 4443
`})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := lf.Dir
	h := lf.hosts(t)[0]
	box := struct {
		Name    string
		Address netip.Addr
	}{h.Name, netip.MustParseAddr(h.Address)}

	// relay@4444 gets a tiny receive buffer.
	targets, done := lf.targets(t)
	defer done()
	dropIn := `d=/etc/systemd/system/relay@4444.service.d
mkdir -p $d
line=$(systemctl cat relay@4444.service | grep '^ExecStart=' | tail -n 1)
printf '[Service]\nExecStart=\n%s --udp-buffer 4096\n' "$line" > $d/tiny-buffer.conf
systemctl daemon-reload
systemctl restart relay@4444.service
cat $d/tiny-buffer.conf`
	if raw, err := targets[0].Run.Run(ctx, dropIn, nil); err != nil {
		t.Fatalf("drop-in: %v\n%s", err, raw)
	} else {
		t.Logf("drop-in:\n%s", raw)
	}
	statsOf := func(port int) (wire.Stats, error) {
		var st wire.Stats
		resp, err := http.Get(fmt.Sprintf("http://%s/stats", net.JoinHostPort(box.Address.String(), fmt.Sprint(port))))
		if err != nil {
			return st, err
		}
		defer resp.Body.Close()
		return st, json.NewDecoder(resp.Body).Decode(&st)
	}
	poll(t, ctx, 60*time.Second, "relay@4444 up with a 4096-byte buffer", func() (bool, string) {
		st, err := statsOf(4444)
		return err == nil && st.UDPBufferRequested == 4096, fmt.Sprintf("%+v %v", st.UDPBufferRequested, err)
	})

	mon := filepath.Join(dir, "monitor")
	// No stack: fleet monitor finds the lab box as fleet status does, and
	// its relay@ units over SSH.
	// relay prober, which Prometheus asks to hear the fleet heartbeat
	// through each process (each relay here is its own origin).
	proberAddr := freeAddr(t)
	testutil.StartLog(t, filepath.Join(dir, "prober.log"), exec.CommandContext(ctx, lf.Relay, "prober", "--listen", proberAddr))
	out, errOut, code := fleet(t, "monitor", "--out", mon, "--inventory", lf.Inv, "--state-dir", lf.State, "--scrape-interval", "1s", "--evaluation-interval", "1s", "--prober", proberAddr)
	if code != 0 {
		t.Fatalf("fleet monitor: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("fleet monitor:\n%s", out)

	promAddr := freeAddr(t)
	testutil.StartLog(t, filepath.Join(dir, "prometheus.log"), exec.CommandContext(ctx, prom, "--config.file="+filepath.Join(mon, monitoring.ConfigFile),
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+promAddr))
	promStart := time.Now()
	api := func(path string, q url.Values, v any) error { return promGet(promAddr, path, q, v) }

	// Every target up.
	poll(t, ctx, 90*time.Second, "both relay targets and their heartbeat probes up", func() (bool, string) {
		var d struct {
			ActiveTargets []struct {
				ScrapeURL string `json:"scrapeUrl"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		}
		if err := api("/api/v1/targets", url.Values{"state": {"active"}}, &d); err != nil {
			return false, err.Error()
		}
		up := 0
		for _, tg := range d.ActiveTargets {
			if tg.Health == "up" {
				up++
			}
		}
		return up == 4 && len(d.ActiveTargets) == 4, fmt.Sprintf("%+v", d.ActiveTargets)
	})
	// The heartbeat through relay@4443 (relay@4444 is about to be blasted).
	poll(t, ctx, 60*time.Second, "relay@4443's heartbeat heard through the prober", func() (bool, string) {
		var res struct {
			Result []struct {
				Value []any `json:"value"`
			} `json:"result"`
		}
		q := fmt.Sprintf(`relayfleet_heartbeat_groups{instance="%s"}`, net.JoinHostPort(box.Address.String(), "4443"))
		if err := api("/api/v1/query", url.Values{"query": {q}}, &res); err != nil {
			return false, err.Error()
		}
		if len(res.Result) != 1 || len(res.Result[0].Value) != 2 {
			return false, fmt.Sprintf("%+v", res)
		}
		n, _ := strconv.Atoi(fmt.Sprint(res.Result[0].Value[1]))
		return n >= 6, fmt.Sprintf("%d groups", n)
	})

	// Blast relay@4444 until the alert fires.
	blaster, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: box.Address.AsSlice(), Port: 4444})
	if err != nil {
		t.Fatal(err)
	}
	defer blaster.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		junk := make([]byte, 1200)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for range 2000 {
				_, _ = blaster.Write(junk)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	type alert struct {
		Labels map[string]string `json:"labels"`
		State  string            `json:"state"`
	}
	var firing []alert
	poll(t, ctx, 120*time.Second, "RelayUDPDrops firing for relay@4444", func() (bool, string) {
		var d struct {
			Alerts []alert `json:"alerts"`
		}
		if err := api("/api/v1/alerts", nil, &d); err != nil {
			return false, err.Error()
		}
		firing = firing[:0]
		ok := false
		for _, a := range d.Alerts {
			if a.Labels["alertname"] == "RelayUDPDrops" && a.State == "firing" {
				firing = append(firing, a)
				ok = ok || strings.HasSuffix(a.Labels["instance"], ":4444")
			}
		}
		return ok, fmt.Sprintf("%+v", d.Alerts)
	})
	// The recorded rate the dashboard draws sees the drops too.
	poll(t, ctx, 60*time.Second, "relayfleet:udp_drops:rate5m above 0 for relay@4444", func() (bool, string) {
		var v struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		}
		if err := api("/api/v1/query", url.Values{"query": {"relayfleet:udp_drops:rate5m > 0"}}, &v); err != nil {
			return false, err.Error()
		}
		return len(v.Result) == 1 && v.Result[0].Metric["port"] == "4444", fmt.Sprintf("%+v", v.Result)
	})
	close(stop)
	wg.Wait()
	for _, a := range firing {
		if !strings.HasSuffix(a.Labels["instance"], ":4444") || a.Labels["box"] != box.Name || a.Labels["stack"] != "monitor" || a.Labels["group"] != "mon" || a.Labels["backend"] != "lab" {
			t.Errorf("drop alert %v: want only relay@4444 on %s, stack monitor", a.Labels, box.Name)
		}
	}
	st4443, err1 := statsOf(4443)
	st4444, err2 := statsOf(4444)
	if err1 != nil || err2 != nil || st4443.UDPDrops != 0 || st4444.UDPDrops == 0 {
		t.Errorf("drops: 4443 %d (%v), 4444 %d (%v); want 0 and more", st4443.UDPDrops, err1, st4444.UDPDrops, err2)
	}
	t.Logf("relay@4444 dropped %d datagrams (receive buffer %d); relay@4443 %d", st4444.UDPDrops, st4444.UDPReceiveBuffer, st4443.UDPDrops)

	// Real Prometheus answers every dashboard query.
	var dash struct {
		Panels []dashPanel `json:"panels"`
	}
	if err := json.Unmarshal(monitoring.Dashboard(), &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			e := strings.NewReplacer("$__range_s", "3600", "$__range", "1h").Replace(tg.Expr)
			var res json.RawMessage
			if err := api("/api/v1/query", url.Values{"query": {e}}, &res); err != nil {
				t.Errorf("panel %s: %v", p.Title, err)
			}
		}
	}

	// What the hardened unit lets the relay see (logged, not asserted: it
	// depends on the kernel and the unit): relay_sysctl needs /proc/sys,
	// which ProcSubset=pid hides; the buffers granted show the clamp.
	for _, q := range []string{"count(relay_sysctl)", "relay_udp_receive_buffer_bytes", `ALERTS{alertstate="firing"}`} {
		var res json.RawMessage
		err := api("/api/v1/query", url.Values{"query": {q}}, &res)
		t.Logf("%s: %s %v", q, res, err)
	}

	// The dashboard's time-series panels as Prometheus computes them over
	// the run, drawn with internal/plot (Grafana is not in Debian):
	// $RELAYFLEET_MONITOR_KEEP/monitor-dashboard.svg.
	if keep := os.Getenv("RELAYFLEET_MONITOR_KEEP"); keep != "" {
		svg, err := renderDashboard(dash.Panels, promStart, time.Now(), func(q url.Values, v any) error { return api("/api/v1/query_range", q, v) }, t.Logf)
		if err != nil {
			t.Errorf("render the dashboard: %v", err)
		} else if err := os.WriteFile(filepath.Join(keep, "monitor-dashboard.svg"), svg, 0o644); err != nil {
			t.Error(err)
		}
	}

	// fleet status puts DROPS first.
	out, errOut, code = fleet(t, append([]string{"status"}, lf.args()...)...)
	t.Logf("fleet status:\n%s%s", out, errOut)
	lines := strings.Split(out, "\n")
	if code != 0 || !strings.HasPrefix(lines[0], "DROPS: 1 relay process dropped") || !strings.HasPrefix(lines[2], "DROPS ") {
		t.Errorf("fleet status: exit %d, want the DROPS line and column first", code)
	}
}

// dashPanel is the part of a dashboard panel renderDashboard reads.
type dashPanel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr   string `json:"expr"`
		Legend string `json:"legendFormat"`
	} `json:"targets"`
}

// renderDashboard draws the time-series panels that have data between
// from and to, one chart each, from Prometheus's query_range.
func renderDashboard(panels []dashPanel, from, to time.Time, queryRange func(url.Values, any) error, logf func(string, ...any)) ([]byte, error) {
	var charts []plot.Chart
	for _, p := range panels {
		if p.Type != "timeseries" {
			continue
		}
		c := plot.Chart{Title: p.Title, XLabel: "time since Prometheus started", XTime: true, Height: 220}
		for _, tg := range p.Targets {
			var m struct {
				Result []struct {
					Metric map[string]string `json:"metric"`
					Values [][2]any          `json:"values"`
				} `json:"result"`
			}
			q := url.Values{"query": {tg.Expr}, "start": {fmt.Sprint(from.Unix())}, "end": {fmt.Sprint(to.Unix())}, "step": {"1"}}
			if err := queryRange(q, &m); err != nil {
				return nil, fmt.Errorf("panel %s: %w", p.Title, err)
			}
			if len(m.Result) == 0 {
				logf("panel %s: %s: no data from %s to %s", p.Title, tg.Expr, q.Get("start"), q.Get("end"))
			}
			for _, r := range m.Result {
				name := tg.Legend
				for k, v := range r.Metric {
					name = strings.ReplaceAll(name, "{{"+k+"}}", v)
				}
				var sr plot.Series
				sr.Name = name
				for _, v := range r.Values {
					ts, _ := v[0].(float64)
					val, _ := v[1].(string)
					y, err := strconv.ParseFloat(val, 64)
					if err != nil {
						continue
					}
					sr.X, sr.Y = append(sr.X, ts-float64(from.Unix())), append(sr.Y, y)
				}
				if len(sr.X) > 0 {
					c.Series = append(c.Series, sr)
				}
			}
		}
		if len(c.Series) > 0 {
			charts = append(charts, c)
		}
	}
	if len(charts) == 0 {
		return nil, fmt.Errorf("no panel has data")
	}
	return plot.Stack(charts...)
}

// promGet asks the Prometheus at addr's HTTP API (path, with q) and
// decodes its data into v.
func promGet(addr, path string, q url.Values, v any) error {
	resp, err := http.Get("http://" + addr + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%s: %v: %s", path, err, body)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s %s: %s", path, q.Encode(), env.Error)
	}
	return json.Unmarshal(env.Data, v)
}

// poll calls cond until it holds or limit passes.
func poll(t *testing.T, ctx context.Context, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	last := ""
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s; last: %s", what, limit, last)
}

// freeAddr is a free loopback TCP address.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
