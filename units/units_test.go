package units

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

func TestRenderGolden(t *testing.T) {
	files, err := Render(Layout{Cores: 2, RAM: 4 << 30, BasePort: 4443, Binary: "/opt/relayfleet/current/relay"})
	if err != nil {
		t.Fatal(err)
	}
	router, err := Router("/opt/relayfleet/current/relay", "")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, router)
	var got bytes.Buffer
	for _, f := range files {
		got.WriteString("=== " + f.Path + "\n")
		got.Write(f.Data)
	}
	testutil.Golden(t, filepath.Join("testdata", "2-cores-4GiB.golden"), got.Bytes())
}

func TestMemoryMax(t *testing.T) {
	for _, tc := range []struct {
		l         Layout
		max, high int64
	}{
		// 64 GiB, 12 processes, 256 MiB reserve.
		{Layout{Cores: 12, RAM: 64 << 30}, (64<<30 - 256<<20) / 12, (64<<30 - 256<<20) / 12 / 10 * 9},
		// 1 GiB lab box: the reserve is an eighth, 128 MiB.
		{Layout{Cores: 1, RAM: 1 << 30}, 1<<30 - 128<<20, (1<<30 - 128<<20) / 10 * 9},
		{Layout{Cores: 4, RAM: 8 << 30, Processes: 2, Reserve: 1 << 30}, 7 << 29, (7 << 29) / 10 * 9},
	} {
		max, high := tc.l.MemoryMax()
		if max != tc.max || high != tc.high || high >= max {
			t.Errorf("%+v: MemoryMax = %d, %d; want %d, %d", tc.l, max, high, tc.max, tc.high)
		}
	}
}

func TestRenderRejects(t *testing.T) {
	for _, l := range []Layout{
		{Cores: 0, RAM: 1 << 30, BasePort: 4443, Binary: "/r"},
		{Cores: 1, RAM: 1 << 20, BasePort: 4443, Binary: "/r"},
		{Cores: 2, RAM: 1 << 30, BasePort: 65535, Binary: "/r"},
		{Cores: 1, RAM: 1 << 30, BasePort: 4443, Binary: "relay"},
		{Cores: 1, RAM: 1 << 30, BasePort: 4443, Binary: "/r\nExecStartPre=/bin/sh"},
	} {
		if _, err := Render(l); err == nil {
			t.Errorf("Render(%+v) succeeded", l)
		}
	}
}

func TestOneInstancePerProcess(t *testing.T) {
	files, err := Render(Layout{Cores: 4, RAM: 8 << 30, Processes: 3, BasePort: 5000, Binary: "/r"})
	if err != nil {
		t.Fatal(err)
	}
	target := string(files[len(files)-1].Data)
	for _, want := range []string{"relay@5000.service", "relay@5001.service", "relay@5002.service"} {
		if !strings.Contains(target, want) {
			t.Errorf("target lacks %s:\n%s", want, target)
		}
	}
	if strings.Contains(target, "relay@5003") || len(files) != 5 {
		t.Errorf("%d files, target %s", len(files), target)
	}
}

