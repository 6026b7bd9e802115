package inventories

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFleetStateBackend: the fleet file's state.backend is read, and a
// URL that is not a backend, or that carries credentials, is refused
// naming the field.
func TestFleetStateBackend(t *testing.T) {
	cat := shippedCatalogue(t)
	load := func(t *testing.T, backend string) (*Fleet, error) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "fleet.yaml")
		data := goodFleet + "state:\n  backend: " + backend + "\n"
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return LoadFleet(path, cat)
	}
	for _, good := range []string{
		`"s3://relayfleet/state?endpoint=127.0.0.1:8333&disableSSL=true&s3ForcePathStyle=true&region=us-east-1"`,
		`"s3://bucket?region=eu-central-1&profile=relayfleet"`,
		`file:///var/lib/relayfleet/state`,
		`gs://bucket/prefix`,
	} {
		f, err := load(t, good)
		if err != nil {
			t.Errorf("%s: %v", good, err)
			continue
		}
		if want := strings.Trim(good, `"`); f.State.Backend != want {
			t.Errorf("state.backend = %q, want %q", f.State.Backend, want)
		}
	}
	for _, tc := range []struct{ backend, msg string }{
		{`"s3://b?region=x&aws_access_key_id=AKIA1&aws_secret_access_key=s3cr3t"`, "carries a credential"},
		{`"s3://b?region=x&secret_key=s3cr3t"`, "carries a credential"},
		{`"s3://AKIA1:s3cr3t@bucket/p"`, "carries a user or password"},
		{`s3:bucket`, "want a URL"},
		{`bucket/prefix`, "want a URL"},
		{`https://api.pulumi.com`, `scheme "https"`},
		{`"file://relative/dir"`, "three slashes"},
		{`"s3:///prefix"`, "want s3://BUCKET"},
	} {
		_, err := load(t, tc.backend)
		var ie *Error
		if !errors.As(err, &ie) {
			t.Errorf("%s: err = %v, want *Error", tc.backend, err)
			continue
		}
		if ie.Field != "state.backend" || !strings.Contains(ie.Msg, tc.msg) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got field=%q msg=%q, want state.backend and %q on one line", tc.backend, ie.Field, ie.Msg, tc.msg)
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: the error repeats the secret: %v", tc.backend, err)
		}
	}
}
