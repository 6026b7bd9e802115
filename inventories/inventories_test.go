package inventories

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

func shippedCatalogue(t *testing.T) *Catalogue {
	t.Helper()
	cat, err := LoadCatalogue(Embedded(ProvidersFile))
	if err != nil {
		t.Fatalf("shipped providers.yaml: %v", err)
	}
	return cat
}

func TestShippedFilesLoad(t *testing.T) {
	cat := shippedCatalogue(t)
	cal, err := LoadCalibration(Embedded(CalibrationFile))
	if err != nil {
		t.Fatal(err)
	}
	if cal.Source != SourceBench || cal.Command != "make bench-relay" || cal.MeasuredOn == "" {
		t.Errorf("the default calibration is not the one measured on the bundled relay: %+v", cal)
	}
	for _, name := range CalibrationNames() {
		path, ok := NamedCalibration(name)
		if !ok {
			t.Fatalf("%s: not a named calibration", name)
		}
		c, err := LoadCalibration(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if CalibrationName(path) != name {
			t.Errorf("CalibrationName(%s) = %s, want %s", path, CalibrationName(path), name)
		}
		if name == DefaultCalibration && *c != *cal {
			t.Errorf("the shipped calibration.yaml is not %s: %+v, want %+v", name, cal, c)
		}
		if name == CalibrationStory && (c.Source != SourceStory || c.ListenersPerCore != 900 || c.ListenersPerSocket != 6500 || c.RAMPerListener != 1_300_000) {
			t.Errorf("story calibration is not the story's numbers: %+v", c)
		}
	}
	if _, ok := NamedCalibration("nope"); ok {
		t.Error(`"nope" is a named calibration`)
	}
	for _, name := range []string{LabFile, "example.yaml"} {
		f, err := LoadFleet(Embedded(name), cat)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(f.Steady) == 0 {
			t.Errorf("%s: no steady boxes", name)
		}
	}
}

func TestParseUnits(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"1.3MB", 1_300_000}, {"64GiB", 64 << 30}, {"20TB", 20e12}, {"512", 512}, {"1 KiB", 1024}, {"0.5TB", 5e11},
	} {
		got, err := ParseBytes(tc.in)
		if err != nil || int64(got) != tc.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "abc", "-1GB", "1XB", "NaN"} {
		if _, err := ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q) accepted", bad)
		}
	}
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"40kbit", 40_000}, {"1Gbit", 1e9}, {"100Mbit/s", 1e8}, {"10Gbit", 1e10},
	} {
		got, err := ParseBitRate(tc.in)
		if err != nil || int64(got) != tc.want {
			t.Errorf("ParseBitRate(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	if _, err := ParseBitRate("1GB"); err == nil {
		t.Error("ParseBitRate accepted a size in bytes")
	}
	for in, want := range map[string]int{"auto": 0, "2": 2} {
		got, err := ParseProcesses(in)
		if err != nil || int(got) != want {
			t.Errorf("ParseProcesses(%q) = %d, %v", in, got, err)
		}
	}
	for _, bad := range []string{"0", "-1", "many"} {
		if _, err := ParseProcesses(bad); err == nil {
			t.Errorf("ParseProcesses(%q) accepted", bad)
		}
	}
	if got := Processes(0).For(12); got != 12 {
		t.Errorf("auto on 12 cores = %d", got)
	}
}

const goodFleet = `version: 1
name: t
steady:
  - name: a
    provider: lab
    shape: small
    count: 2
burst:
  - name: b
    provider: lab
    shape: small
    max: 3
`

// surgeFleet is goodFleet with a surge.
const surgeFleet = goodFleet + `surge:
  when_headroom_below: 20%
  for: 1m
  max: 2
  burst: {provider: lab, shape: small}
`

// TestLoadFleetSurge: a surge's share, times and burst, with its
// defaults: back_for, the burst named surge and capped at the surge's max.
func TestLoadFleetSurge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(surgeFleet), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := LoadFleet(path, shippedCatalogue(t))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Surge
	if s == nil || s.WhenHeadroomBelow != 0.2 || s.For.D() != time.Minute || s.BackFor.D() != DefaultSurgeBackFor || s.Max != 2 ||
		s.Burst.Name != SurgeEvent || s.Burst.Max != 2 || s.Burst.Provider != "lab" || s.Burst.BasePort != DefaultBasePort || s.WhenHeadroomBelow.String() != "20%" {
		t.Errorf("surge = %+v", s)
	}
}

