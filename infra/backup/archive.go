package backup

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Format names the file's layout in its manifest.
const Format = "relayfleet-backup/1"

// ManifestName is the manifest's entry, the archive's last.
const ManifestName = "MANIFEST.json"

// paxSHA is the tar header record that carries an entry's SHA-256.
const paxSHA = "RELAYFLEET.sha256"

// Kinds of entry.
const (
	// KindStack is a stack's deployment (pulumi stack export).
	KindStack = "stack"
	// KindObject is an object of the backend's bucket, as it is kept.
	KindObject = "object"
)

// Manifest says what a backup file holds.
type Manifest struct {
	Format string `json:"format"`
	Fleet  string `json:"fleet"`
	// Backend is the backend the fleet was backed up from, without its
	// query (bucketurl.Redact).
	Backend string    `json:"backend"`
	Made    time.Time `json:"made"`
	// Version is relayfleet's; Pulumi the Pulumi CLI's it expects.
	Version string  `json:"version"`
	Pulumi  string  `json:"pulumi"`
	Entries []Entry `json:"entries"`
}

// Entry is one thing a backup file holds.
type Entry struct {
	// Name is its name in the archive: stacks/PROJECT/STACK.json, or
	// objects/KEY.
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Project and Stack name a KindStack entry's stack; Key is a
	// KindObject entry's key in the bucket.
	Project string `json:"project,omitempty"`
	Stack   string `json:"stack,omitempty"`
	Key     string `json:"key,omitempty"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256"`
}

// Stacks counts the manifest's stacks; Objects its objects.
func (m *Manifest) Stacks() (n int) {
	for _, e := range m.Entries {
		if e.Kind == KindStack {
			n++
		}
	}
	return n
}

// Objects counts the manifest's objects.
func (m *Manifest) Objects() int { return len(m.Entries) - m.Stacks() }

func sum(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// writer writes a backup file atomically: a temporary file beside it,
// mode 0600, renamed over it by Commit.
type writer struct {
	path string
	f    *os.File
	gz   *gzip.Writer
	tw   *tar.Writer
	m    *Manifest
	at   time.Time
}

func create(path string, m *Manifest) (*writer, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("backup file %s: %w", path, err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("backup file %s: %w", path, err)
	}
	gz := gzip.NewWriter(f)
	return &writer{path: path, f: f, gz: gz, tw: tar.NewWriter(gz), m: m, at: m.Made}, nil
}

// add writes one entry and lists it in the manifest.
func (w *writer) add(e Entry, data []byte) error {
	e.Size, e.SHA256 = int64(len(data)), sum(data)
	if err := w.write(e.Name, e.SHA256, data); err != nil {
		return err
	}
	w.m.Entries = append(w.m.Entries, e)
	return nil
}

func (w *writer) write(name, sha string, data []byte) error {
	hdr := &tar.Header{Name: name, Mode: 0o600, Size: int64(len(data)), ModTime: w.at, Typeflag: tar.TypeReg,
		Format: tar.FormatPAX, PAXRecords: map[string]string{paxSHA: sha}}
	if err := w.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("backup file %s: entry %s: %w", w.path, name, err)
	}
	if _, err := w.tw.Write(data); err != nil {
		return fmt.Errorf("backup file %s: entry %s: %w", w.path, name, err)
	}
	return nil
}

// commit writes the manifest, then renames the file into place.
func (w *writer) commit() error {
	data, err := json.MarshalIndent(w.m, "", "  ")
	if err != nil {
		return err
	}
	err = w.write(ManifestName, sum(data), data)
	if err == nil {
		err = w.tw.Close()
	}
	if err == nil {
		err = w.gz.Close()
	}
	if err == nil {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(w.f.Name(), w.path)
	}
	if err != nil {
		os.Remove(w.f.Name())
		return fmt.Errorf("backup file %s: %w", w.path, err)
	}
	return nil
}

// abort drops the temporary file.
func (w *writer) abort() {
	w.f.Close()
	os.Remove(w.f.Name())
}

// CorruptError is a backup file that is truncated or does not match its
// checksums: Entry names the entry where it went wrong ("" for the file
// as a whole).
type CorruptError struct {
	File, Entry, Why string
}

func (e *CorruptError) Error() string {
	if e.Entry == "" {
		return fmt.Sprintf("backup file %s: %s; nothing restored", e.File, e.Why)
	}
	return fmt.Sprintf("backup file %s: entry %s: %s; nothing restored", e.File, e.Entry, e.Why)
}

