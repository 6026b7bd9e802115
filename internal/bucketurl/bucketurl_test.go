package bucketurl

import (
	"net/url"
	"testing"
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