func TestCPUAffinityFollowsTheBoxCPUs(t *testing.T) {
	// A container whose cpuset is CPUs 2 and 5: CPU 0 is not its to use.
	files, err := Render(Layout{Cores: 2, RAM: 4 << 30, Processes: 3, BasePort: 4443, Binary: "/r", CPUs: []int{2, 5}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files[1:4] {
		got = append(got, strings.TrimSpace(strings.TrimPrefix(string(f.Data), "[Service]\n")))
	}
	if strings.Join(got, ",") != "CPUAffinity=2,CPUAffinity=5,CPUAffinity=2" {
		t.Errorf("affinities = %v", got)
	}
}

func TestUpstreamInExecStart(t *testing.T) {
	l := Layout{Cores: 1, RAM: 1 << 30, BasePort: 4443, Binary: "/opt/relay", Upstream: []string{"http://10.0.0.1:4443/", "http://10.0.0.2:4443/"}}
	files, err := Render(l)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(files[0].Data), "ExecStart=/opt/relay serve --listen [::]:%i --stateless-reset-secret %d/reset-secret --max-sessions-per-address 0 --upstream http://10.0.0.1:4443/,http://10.0.0.2:4443/ --no-auth\n") {
		t.Errorf("template:\n%s", files[0].Data)
	}
	l.Upstream = nil
	files, _ = Render(l)
	if strings.Contains(string(files[0].Data), "--upstream") {
		t.Error("upstream flag without an origin")
	}
	for _, bad := range []string{"http://a b/", "http://a/,http://b/", "http://a/%i", ""} {
		l.Upstream = []string{bad}
		if _, err := Render(l); err == nil || !strings.Contains(err.Error(), "upstream") {
			t.Errorf("upstream %q: err %v", bad, err)
		}
	}
}

// TestAuthGolden: with the fleet's key the template loads it as a
// systemd credential and hands the relay its credentials-directory path,
// with the public listen prefixes; the key file itself is never named on
// the command line.
func TestAuthGolden(t *testing.T) {
	files, err := Render(Layout{Cores: 2, RAM: 4 << 30, BasePort: 4443, Binary: "/opt/relayfleet/current/relay",
		Upstream: []string{"http://10.0.0.1:4443/"}, Auth: true, PublicListen: []string{"live/", "radio/"}})
	if err != nil {
		t.Fatal(err)
	}
	got := files[0].Data
	testutil.Golden(t, filepath.Join("testdata", "auth-template.golden"), got)
}

func TestAuthFlags(t *testing.T) {
	l := Layout{Cores: 1, RAM: 1 << 30, BasePort: 4443, Binary: "/opt/relay", Auth: true}
	files, err := Render(l)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := string(files[0].Data)
	for _, want := range []string{
		"\nLoadCredential=relay-auth:/etc/relayfleet/credentials/relay-auth\n",
		"\nExecStart=/opt/relay serve --listen [::]:%i --stateless-reset-secret %d/reset-secret --max-sessions-per-address 0 --auth-key %d/relay-auth --revocation-file /etc/relayfleet/revoked\n",
		"\nDynamicUser=yes\n",
		// The metadata service hands out the box's user data (its SSH
		// host key): the relay may not reach it.
		"\nIPAddressDeny=169.254.169.254\n",
	} {
		if !strings.Contains(tmpl, want) {
			t.Errorf("template lacks %q:\n%s", strings.TrimSpace(want), tmpl)
		}
	}
	if strings.Contains(tmpl, "--public-listen") {
		t.Error("--public-listen without public prefixes")
	}
	// The fleet file's access.max_sessions_per_address reaches the relay.
	capped := l
	capped.MaxSessionsPerAddress = 64
	if files, err := Render(capped); err != nil || !strings.Contains(string(files[0].Data), " --max-sessions-per-address 64 --auth-key") {
		t.Errorf("a cap of 64 per address: %v\n%s", err, files[0].Data)
	}
	// The fleet's load generators are not counted by it.
	capped.UncappedAddresses = "203.0.113.9/32,10.231.87.0/24"
	if files, err := Render(capped); err != nil || !strings.Contains(string(files[0].Data), " --max-sessions-per-address 64 --uncapped-addresses 203.0.113.9/32,10.231.87.0/24 --auth-key") {
		t.Errorf("uncapped load generators: %v\n%s", err, files[0].Data)
	}
	capped.UncappedAddresses = "203.0.113.9"
	if _, err := Render(capped); err == nil || !strings.Contains(err.Error(), `uncapped address "203.0.113.9"`) {
		t.Errorf("an uncapped address that is not a prefix: %v", err)
	}
	capped.UncappedAddresses = ""
	capped.MaxSessionsPerAddress = -1
	if _, err := Render(capped); err == nil {
		t.Error("a negative cap per address rendered")
	}
	l.Auth = false
	files, _ = Render(l)
	if strings.Contains(string(files[0].Data), "relay-auth") {
		t.Errorf("auth without a key:\n%s", files[0].Data)
	}
	// Without a key, the relay on [::] is told so: relay serve refuses
	// a non-loopback address without --auth-key or --no-auth.
	if !strings.Contains(string(files[0].Data), "--max-sessions-per-address 0 --no-auth\n") {
		t.Errorf("no --no-auth without a key:\n%s", files[0].Data)
	}
	// Public prefixes without the key would open the relay: refused.
	l.PublicListen = []string{"live/"}
	if _, err := Render(l); err == nil || !strings.Contains(err.Error(), "auth key") {
		t.Errorf("public listen without auth: err %v", err)
	}
}

func TestCheckPathPrefix(t *testing.T) {
	for _, good := range []string{"live/", "live", "a/b-c_d.e/", "radio/7"} {
		if err := CheckPathPrefix(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	for bad, want := range map[string]string{
		"":                             "empty",
		"live now/":                    "character ' '",
		"live/,x/":                     "character ','",
		"live/%i":                      "character '%'",
		"/live/":                       "starts with '/'",
		"live/../x":                    `segment ".."`,
		"live//x":                      `segment ""`,
		"./live":                       `segment "."`,
		"..":                           `segment ".."`,
		"live/\"x":                     "character '\"'",
		"live/\nx":                     "character '\\n'",
		"x" + strings.Repeat("y", 128): "128",
	} {
		err := CheckPathPrefix(bad)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want it to say %s", bad, err, want)
		}
	}
	l := Layout{Cores: 1, RAM: 1 << 30, BasePort: 4443, Binary: "/r", Auth: true, PublicListen: []string{"live/ x"}}
	if _, err := Render(l); err == nil || !strings.Contains(err.Error(), "public listen prefix") {
		t.Errorf("bad prefix rendered: %v", err)
	}
}

// TestResetSecretCredential: every relay process gets the box's reset
// secret as a systemd credential, with or without auth, and its command
// line names only its own credentials directory, never the secret's file.
func TestResetSecretCredential(t *testing.T) {
	for _, auth := range []bool{false, true} {
		files, err := Render(Layout{Cores: 1, RAM: 1 << 30, BasePort: 4443, Binary: "/opt/relay", Auth: auth})
		if err != nil {
			t.Fatal(err)
		}
		tmpl := string(files[0].Data)
		if !strings.Contains(tmpl, "\nLoadCredential=reset-secret:/etc/relayfleet/credentials/reset-secret\n") ||
			!strings.Contains(tmpl, " --stateless-reset-secret %d/reset-secret") {
			t.Errorf("auth %v: template does not hand the reset secret over:\n%s", auth, tmpl)
		}
		for line := range strings.SplitSeq(tmpl, "\n") {
			if strings.HasPrefix(line, "ExecStart=") && strings.Contains(line, CredentialDir) {
				t.Errorf("auth %v: ExecStart names the credentials directory: %s", auth, line)
			}
		}
	}
}

// TestTLSKeyCredential: with the fleet's TLS key for the box, every
// process serves self-signed certificates for it (relay serve --tls-key),
// read from its own credentials directory, so the key's SPKI pin in the
// router's relays file holds; without one, nothing names it.
func TestTLSKeyCredential(t *testing.T) {
	l := Layout{Cores: 1, RAM: 1 << 30, BasePort: 4443, Binary: "/opt/relay", Auth: true, TLSKey: true}
	files, err := Render(l)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := string(files[0].Data)
	for _, want := range []string{
		"\nLoadCredential=relay-tls-key:/etc/relayfleet/credentials/relay-tls-key\n",
		" --tls-key %d/relay-tls-key",
	} {
		if !strings.Contains(tmpl, want) {
			t.Errorf("template lacks %q:\n%s", strings.TrimSpace(want), tmpl)
		}
	}
	l.TLSKey = false
	files, _ = Render(l)
	if strings.Contains(string(files[0].Data), "tls-key") {
		t.Errorf("a TLS key without one:\n%s", files[0].Data)
	}
}
