package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optremove"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// backends
	_ "gocloud.dev/blob/s3blob"   // s3:// backends

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/outputstack"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/releases"
	"github.com/relayfleet/relayfleet/internal/bucketurl"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/internal/version"
)

// Options are fleet backup's and fleet restore's.
type Options struct {
	// Stack is the fleet's stack: its fleet, backend, state dir,
	// passphrase and Pulumi CLI.
	Stack *program.Stack
	// File is the backup file (--out, --in).
	File string
	// Force lets a restore write over stacks the fleet has in the
	// backend (--force).
	Force bool
	// Lock takes the fleet's lease (program.LockFleet); nil takes none.
	Lock func(ctx context.Context, st *program.Stack) (context.Context, func(), error)
	// Out gets what was done, a line or two.
	Out io.Writer
	// Clock stamps the manifest (time.Now).
	Clock func() time.Time
}

func (o *Options) lock(ctx context.Context) (context.Context, func(), error) {
	if o.Lock == nil {
		return ctx, func() {}, nil
	}
	return o.Lock(ctx, o.Stack)
}

// stackRef is one stack in a backend.
type stackRef struct{ Project, Stack string }

func (r stackRef) String() string { return r.Project + "/" + r.Stack }

// IsFleetStack says whether stack of project is fleet's: in the fleet
// program's project its steady stack (named after the fleet) and its
// event stacks (events.StackName); its event records and heartbeat
// stacks; its release history. Another fleet's stacks, FLEET-B's too,
// are not.
func IsFleetStack(project, stack, fleet string) bool {
	switch project {
	case program.Project:
		return stack == fleet || strings.HasPrefix(stack, events.StackName(fleet, ""))
	case events.StoreProject:
		return stack == events.RecordsStack(fleet) || stack == events.HeartbeatStack(fleet)
	case releases.Project:
		return stack == fleet
	}
	return false
}

// openBucket opens a DIY backend's bucket as the Pulumi CLI does.
func openBucket(ctx context.Context, backend string) (*blob.Bucket, error) {
	u, err := url.Parse(backend)
	if err != nil {
		return nil, fmt.Errorf("backend %s: %v", bucketurl.Redact(backend), err)
	}
	var b *blob.Bucket
	switch u.Scheme {
	case "file":
		dir := u.Path
		if u.Host != "" && u.Host != "localhost" {
			dir = filepath.Join(u.Host, dir)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("backend %s: %v", bucketurl.Redact(backend), err)
		}
		b, err = blob.OpenBucket(ctx, (&url.URL{Scheme: "file", Path: dir}).String())
	case "s3", "gs", "azblob":
		b, err = bucketurl.Open(ctx, backend)
	default:
		return nil, fmt.Errorf("backend %s: a fleet is backed up from and restored into a bucket backend (file://, s3://), not %s://", bucketurl.Redact(backend), u.Scheme)
	}
	if err != nil {
		return nil, fmt.Errorf("backend %s: %v", bucketurl.Redact(backend), err)
	}
	return b, nil
}