func TestLoadFleetErrors(t *testing.T) {
	cat := shippedCatalogue(t)
	for _, tc := range []struct {
		name, yaml string
		line       int
		field      string
		msg        string
	}{
		{"unknown key", strings.Replace(goodFleet, "    count: 2", "    count: 2\n    cuont: 3", 1), 8, "steady[0].cuont", `unknown key "cuont" in steady[0]`},
		{"unknown top key", goodFleet + "extra: 1\n", 13, "extra", `unknown key "extra" at the top`},
		{"negative count", strings.Replace(goodFleet, "count: 2", "count: -1", 1), 7, "steady[0].count", "must not be negative"},
		{"negative max", strings.Replace(goodFleet, "max: 3", "max: -3", 1), 12, "burst[0].max", "must not be negative"},
		{"wrong type", strings.Replace(goodFleet, "count: 2", "count: two", 1), 7, "steady[0].count", `want an integer, got "two"`},
		{"unknown shape", strings.Replace(goodFleet, "shape: small\n    count", "shape: huge\n    count", 1), 6, "steady[0].shape", `no shape "huge"`},
		{"unknown provider", strings.Replace(goodFleet, "provider: lab\n    shape: small\n    count", "provider: aws\n    shape: small\n    count", 1), 5, "steady[0].provider", `unknown provider "aws"`},
		{"bad processes", strings.Replace(goodFleet, "count: 2", "count: 2\n    processes: 0", 1), 8, "steady[0].processes", "want auto or an integer from 1 to 1024"},
		{"too many processes", strings.Replace(goodFleet, "count: 2", "count: 2\n    processes: 99999999999999", 1), 8, "steady[0].processes", "want auto or an integer from 1 to 1024"},
		{"huge count", strings.Replace(goodFleet, "count: 2", "count: 99999999999", 1), 7, "steady[0].count", "want at most 100000 boxes"},
		{"huge max", strings.Replace(goodFleet, "max: 3", "max: 100001", 1), 12, "burst[0].max", "want at most 100000 boxes"},
		{"fleet burst candidates", strings.Replace(goodFleet, "max: 3", "max: 3\n    candidates: [{provider: lab, shape: small}]", 1), 13, "burst[0].candidates", "only an event's burst lists candidates"},
		{"bad port", strings.Replace(goodFleet, "count: 2", "count: 2\n    base_port: 70000", 1), 8, "steady[0].base_port", "between 1 and 65535"},
		{"privileged port", strings.Replace(goodFleet, "count: 2", "count: 2\n    base_port: 443", 1), 8, "steady[0].base_port", "want 1024 or above"},
		{"duplicate name", strings.Replace(goodFleet, "name: b", "name: a", 1), 9, "burst[0].name", "already the name of steady[0]"},
		{"missing version", strings.Replace(goodFleet, "version: 1\n", "", 1), 1, "version", "missing"},
		{"future version", strings.Replace(goodFleet, "version: 1", "version: 2", 1), 1, "version", "unsupported version"},
		{"empty", "", 0, "version", "file is empty"},
		{"not yaml", "version: 1\nsteady: [\n", 2, "", "not valid YAML"},
		{"static without key", `version: 1
steady:
  - name: s
    provider: static
    shape: lab/small
    hosts:
      - address: 192.0.2.1
`, 7, "steady[0].hosts[0].host_key", "missing"},
		{"static bad address", `version: 1
steady:
  - name: s
    provider: static
    shape: lab/small
    hosts:
      - {address: "not an address", host_key: "ssh-ed25519 AAAA"}
`, 7, "steady[0].hosts[0].address", "want an IP address or host name"},
		{"open ssh", "version: 1\nadmin:\n  ranges: [0.0.0.0/0]\n", 3, "admin.ranges[0]", "whole internet"},
		{"bad origin", "version: 1\norigin: [\"ftp://x/\"]\n", 2, "origin[0]", "want a relay URL"},
		{"burst static", "version: 1\nburst:\n  - name: x\n    provider: static\n    shape: lab/small\n", 4, "burst[0].provider", "belong in steady"},
		{"public listen with a space", "version: 1\naccess:\n  public_listen:\n    - live/\n    - \"live now/\"\n", 5, "access.public_listen[1]", `"live now/" has the character ' '`},
		{"public listen dot dot", "version: 1\naccess:\n  public_listen: [live/../admin]\n", 3, "access.public_listen[0]", `segment ".."`},
		{"public listen empty", "version: 1\naccess:\n  public_listen: [\"\"]\n", 3, "access.public_listen[0]", "empty"},
		{"load generator not an address", "version: 1\naccess:\n  load_generators:\n    - 10.0.0.1\n    - \"10.0.0.0/33\"\n", 5, "access.load_generators[1]", `"10.0.0.0/33" is not an IP address or CIDR prefix`},
		{"sessions per address negative", "version: 1\naccess:\n  max_sessions_per_address: -1\n", 3, "access.max_sessions_per_address", "-1; want 0 (no cap) to 65536"},
		{"public listen absolute", "version: 1\naccess:\n  public_listen: [/live]\n", 3, "access.public_listen[0]", "starts with '/'"},
		{"public listen comma", "version: 1\naccess:\n  public_listen: [\"a/,b/\"]\n", 3, "access.public_listen[0]", "character ','"},
		{"access unknown key", "version: 1\naccess:\n  public_publish: [live/]\n", 3, "access.public_publish", `unknown key "public_publish"`},
		{"surge share", strings.Replace(surgeFleet, "20%", "120%", 1), 14, "surge.when_headroom_below", "above 0% and below 100%"},
		{"surge share without %", strings.Replace(surgeFleet, "20%", "20", 1), 14, "surge.when_headroom_below", "a share such as 20%"},
		{"surge max", strings.Replace(surgeFleet, "max: 2", "max: 0", 1), 16, "surge.max", "want 1 to"},
		{"surge static", strings.Replace(surgeFleet, "provider: lab, shape: small", "provider: static, shape: lab/small", 1), 17, "surge.burst.provider", "static servers"},
		{"surge burst max", strings.Replace(surgeFleet, "shape: small}", "shape: small, max: 3}", 1), 17, "surge.burst.max", "surge.max caps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fleet.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadFleet(path, cat)
			var ie *Error
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if ie.File != path || ie.Line != tc.line || ie.Field != tc.field || !strings.Contains(ie.Msg, tc.msg) {
				t.Errorf("got file=%q line=%d field=%q msg=%q\nwant line=%d field=%q msg containing %q", ie.File, ie.Line, ie.Field, ie.Msg, tc.line, tc.field, tc.msg)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
			if !strings.HasPrefix(err.Error(), path+":") {
				t.Errorf("error does not start with the file name: %q", err)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := LoadCatalogue("/nonexistent/providers.yaml")
	if err == nil || err.Error() != "/nonexistent/providers.yaml: no such file" {
		t.Errorf("err = %v", err)
	}
}

func TestStaticGroupCountsHosts(t *testing.T) {
	cat := shippedCatalogue(t)
	path := filepath.Join(t.TempDir(), "f.yaml")
	testutil.WriteFile(t, path, []byte(`version: 1
steady:
  - name: s
    provider: static
    shape: lab/small
    hosts:
      - {address: 192.0.2.1, host_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJdD7y3aLq454yWBdwLWbieU1ebz9/cu7/QEXn9OIeZJ"}
      - {address: "box.example.net:2222", user: admin, host_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJdD7y3aLq454yWBdwLWbieU1ebz9/cu7/QEXn9OIeZJ"}
`), 0o644)
	f, err := LoadFleet(path, cat)
	if err != nil {
		t.Fatal(err)
	}
	g := f.Steady[0]
	if g.BoxCount() != 2 || g.Hosts[0].User != "root" || g.Hosts[1].User != "admin" || g.BasePort != DefaultBasePort {
		t.Errorf("static group = %+v", g)
	}
}

func TestCatalogueValidation(t *testing.T) {
	base := `version: 1
currency: EUR
providers:
  - name: p
    kind: cloud
    shapes:
      - name: s
        cores: 2
        ram: 4GiB
        uplink: 1Gbit
        hourly: 0.01
        monthly: 5
        currency: EUR
        egress: {included: 1TB, accrues: month, past: billed, price: 1, per: TB}
        source: test
        date: "2026-11-29"
`
	for _, tc := range []struct{ name, from, to, field string }{
		{"no source", "        source: test\n", "", "providers[0].shapes[0].source"},
		{"bad accrual", "accrues: month", "accrues: weekly", "providers[0].shapes[0].egress.accrues"},
		{"billed without price", "price: 1,", "price: 0,", "providers[0].shapes[0].egress.price"},
		{"bad per", "per: TB", "per: PB", "providers[0].shapes[0].egress.per"},
		{"unknown currency", "currency: EUR\n        egress", "currency: GBP\n        egress", "providers[0].shapes[0].currency"},
		{"cdn without reason", "kind: cloud", "kind: cdn", "providers[0].unusable"},
		{"zero cores", "cores: 2", "cores: 0", "providers[0].shapes[0].cores"},
		{"too many cores", "cores: 2", "cores: 99999999999", "providers[0].shapes[0].cores"},
		{"too much ram", "ram: 4GiB", "ram: 100TiB", "providers[0].shapes[0].ram"},
		{"too fast uplink", "uplink: 1Gbit", "uplink: 2Tbit", "providers[0].shapes[0].uplink"},
		{"huge hourly", "hourly: 0.01", "hourly: 1e300", "providers[0].shapes[0].hourly"},
		{"NaN monthly", "monthly: 5", "monthly: .nan", "providers[0].shapes[0].monthly"},
		{"huge egress price", "price: 1,", "price: 1e12,", "providers[0].shapes[0].egress.price"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "providers.yaml")
			testutil.WriteFile(t, path, []byte(strings.Replace(base, tc.from, tc.to, 1)), 0o644)
			_, err := LoadCatalogue(path)
			var ie *Error
			if !errors.As(err, &ie) || ie.Field != tc.field || ie.Line == 0 {
				t.Errorf("err = %v, want an error at %s with a line", err, tc.field)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "providers.yaml")
	testutil.WriteFile(t, path, []byte(base), 0o644)
	cat, err := LoadCatalogue(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cat.Lookup("p/s"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"p", "q/s", "p/t", "p/s@mars"} {
		if _, _, err := cat.Lookup(bad); err == nil {
			t.Errorf("Lookup(%q) succeeded", bad)
		}
	}
}

func TestBeside(t *testing.T) {
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	if got := Beside(fleet, CalibrationFile); got != Embedded(CalibrationFile) {
		t.Errorf("no file beside: got %q", got)
	}
	testutil.WriteFile(t, filepath.Join(dir, CalibrationFile), []byte("version: 1\n"), 0o644)
	if got := Beside(fleet, CalibrationFile); got != filepath.Join(dir, CalibrationFile) {
		t.Errorf("file beside: got %q", got)
	}
}

func TestAccessPublicListen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	testutil.WriteFile(t, path, []byte(goodFleet+"access:\n  public_listen: [live/, radio/7]\n"), 0o644)
	f, err := LoadFleet(path, shippedCatalogue(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.Access.PublicListen, ","); got != "live/,radio/7" {
		t.Errorf("public_listen = %q", got)
	}
}

func TestCalibrationValidation(t *testing.T) {
	base := `version: 1
source: bench
measured_on: "a machine"
command: make bench-relay
listeners_per_core: 1600
listeners_per_socket: 6500
ram_per_listener: 200KiB
bitrate_per_listener: 50kbit
uplink_headroom: 0.7
`
	if _, err := ParseCalibration("c.yaml", []byte(base)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, from, to, field string }{
		{"unknown source", "source: bench", "source: guess", "source"},
		{"bench without command", "command: make bench-relay\n", "", "command"},
		{"bench without machine", "measured_on: \"a machine\"\n", "", "measured_on"},
		{"zero per core", "listeners_per_core: 1600", "listeners_per_core: 0", "listeners_per_core"},
		{"huge per core", "listeners_per_core: 1600", "listeners_per_core: 1e300", "listeners_per_core"},
		{"NaN per socket", "listeners_per_socket: 6500", "listeners_per_socket: .nan", "listeners_per_socket"},
		{"tiny ram", "ram_per_listener: 200KiB", "ram_per_listener: 1", "ram_per_listener"},
		{"huge bitrate", "bitrate_per_listener: 50kbit", "bitrate_per_listener: 1Tbit", "bitrate_per_listener"},
		{"headroom above 1", "uplink_headroom: 0.7", "uplink_headroom: 1.5", "uplink_headroom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseCalibration("c.yaml", []byte(strings.Replace(base, tc.from, tc.to, 1)))
			var ie *Error
			if !errors.As(err, &ie) || ie.Field != tc.field || ie.File != "c.yaml" || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %v, want a one-line error at %s", err, tc.field)
			}
		})
	}
}

// TestAccessSessionsPerAddress: a fleet file that says nothing caps each
// relay at 64 sessions per address (relay serve's default), 0 lifts the
// cap, and the load generators come out as prefixes for
// --uncapped-addresses.
func TestAccessSessionsPerAddress(t *testing.T) {
	for _, tc := range []struct {
		yaml     string
		cap      int
		uncapped string
	}{
		{"version: 1\n", 64, ""},
		{"version: 1\naccess:\n  max_sessions_per_address: 0\n", 0, ""},
		{"version: 1\naccess:\n  max_sessions_per_address: 16\n  load_generators: [198.51.100.7, \"2001:db8::1\", 10.231.87.9/24]\n", 16, "198.51.100.7/32,2001:db8::1/128,10.231.87.0/24"},
	} {
		path := filepath.Join(t.TempDir(), "fleet.yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := LoadFleet(path, nil)
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if got := f.Access.SessionsPerAddress(); got != tc.cap {
			t.Errorf("%q: cap %d, want %d", tc.yaml, got, tc.cap)
		}
		if got := f.Access.UncappedAddresses(); got != tc.uncapped {
			t.Errorf("%q: uncapped %q, want %q", tc.yaml, got, tc.uncapped)
		}
	}
}
