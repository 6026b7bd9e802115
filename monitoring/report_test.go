package monitoring

import (
	"bytes"
	"testing"
)

func TestResultWriteSummary(t *testing.T) {
	var b bytes.Buffer
	r := &Result{Dir: "/m", Relays: 3, Routers: 1, Stacks: []string{"a", "b"}}
	if err := r.WriteSummary(&b); err != nil {
		t.Fatal(err)
	}
	want := "monitor: 3 relay targets from stacks a, b, 1 routers, written to /m\n" +
		"  prometheus --config.file=/m/" + ConfigFile + "   (or copy its jobs and rule_files into yours)\n" +
		"  grafana: provisioning in /m/grafana/provisioning\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}

func TestRefreshAndSayWithoutDir(t *testing.T) {
	var b bytes.Buffer
	RefreshAndSay(&b, "", Options{StateDir: t.TempDir()})
	if b.Len() != 0 {
		t.Errorf("no monitor directory: got %q, want nothing", b.String())
	}
}
