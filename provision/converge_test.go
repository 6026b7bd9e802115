package provision

import (
	"reflect"
	"testing"
)

func TestParseProbeOutput(t *testing.T) {
	h := parseHashes("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  /etc/a b.conf\nnot a hash  /x\n\n")
	if len(h) != 1 || h["/etc/a b.conf"] != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("hashes = %v", h)
	}
	units := parseActiveUnits(`relay@4443.service loaded active running relayfleet relay on port 4443
relay@4444.service loaded activating auto-restart relayfleet relay on port 4444
● relay@4445.service loaded failed failed relayfleet relay on port 4445
relay@4446.service loaded inactive dead relayfleet relay on port 4446
other.service loaded active running x
`)
	if want := []string{"relay@4443.service"}; !reflect.DeepEqual(units, want) {
		t.Errorf("active units = %v, want %v", units, want)
	}
}

func TestParseCPUList(t *testing.T) {
	got, err := parseCPUList("0-2,5,7-8")
	if err != nil || !reflect.DeepEqual(got, []int{0, 1, 2, 5, 7, 8}) {
		t.Errorf("parseCPUList = %v, %v", got, err)
	}
	for _, bad := range []string{"", "a", "3-1", "1-"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q) accepted", bad)
		}
	}
}