// list returns the keys under prefix, sorted.
func list(ctx context.Context, b *blob.Bucket, prefix string) ([]string, error) {
	var keys []string
	it := b.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if !obj.IsDir {
			keys = append(keys, obj.Key)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// stackSuffixes end a stack's checkpoint key (.pulumi/stacks/PROJECT/STACK.json).
var stackSuffixes = []string{".json", ".json.gz", ".json.zst"}

// fleetStacks lists fleet's stacks in the bucket.
func fleetStacks(ctx context.Context, b *blob.Bucket, fleet string) ([]stackRef, error) {
	keys, err := list(ctx, b, ".pulumi/stacks/")
	if err != nil {
		return nil, err
	}
	var out []stackRef
	for _, k := range keys {
		rel := strings.TrimPrefix(k, ".pulumi/stacks/")
		project, file := path.Split(rel)
		project = strings.TrimSuffix(project, "/")
		if project == "" || strings.Contains(project, "/") {
			continue
		}
		for _, suf := range stackSuffixes {
			if name, ok := strings.CutSuffix(file, suf); ok && IsFleetStack(project, name, fleet) {
				out = append(out, stackRef{project, name})
				break
			}
		}
	}
	return out, nil
}

// workspaces opens one workspace per project in a directory of its own,
// removed by close.
type workspaces struct {
	st  *program.Stack
	dir string
	ws  map[string]auto.Workspace
}

func newWorkspaces(st *program.Stack) (*workspaces, error) {
	dir, err := os.MkdirTemp(st.StateDir, "backup-work-")
	if err != nil {
		return nil, err
	}
	return &workspaces{st: st, dir: dir, ws: map[string]auto.Workspace{}}, nil
}

func (w *workspaces) get(ctx context.Context, project string) (auto.Workspace, error) {
	if ws, ok := w.ws[project]; ok {
		return ws, nil
	}
	ws, err := w.st.WorkspaceIn(ctx, project, filepath.Join(w.dir, project))
	if err != nil {
		return nil, err
	}
	w.ws[project] = ws
	return ws, nil
}

func (w *workspaces) close() { os.RemoveAll(w.dir) }

// Backup is fleet backup: under the fleet's lease (so no command changes
// the state half-way), it writes every stack of the fleet, each stack's
// latest update record and tags, and the relay builds its release
// history names, with a manifest, to o.File (package comment). The file
// is written atomically, mode 0600; no secret is in it in clear text.
func Backup(ctx context.Context, o Options) (*Manifest, error) {
	st := o.Stack
	backend, err := st.Backend()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Dir(o.File)); err != nil {
		return nil, cli.Usagef("flag --out: %v", err)
	}
	ctx, unlock, err := o.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	b, err := openBucket(ctx, backend)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	fleet := st.Fleet.Name
	where := bucketurl.Redact(backend)
	stacks, err := fleetStacks(ctx, b, fleet)
	if err != nil {
		return nil, fmt.Errorf("backend %s: list stacks: %v", where, err)
	}
	if len(stacks) == 0 {
		return nil, fmt.Errorf("fleet %s has no stacks in %s: nothing to back up", fleet, where)
	}
	now := time.Now
	if o.Clock != nil {
		now = o.Clock
	}
	m := &Manifest{Format: Format, Fleet: fleet, Backend: where, Made: now().UTC().Truncate(time.Second), Version: version.String(), Pulumi: program.PulumiVersion}
	ws, err := newWorkspaces(st)
	if err != nil {
		return nil, err
	}
	defer ws.close()
	w, err := create(o.File, m)
	if err != nil {
		return nil, err
	}
	done := false
	defer func() {
		if !done {
			w.abort()
		}
	}()
	object := func(key string) error {
		data, err := b.ReadAll(ctx, key)
		if err != nil {
			return fmt.Errorf("backend %s: read %s: %v", where, key, err)
		}
		return w.add(Entry{Name: "objects/" + key, Kind: KindObject, Key: key}, data)
	}
	var digests []string
	for _, s := range stacks {
		pws, err := ws.get(ctx, s.Project)
		if err != nil {
			return nil, err
		}
		dep, err := pws.ExportStack(ctx, s.Stack)
		if err != nil {
			return nil, fmt.Errorf("stack %s: export: %s", s, outputstack.LastLines(err.Error()))
		}
		data, err := json.Marshal(dep)
		if err != nil {
			return nil, err
		}
		if err := w.add(Entry{Name: "stacks/" + s.Project + "/" + s.Stack + ".json", Kind: KindStack, Project: s.Project, Stack: s.Stack}, data); err != nil {
			return nil, err
		}
		if s.Project == releases.Project && s.Stack == fleet {
			digests = releaseDigests(dep)
		}
		// The latest update record: its configuration is the stack's (a
		// fresh machine's pulumi config refresh reads it).
		hist, err := list(ctx, b, ".pulumi/history/"+s.Project+"/"+s.Stack+"/")
		if err != nil {
			return nil, fmt.Errorf("backend %s: list %s's history: %v", where, s, err)
		}
		var latest string
		for _, k := range hist {
			base := path.Base(k)
			if strings.HasPrefix(base, s.Stack+"-") && (strings.HasSuffix(base, ".history.json") || strings.HasSuffix(base, ".history.json.gz") || strings.HasSuffix(base, ".history.json.zst")) {
				latest = k
			}
		}
		if latest != "" {
			if err := object(latest); err != nil {
				return nil, err
			}
		}
		tags := ".pulumi/stacks/" + s.Project + "/" + s.Stack + ".pulumi-tags"
		if ok, err := b.Exists(ctx, tags); err != nil {
			return nil, fmt.Errorf("backend %s: %s: %v", where, tags, err)
		} else if ok {
			if err := object(tags); err != nil {
				return nil, err
			}
		}
	}
	for _, d := range digests {
		key := releases.BlobPrefix + d
		ok, err := b.Exists(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("backend %s: %s: %v", where, key, err)
		}
		if ok {
			if err := object(key); err != nil {
				return nil, err
			}
		}
	}
	if err := w.commit(); err != nil {
		return nil, err
	}
	done = true
	if o.Out != nil {
		fmt.Fprintf(o.Out, "fleet %s backed up from %s to %s: %s, %s (the stacks' secrets stay encrypted under the fleet's passphrase; restoring needs it)\n",
			fleet, where, o.File, text.Plural(m.Stacks(), "stack", "stacks"), text.Plural(m.Objects(), "object", "objects"))
	}
	return m, nil
}

// releaseDigests are the builds a release history deployment names.
func releaseDigests(dep apitype.UntypedDeployment) []string {
	_, outputs, err := outputstack.SplitDeployment(dep)
	if err != nil {
		return nil
	}
	var h releases.History
	if raw, ok := outputs["history"]; !ok || json.Unmarshal(raw, &h) != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	add := func(d string) {
		if d != "" && !seen[d] && !strings.ContainsAny(d, "/.") {
			seen[d] = true
			out = append(out, d)
		}
	}
	for _, r := range h.Releases {
		add(r.Digest)
	}
	for _, a := range h.Failed {
		add(a.Digest)
	}
	return out
}

// ExistsError is a restore refused because the fleet has stacks in the
// backend already.
type ExistsError struct {
	Fleet, Backend string
	Stacks         []string
}

func (e *ExistsError) Error() string {
	return fmt.Sprintf("fleet %s already has stacks in %s (%s): not restored; --force writes the backup over them", e.Fleet, e.Backend, strings.Join(e.Stacks, ", "))
}

// Restore is fleet restore: it checks the backup file o.File whole
// (Verify: a truncated or corrupt file is refused before the backend is
// touched), then, under the fleet's lease, imports its stacks (pulumi
// stack import) and writes its objects into the stack's backend. A
// backend where the fleet has stacks already is refused (*ExistsError)
// unless o.Force. Should a step fail, what this restore wrote is removed
// again (without Force, the backend held none of the fleet's stacks).
func Restore(ctx context.Context, o Options) (*Manifest, error) {
	st := o.Stack
	deployments := map[string][]byte{}
	m, err := walk(o.File, func(name string, data []byte) error {
		if strings.HasPrefix(name, "stacks/") {
			deployments[name] = data
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if m.Fleet != st.Fleet.Name {
		return nil, cli.Usagef("flag --in: %s holds fleet %s's state, not fleet %s's (the fleet file's name)", o.File, m.Fleet, st.Fleet.Name)
	}
	// Every stack's secrets must open with the passphrase given, before
	// anything is written: pulumi stack import takes a deployment
	// whatever the passphrase, and the stacks would then be unreadable.
	for _, e := range m.Entries {
		if e.Kind != KindStack {
			continue
		}
		var dep apitype.UntypedDeployment
		if err := json.Unmarshal(deployments[e.Name], &dep); err != nil {
			return nil, &CorruptError{File: o.File, Entry: e.Name, Why: err.Error()}
		}
		if err := st.OpensSecrets(ctx, dep.Deployment); err != nil {
			if errors.Is(err, program.ErrWrongPassphrase) {
				return nil, fmt.Errorf("backup file %s: stack %s/%s: %w: give the fleet's passphrase, the one its stacks were made with ($%s or $%s); nothing restored",
					o.File, e.Project, e.Stack, err, program.PassphraseFileEnv, program.PassphraseEnv)
			}
			return nil, fmt.Errorf("backup file %s: entry %s: %w; nothing restored", o.File, e.Name, err)
		}
	}
	byName := map[string]Entry{}
	for _, e := range m.Entries {
		if e.Kind == KindStack && (program.CheckStackName(e.Project) != nil || program.CheckStackName(e.Stack) != nil) {
			return nil, &CorruptError{File: o.File, Entry: e.Name, Why: fmt.Sprintf("stack %q of project %q: not a stack name", e.Stack, e.Project)}
		}
		if e.Kind == KindStack && !IsFleetStack(e.Project, e.Stack, m.Fleet) {
			return nil, &CorruptError{File: o.File, Entry: e.Name, Why: fmt.Sprintf("stack %s/%s is not fleet %s's", e.Project, e.Stack, m.Fleet)}
		}
		if e.Kind == KindObject && !restorable(e.Key, m.Fleet) {
			return nil, &CorruptError{File: o.File, Entry: e.Name, Why: fmt.Sprintf("key %s is not one a backup writes", e.Key)}
		}
		byName[e.Name] = e
	}
	backend, err := st.Backend()
	if err != nil {
		return nil, err
	}
	where := bucketurl.Redact(backend)
	ctx, unlock, err := o.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	b, err := openBucket(ctx, backend)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	existing, err := fleetStacks(ctx, b, m.Fleet)
	if err != nil {
		return nil, fmt.Errorf("backend %s: list stacks: %v", where, err)
	}
	if len(existing) > 0 && !o.Force {
		names := make([]string, len(existing))
		for i, s := range existing {
			names[i] = s.String()
		}
		return nil, &ExistsError{Fleet: m.Fleet, Backend: where, Stacks: names}
	}
	had := map[stackRef]bool{}
	for _, s := range existing {
		had[s] = true
	}
	ws, err := newWorkspaces(st)
	if err != nil {
		return nil, err
	}
	defer ws.close()
	var created []stackRef
	var written []string
	undo := func() {
		if o.Force {
			return
		}
		uctx := context.WithoutCancel(ctx)
		for _, k := range written {
			b.Delete(uctx, k)
		}
		for _, s := range created {
			if pws, err := ws.get(uctx, s.Project); err == nil {
				pws.RemoveStack(uctx, s.Stack, optremove.Force())
			}
		}
	}
	_, err = walk(o.File, func(name string, data []byte) error {
		e, ok := byName[name]
		if !ok {
			return &CorruptError{File: o.File, Entry: name, Why: "changed since it was checked"}
		}
		if sum(data) != e.SHA256 {
			return &CorruptError{File: o.File, Entry: name, Why: "changed since it was checked"}
		}
		if err := fence(ctx, st); err != nil {
			return err
		}
		switch e.Kind {
		case KindStack:
			s := stackRef{e.Project, e.Stack}
			var dep apitype.UntypedDeployment
			if err := json.Unmarshal(data, &dep); err != nil {
				return &CorruptError{File: o.File, Entry: name, Why: err.Error()}
			}
			pws, err := ws.get(ctx, e.Project)
			if err != nil {
				return err
			}
			if !had[s] {
				if err := pws.CreateStack(ctx, e.Stack); err != nil {
					return fmt.Errorf("stack %s: create in %s: %s", s, where, outputstack.LastLines(err.Error()))
				}
				created = append(created, s)
			}
			if err := pws.ImportStack(ctx, e.Stack, dep); err != nil {
				return fmt.Errorf("stack %s: import into %s: %s", s, where, outputstack.LastLines(err.Error()))
			}
			// A state dir's stack configuration, made before, would
			// shadow the restored one: the next command reads it from
			// the backend.
			work := filepath.Join(st.StateDir, "work-"+e.Project)
			if e.Project == program.Project {
				work = filepath.Join(st.StateDir, "work")
			}
			os.Remove(filepath.Join(work, "Pulumi."+e.Stack+".yaml"))
		case KindObject:
			if err := b.WriteAll(ctx, e.Key, data, nil); err != nil {
				return fmt.Errorf("backend %s: write %s: %v", where, e.Key, err)
			}
			written = append(written, e.Key)
		}
		return nil
	})
	if err != nil {
		undo()
		return nil, err
	}
	if o.Out != nil {
		fmt.Fprintf(o.Out, "fleet %s restored into %s from %s (made %s from %s): %s, %s\n", m.Fleet, where, o.File,
			m.Made.UTC().Format(time.RFC3339), m.Backend, text.Plural(m.Stacks(), "stack", "stacks"), text.Plural(m.Objects(), "object", "objects"))
	}
	return m, nil
}

// restorable says whether key is one a backup of fleet writes: one of
// its stacks' update records or tags, or a relay build; never the lease,
// nor another fleet's state.
func restorable(key, fleet string) bool {
	if strings.Contains(key, "..") || strings.HasPrefix(key, "/") {
		return false
	}
	parts := strings.Split(key, "/")
	switch {
	case strings.HasPrefix(key, ".pulumi/history/"):
		return len(parts) == 5 && IsFleetStack(parts[2], parts[3], fleet)
	case strings.HasPrefix(key, ".pulumi/stacks/") && strings.HasSuffix(key, ".pulumi-tags"):
		return len(parts) == 4 && IsFleetStack(parts[2], strings.TrimSuffix(parts[3], ".pulumi-tags"), fleet)
	case strings.HasPrefix(key, releases.BlobPrefix):
		return !strings.Contains(strings.TrimPrefix(key, releases.BlobPrefix), "/")
	}
	return false
}

// fence checks the fleet's lease before a write, when the stack has one.
func fence(ctx context.Context, st *program.Stack) error {
	if st.Fence == nil {
		return nil
	}
	if err := st.Fence(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("restore: not written: %w", err)
	}
	return nil
}
