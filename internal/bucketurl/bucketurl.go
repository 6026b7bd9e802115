// Package bucketurl opens a Pulumi DIY backend URL (s3://, gs://,
// azblob://, mem://) as a gocloud.dev bucket the way the Pulumi CLI opens
// it (pkg/backend/diy, v3.274.1), so that relayfleet's own objects (relay
// builds, the fleet's lease) sit in the same bucket and under the same
// prefix as the stacks, reached with the same URL and credentials:
//
//   - the URL's path is a prefix inside the bucket (s3://BUCKET/PREFIX);
//   - the AWS SDK v1 parameters Pulumi still accepts are translated for
//     gocloud.dev's v2 driver: disableSSL=true becomes disable_https (or
//     is dropped when the endpoint names its scheme), a scheme-less
//     endpoint gets http:// or https://, and a store named by an endpoint
//     (not AWS itself) is asked for checksums, and its answers checked
//     against them, only when required (many such stores send none,
//     and the SDK would warn on stderr at every read).
//
// Unreachable shortens a store that does not answer to one short error.
package bucketurl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"gocloud.dev/blob"
)

// Open opens backend's bucket, narrowed to the URL's path. file://
// URLs are the callers' (a directory, not a bucket and a prefix).
func Open(ctx context.Context, backend string) (*blob.Bucket, error) {
	u, err := url.Parse(backend)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "file" {
		return nil, fmt.Errorf("bucketurl: %s:// is not a bucket URL", u.Scheme)
	}
	prefix := strings.Trim(u.Path, "/")
	u.Path, u.RawPath = "", ""
	if u.Scheme == "s3" {
		if err := translateS3(u); err != nil {
			return nil, err
		}
	}
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, err
	}
	if prefix != "" {
		b = blob.PrefixedBucket(b, prefix+"/")
	}
	return b, nil
}

// translateS3 rewrites u's v1-era query parameters as Pulumi does.
func translateS3(u *url.URL) error {
	q := u.Query()
	disableSSL := false
	if vs, ok := q["disableSSL"]; ok {
		v, err := strconv.ParseBool(vs[len(vs)-1])
		if err != nil {
			return fmt.Errorf("query parameter disableSSL: %v", err)
		}
		disableSSL = v
		q.Del("disableSSL")
		if !strings.Contains(q.Get("endpoint"), "://") {
			q.Set("disable_https", strconv.FormatBool(disableSSL))
		}
	}
	if ep := q.Get("endpoint"); ep != "" {
		if !strings.Contains(ep, "://") {
			scheme := "https"
			if disableSSL {
				scheme = "http"
			}
			q.Set("endpoint", scheme+"://"+ep)
		}
		if q.Get("request_checksum_calculation") == "" && os.Getenv("AWS_REQUEST_CHECKSUM_CALCULATION") == "" {
			q.Set("request_checksum_calculation", "when_required")
		}
		// Nor is a response's checksum looked for when the store sends
		// none (SeaweedFS, MinIO): the SDK would log a warning on every
		// read, on the command's output.
		if q.Get("response_checksum_validation") == "" && os.Getenv("AWS_RESPONSE_CHECKSUM_VALIDATION") == "" {
			q.Set("response_checksum_validation", "when_required")
		}
	}
	u.RawQuery = q.Encode()
	return nil
}

// CLIEnv is what the Pulumi CLI's environment needs for backend beside
// its URL, unless the environment says otherwise: for an s3:// store
// named by an endpoint (not AWS itself), responses checked for checksums
// only when required, as Open does (the CLI's AWS SDK otherwise logs a
// warning on every read from a store that sends none, such as SeaweedFS
// or MinIO, into the command's output). Nil when nothing is needed.
func CLIEnv(backend string) map[string]string {
	u, err := url.Parse(backend)
	if err != nil || u.Scheme != "s3" || u.Query().Get("endpoint") == "" {
		return nil
	}
	const key = "AWS_RESPONSE_CHECKSUM_VALIDATION"
	if os.Getenv(key) != "" {
		return nil
	}
	return map[string]string{key: "when_required"}
}

// Redact is a backend URL without its query, for messages: an endpoint is
// harmless, but a query is where a careless URL would carry credentials.
func Redact(backend string) string {
	s, _, _ := strings.Cut(backend, "?")
	return s
}

// ErrUnreachable is what an error Unreachable shortened is (errors.Is):
// the store did not answer.
var ErrUnreachable = errors.New("unreachable")

// unreachable is a store that did not answer: the network error alone,
// or the deadline that passed.
type unreachable struct{ err error }

func (e *unreachable) Error() string        { return "unreachable (" + e.err.Error() + ")" }
func (e *unreachable) Is(target error) bool { return target == ErrUnreachable }
func (e *unreachable) Unwrap() error        { return e.err }

// Unreachable returns err as it is, unless a network error (a refused or
// timed-out connection, a name that does not resolve) is behind it: then
// "unreachable (dial tcp HOST:PORT: ...)", without the SDK's layers
// around it (the operation, its retries, the request's URL and query);
// or the caller's deadline passed: "unreachable (no answer before the
// deadline)".
func Unreachable(err error) error {
	var op *net.OpError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &op):
		return &unreachable{err: op}
	case errors.Is(err, context.DeadlineExceeded):
		return &unreachable{err: errNoAnswer}
	}
	return err
}

var errNoAnswer = errors.New("no answer before the deadline")