// maxManifest bounds the manifest a reader takes.
const maxManifest = 16 << 20

// walk reads the backup file at path, checks every entry against the
// checksum in its header, and calls each (when not nil) with every
// entry but the manifest, then checks the manifest against what was
// read. Any fault is a *CorruptError naming the file and the entry.
func walk(path string, each func(name string, data []byte) error) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("backup file %w", err)
	}
	defer f.Close()
	bad := func(entry, format string, a ...any) error {
		return &CorruptError{File: path, Entry: entry, Why: fmt.Sprintf(format, a...)}
	}
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, bad("", "not a relayfleet backup (%v)", err)
	}
	tr := tar.NewReader(gz)
	got := map[string]string{}
	var order []string
	var m *Manifest
	last := "(none)"
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, bad("", "truncated or corrupt after entry %s (%v)", last, err)
		}
		if m != nil {
			return nil, bad(hdr.Name, "after the manifest, which must come last")
		}
		want := hdr.PAXRecords[paxSHA]
		if want == "" || hdr.Typeflag != tar.TypeReg {
			return nil, bad(hdr.Name, "not a relayfleet backup entry (no checksum)")
		}
		if hdr.Name == ManifestName && hdr.Size > maxManifest {
			return nil, bad(hdr.Name, "%d bytes: too large", hdr.Size)
		}
		data := make([]byte, 0, min(hdr.Size, 64<<20))
		buf := bytesWriter{&data}
		n, err := io.Copy(buf, tr)
		if err != nil {
			return nil, bad(hdr.Name, "truncated: %d of its %d bytes (%v)", n, hdr.Size, err)
		}
		if s := sum(data); s != want {
			return nil, bad(hdr.Name, "checksum mismatch: its bytes hash to %s, its header says %s", s[:12], want[:min(12, len(want))])
		}
		if hdr.Name == ManifestName {
			m = &Manifest{}
			if err := json.Unmarshal(data, m); err != nil {
				return nil, bad(hdr.Name, "%v", err)
			}
			continue
		}
		if _, dup := got[hdr.Name]; dup {
			return nil, bad(hdr.Name, "twice in the file")
		}
		got[hdr.Name] = want
		order = append(order, hdr.Name)
		last = hdr.Name
		if each != nil {
			if err := each(hdr.Name, data); err != nil {
				return nil, err
			}
		}
	}
	// The gzip trailer's CRC is checked once the stream is read out.
	if _, err := io.Copy(io.Discard, gz); err != nil {
		return nil, bad("", "truncated or corrupt after entry %s (%v)", last, err)
	}
	if m == nil {
		return nil, bad(ManifestName, "missing: the file ends after entry %s (truncated)", last)
	}
	if m.Format != Format {
		return nil, bad(ManifestName, "format %q, want %q", m.Format, Format)
	}
	if m.Fleet == "" {
		return nil, bad(ManifestName, "names no fleet")
	}
	listed := map[string]bool{}
	for _, e := range m.Entries {
		sha, ok := got[e.Name]
		switch {
		case !ok:
			return nil, bad(e.Name, "listed in the manifest, missing from the file")
		case sha != e.SHA256:
			return nil, bad(e.Name, "checksum %s differs from the manifest's %s", sha[:12], e.SHA256[:min(12, len(e.SHA256))])
		case e.Kind == KindStack && (e.Project == "" || e.Stack == ""):
			return nil, bad(e.Name, "a stack entry without its project and stack")
		case e.Kind == KindObject && e.Key == "":
			return nil, bad(e.Name, "an object entry without its key")
		case e.Kind != KindStack && e.Kind != KindObject:
			return nil, bad(e.Name, "unknown kind %q", e.Kind)
		}
		listed[e.Name] = true
	}
	for _, name := range order {
		if !listed[name] {
			return nil, bad(name, "in the file, not in the manifest")
		}
	}
	return m, nil
}

// bytesWriter appends to a byte slice.
type bytesWriter struct{ b *[]byte }

func (w bytesWriter) Write(p []byte) (int, error) {
	*w.b = append(*w.b, p...)
	return len(p), nil
}

// Verify reads the backup file at path whole and checks it: every entry
// against its checksum, the manifest against the entries. It returns the
// manifest, or a *CorruptError naming the file and the entry.
func Verify(path string) (*Manifest, error) { return walk(path, nil) }
