package units

import (
	"strings"
	"testing"
)

// TestUpstreamPinInExecStart: the origin's key pin travels in the upstream
// URL (#spki=HEX) to relay serve --upstream; a malformed pin is refused
// before any unit is written.
func TestUpstreamPinInExecStart(t *testing.T) {
	pin := strings.Repeat("ab", 32)
	l := Layout{Cores: 1, RAM: 1 << 30, BasePort: 4443, Binary: "/opt/relay",
		Upstream: []string{"http://10.0.0.1:4443/#spki=" + pin, "https://origin.example:4443/"}}
	files, err := Render(l)
	if err != nil {
		t.Fatal(err)
	}
	want := " --upstream http://10.0.0.1:4443/#spki=" + pin + ",https://origin.example:4443/ --no-auth\n"
	if !strings.Contains(string(files[0].Data), want) {
		t.Errorf("template has no %q:\n%s", want, files[0].Data)
	}
	for _, bad := range []string{
		"http://10.0.0.1:4443/#spki=abc",
		"http://10.0.0.1:4443/#" + pin,
		"http://10.0.0.1:4443/#spki=" + strings.Repeat("zz", 32),
		"http://10.0.0.1:4443/#spki=" + pin + "#x",
	} {
		l.Upstream = []string{bad}
		if _, err := Render(l); err == nil || !strings.Contains(err.Error(), "spki=") {
			t.Errorf("upstream %q: err %v, want a pin error", bad, err)
		}
	}
}
