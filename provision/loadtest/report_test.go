package loadtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

func TestDocWriteResult(t *testing.T) {
	d := &Doc{Target: "box1", Files: map[string]string{"json": "out/loadtest.json", "svg": "out/loadtest.svg", "calibration": "out/calibration.yaml"}}
	var b bytes.Buffer
	if err := d.WriteResult(&b, false, errors.New("too few steps")); err != nil {
		t.Fatal(err)
	}
	if want := "wrote out/loadtest.json\nwrote out/loadtest.svg\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
	b.Reset()
	if err := d.WriteResult(&b, true, nil); err != nil {
		t.Fatal(err)
	}
	var back Doc
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Target != "box1" || back.Files["svg"] != "out/loadtest.svg" {
		t.Errorf("--json: %v, %q", err, b.String())
	}
}
