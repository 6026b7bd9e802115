package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob" // s3:// backends
	"gocloud.dev/gcerrors"

	"github.com/relayfleet/relayfleet/internal/bucketurl"
)

// objects is the little a lease needs of a bucket: an exclusive create
// (the one atomic step), plain writes, reads, lists and removes.
type objects interface {
	// create writes key only if it does not exist: errExists if it does.
	create(ctx context.Context, key string, data []byte) error
	put(ctx context.Context, key string, data []byte) error
	// get returns fs.ErrNotExist (wrapped) when key does not exist.
	get(ctx context.Context, key string) ([]byte, error)
	// list returns the keys under prefix, at any depth.
	list(ctx context.Context, prefix string) ([]string, error)
	remove(ctx context.Context, key string) error
	close() error
}

var errExists = errors.New("already exists")

// openObjects opens the bucket of a DIY Pulumi backend URL. A file://
// backend is used through the file system directly, because gocloud's
// fileblob checks IfNotExist with a stat then a rename, atomic only
// within one process; os.Link is atomic across processes. Any other
// bucket (s3://) goes through gocloud.dev/blob, whose IfNotExist is a
// conditional write on the store (S3: If-None-Match: *).
func openObjects(ctx context.Context, backend string) (objects, string, error) {
	u, err := url.Parse(backend)
	if err != nil {
		return nil, "", fmt.Errorf("lease: backend %q: %v", bucketurl.Redact(backend), err)
	}
	switch u.Scheme {
	case "file":
		dir := u.Path
		if u.Host != "" && u.Host != "localhost" {
			dir = filepath.Join(u.Host, dir)
		}
		return fileObjects(dir), bucketurl.Redact(backend), nil
	case "s3", "gs", "azblob", "mem":
		b, err := bucketurl.Open(ctx, backend)
		if err != nil {
			return nil, "", fmt.Errorf("lease: backend %s: %v", bucketurl.Redact(backend), err)
		}
		return &blobObjects{b: b}, bucketurl.Redact(backend), nil
	default:
		return nil, "", fmt.Errorf("lease: backend %s: the fleet's lock is kept in a bucket backend (file://, s3://), not %s://", bucketurl.Redact(backend), u.Scheme)
	}
}

// fileObjects is a file:// backend's directory.
type fileObjects string

func (d fileObjects) path(key string) string {
	return filepath.Join(string(d), filepath.FromSlash(key))
}

func (d fileObjects) temp(key string, data []byte) (string, error) {
	p := d.path(key)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

func (d fileObjects) create(_ context.Context, key string, data []byte) error {
	tmp, err := d.temp(key, data)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, d.path(key)); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return errExists
		}
		return err
	}
	return nil
}

func (d fileObjects) put(_ context.Context, key string, data []byte) error {
	tmp, err := d.temp(key, data)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, d.path(key)); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func (d fileObjects) get(_ context.Context, key string) ([]byte, error) {
	return os.ReadFile(d.path(key))
}

func (d fileObjects) list(_ context.Context, prefix string) ([]string, error) {
	var keys []string
	root := d.path(prefix)
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if e.IsDir() || strings.HasPrefix(e.Name(), ".tmp-") {
			return nil
		}
		rel, err := filepath.Rel(string(d), p)
		if err != nil {
			return err
		}
		keys = append(keys, filepath.ToSlash(rel))
		return nil
	})
	return keys, err
}

func (d fileObjects) remove(_ context.Context, key string) error {
	err := os.Remove(d.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func (fileObjects) close() error { return nil }

// blobObjects is any other bucket, through gocloud.dev/blob.
type blobObjects struct{ b *blob.Bucket }

// A store that does not answer fails each of these with the network
// error alone (bucketurl.Unreachable), not the SDK's page around it.

func (o *blobObjects) create(ctx context.Context, key string, data []byte) error {
	err := o.b.WriteAll(ctx, key, data, &blob.WriterOptions{IfNotExist: true, ContentType: "application/json"})
	if gcerrors.Code(err) == gcerrors.FailedPrecondition {
		return errExists
	}
	return bucketurl.Unreachable(err)
}

func (o *blobObjects) put(ctx context.Context, key string, data []byte) error {
	return bucketurl.Unreachable(o.b.WriteAll(ctx, key, data, &blob.WriterOptions{ContentType: "application/json"}))
}

func (o *blobObjects) get(ctx context.Context, key string) ([]byte, error) {
	data, err := o.b.ReadAll(ctx, key)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, fmt.Errorf("%s: %w", key, fs.ErrNotExist)
	}
	return data, bucketurl.Unreachable(err)
}

func (o *blobObjects) list(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	it := o.b.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return keys, nil
			}
			return nil, bucketurl.Unreachable(err)
		}
		if !obj.IsDir {
			keys = append(keys, obj.Key)
		}
	}
}

func (o *blobObjects) remove(ctx context.Context, key string) error {
	err := o.b.Delete(ctx, key)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil
	}
	return bucketurl.Unreachable(err)
}

func (o *blobObjects) close() error { return o.b.Close() }
