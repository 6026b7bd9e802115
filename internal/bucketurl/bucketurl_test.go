package bucketurl

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	_ "gocloud.dev/blob/s3blob" // s3:// buckets
)

// TestTranslateS3: the URL the README and the Pulumi CLI take
// (disableSSL, a scheme-less endpoint) becomes one gocloud.dev's v2
// driver accepts; a bad disableSSL is refused naming it.
func TestTranslateS3(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"s3://b?endpoint=127.0.0.1:8333&disableSSL=true&s3ForcePathStyle=true&region=us-east-1",
			"disable_https=true&endpoint=http%3A%2F%2F127.0.0.1%3A8333&region=us-east-1&request_checksum_calculation=when_required&response_checksum_validation=when_required&s3ForcePathStyle=true"},
		{"s3://b?endpoint=store.example:443&region=eu", "endpoint=https%3A%2F%2Fstore.example%3A443&region=eu&request_checksum_calculation=when_required&response_checksum_validation=when_required"},
		{"s3://b?endpoint=http://h:1&disableSSL=true", "endpoint=http%3A%2F%2Fh%3A1&request_checksum_calculation=when_required&response_checksum_validation=when_required"},
		{"s3://b?region=us-east-1", "region=us-east-1"},
	} {
		u, _ := url.Parse(tc.in)
		if err := translateS3(u); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if u.RawQuery != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.in, u.RawQuery, tc.want)
		}
	}
	u, _ := url.Parse("s3://b?disableSSL=maybe")
	if err := translateS3(u); err == nil {
		t.Error("disableSSL=maybe accepted")
	}
}

// TestUnreachable: a bucket whose store does not answer fails with the
// network error alone, not the SDK's page around it; other errors pass
// as they are.
func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "the-secret")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := Open(ctx, "s3://b/p?endpoint="+addr+"&disableSSL=true&s3ForcePathStyle=true&region=us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = b.ReadAll(ctx, "k")
	short := Unreachable(err)
	if !errors.Is(short, ErrUnreachable) {
		t.Fatalf("%v: not ErrUnreachable", short)
	}
	want := "unreachable (dial tcp " + addr + ": connect: connection refused)"
	if short.Error() != want {
		t.Errorf("got %q\nwant %q\n(from %q)", short, want, err)
	}
	if strings.Contains(short.Error(), "the-secret") {
		t.Error("the secret is in the error")
	}
	other := errors.New("AccessDenied")
	if Unreachable(other) != other || Unreachable(nil) != nil {
		t.Error("an error with no network failure behind it was changed")
	}
}

// TestCLIEnv: the Pulumi CLI on an s3:// store named by an endpoint checks
// responses for checksums only when required; not on AWS itself, nor
// when the environment says otherwise.
func TestCLIEnv(t *testing.T) {
	t.Setenv("AWS_RESPONSE_CHECKSUM_VALIDATION", "")
	if got := CLIEnv("s3://b/p?endpoint=127.0.0.1:8333&disableSSL=true"); got["AWS_RESPONSE_CHECKSUM_VALIDATION"] != "when_required" {
		t.Errorf("endpoint store: %v", got)
	}
	for _, b := range []string{"s3://b/p?region=eu-central-1", "file:///x", "gs://b"} {
		if got := CLIEnv(b); got != nil {
			t.Errorf("%s: %v, want nothing", b, got)
		}
	}
	t.Setenv("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_supported")
	if got := CLIEnv("s3://b?endpoint=h:1"); got != nil {
		t.Errorf("the operator's setting overridden: %v", got)
	}
}
