package releases

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// backends
	_ "gocloud.dev/blob/s3blob"   // s3:// backends
	"gocloud.dev/gcerrors"

	"github.com/relayfleet/relayfleet/internal/atomicfile"
	"github.com/relayfleet/relayfleet/internal/bucketurl"
	"github.com/relayfleet/relayfleet/internal/text"
)

// BlobPrefix is where the builds live in the backend's bucket, beside
// Pulumi's own .pulumi/: one object per build, named by its SHA-256.
const BlobPrefix = ".relayfleet/releases/"

var digestRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Digest is a build's name: its SHA-256 in hex.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Blobs keeps relay builds content-addressed in the fleet's Pulumi
// backend, a DIY one (file://, s3://): the same bucket, opened through
// the same library (gocloud.dev/blob) and URL as Pulumi opens it, so the
// credentials that reach the state reach the builds. A build is written
// once under its digest and checked against it on every read; the state
// dir caches what was read (cache/SHA/relay), so a box converged twice
// downloads it once.
//
// The builds are kept in the backend, not only on the boxes (which keep
// their last three too): a box created after a rollout, an events timer
// whose fleet package carries another build, and a teammate's machine
// without the file all need the bytes, and the backend is the one place
// they all reach.
type Blobs struct {
	bucket *blob.Bucket
	cache  string
	where  string
}

// OpenBlobs opens the builds' place in backend (a Pulumi backend URL) and
// the cache directory. A backend that is not a bucket (Pulumi Cloud,
// https://) cannot hold them: the error says so.
func OpenBlobs(ctx context.Context, backend, cache string) (*Blobs, error) {
	u, err := url.Parse(backend)
	if err != nil {
		return nil, fmt.Errorf("release store: backend %q: %v", backend, err)
	}
	switch u.Scheme {
	case "file":
		// fileblob wants the directory to exist.
		dir := u.Path
		if u.Host != "" && u.Host != "localhost" {
			dir = filepath.Join(u.Host, dir)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("release store: %v", err)
		}
		// Blobs are written through a temporary file renamed into place.
		q := u.Query()
		q.Set("no_tmp_dir", "true")
		u.RawQuery = q.Encode()
	case "s3", "gs", "azblob":
	default:
		return nil, fmt.Errorf("release store: backend %s: releases are kept in a bucket backend (file://, s3://, gs://, azblob://), not %s://", bucketurl.Redact(backend), u.Scheme)
	}
	var b *blob.Bucket
	if u.Scheme == "file" {
		b, err = blob.OpenBucket(ctx, u.String())
	} else {
		b, err = bucketurl.Open(ctx, backend) // as the Pulumi CLI opens it
	}
	if err != nil {
		return nil, fmt.Errorf("release store: backend %s: %v", bucketurl.Redact(backend), err)
	}
	return &Blobs{bucket: blob.PrefixedBucket(b, BlobPrefix), cache: cache, where: bucketurl.Redact(backend)}, nil
}

// Close closes the bucket.
func (b *Blobs) Close() error { return b.bucket.Close() }

// Put keeps data under its digest unless the backend has it already, and
// returns the digest.
func (b *Blobs) Put(ctx context.Context, data []byte) (string, error) {
	sha := Digest(data)
	attrs, err := b.bucket.Attributes(ctx, sha)
	if err == nil && attrs.Size == int64(len(data)) {
		return sha, b.cacheWrite(sha, data)
	}
	if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return "", fmt.Errorf("release %s in %s: %v", text.ShortSHA(sha), b.where, err)
	}
	err = b.bucket.WriteAll(ctx, sha, data, &blob.WriterOptions{ContentType: "application/octet-stream", Metadata: map[string]string{"sha256": sha}})
	if err != nil {
		return "", fmt.Errorf("release %s: write to %s: %v", text.ShortSHA(sha), b.where, err)
	}
	return sha, b.cacheWrite(sha, data)
}

// ErrMissing says the backend does not keep a build.
var ErrMissing = errors.New("not kept in the backend")

// Path is the cached file of the build sha, read from the backend (and
// checked against its digest) when the cache lacks it.
func (b *Blobs) Path(ctx context.Context, sha string) (string, error) {
	if !digestRE.MatchString(sha) {
		return "", fmt.Errorf("release %q: not a sha256", sha)
	}
	p := b.cachePath(sha)
	if data, err := os.ReadFile(p); err == nil && Digest(data) == sha {
		return p, nil
	}
	r, err := b.bucket.NewReader(ctx, sha, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return "", fmt.Errorf("release %s: %w (%s)", text.ShortSHA(sha), ErrMissing, b.where)
	}
	if err != nil {
		return "", fmt.Errorf("release %s: read from %s: %v", text.ShortSHA(sha), b.where, err)
	}
	defer r.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, r); err != nil {
		return "", fmt.Errorf("release %s: read from %s: %v", text.ShortSHA(sha), b.where, err)
	}
	if got := Digest(buf.Bytes()); got != sha {
		return "", fmt.Errorf("release %s in %s is corrupt: its bytes hash to %s", text.ShortSHA(sha), b.where, text.ShortSHA(got))
	}
	if err := b.cacheWrite(sha, buf.Bytes()); err != nil {
		return "", err
	}
	return p, nil
}

// Bytes is the build sha (Path, read).
func (b *Blobs) Bytes(ctx context.Context, sha string) ([]byte, error) {
	p, err := b.Path(ctx, sha)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if Digest(data) != sha {
		return nil, fmt.Errorf("release %s: the cached copy %s changed while read", text.ShortSHA(sha), p)
	}
	return data, nil
}

func (b *Blobs) cachePath(sha string) string { return filepath.Join(b.cache, sha, "relay") }

// cacheWrite keeps data as the cached, executable copy of sha.
func (b *Blobs) cacheWrite(sha string, data []byte) error {
	p := b.cachePath(sha)
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("release cache: %v", err)
	}
	if err := atomicfile.Write(p, data, 0o755); err != nil {
		return fmt.Errorf("release cache: %v", err)
	}
	return nil
}
