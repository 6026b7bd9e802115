package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/releases"
	"github.com/relayfleet/relayfleet/internal/bucketurl"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

// TestS3BackupRestore: a fleet's state in a file backend (its steady and
// event stacks with their secrets, an event record, the reconciler's
// heartbeat, a release and its build) goes through fleet backup into one
// file (mode 0600, no secret in clear text in it), and fleet restore puts
// it into an empty bucket on a real object store (SeaweedFS): from a
// fresh state dir, fleet hosts, releases and auth show answer there as
// they do against the file backend, and the secrets, records, heartbeat
// and build read back the same. A truncated file is refused in one line
// naming it and the entry, leaving the bucket empty; a second restore is
// refused while the fleet has stacks there, unless --force.
func TestS3BackupRestore(t *testing.T) {
	testutil.Short(t, "make test-s3 (runs the Pulumi CLI and SeaweedFS)")
	if _, err := program.FindPulumi(""); err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(program.BackendEnv, "")
	t.Setenv(program.PassphraseEnv, "")
	t.Setenv(program.PassphraseFileEnv, "")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// Backend X: the state dir's file backend.
	f, inv, stateA := cloudFleetFiles(t)
	hostSigner, _ := testutil.SSHKey(t)
	_, clientPEM := testutil.SSHKey(t)
	keyFile := filepath.Join(t.TempDir(), "id")
	testutil.WriteFile(t, keyFile, clientPEM, 0o600)
	hostKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostSigner.PublicKey())))
	host := func(name, group, backend string) map[string]any {
		return map[string]any{"name": name, "group": group, "backend": backend, "address": "127.0.0.1",
			"sshAddress": "127.0.0.1:1", "hostKey": hostKey, "user": "root", "ports": []int{4443}}
	}
	putStack(t, stateA, f, "cloud", map[string]any{"fleet": "cloud", "hosts": []any{host("cloud-s-fsn-1", "fsn", "hcloud")}})
	putStack(t, stateA, f, "cloud-event-final", map[string]any{"fleet": "cloud", "event": "final", "hosts": []any{host("cloud-e-final-1", "final", "digitalocean")}})
	// Another fleet's stack in the same backend, named like one of ours.
	putStack(t, stateA, f, "cloud-b", map[string]any{"fleet": "cloud-b", "hosts": []any{host("cloud-b-s-fsn-1", "fsn", "hcloud")}})
	const token = "hcloud-token-backup-test-4d9f1c"
	if _, errOut, code := fleetIn(t, strings.NewReader(token+"\n"), "secret", "set", "hcloud-token", "--inventory", inv, "--state-dir", stateA); code != 0 {
		t.Fatalf("fleet secret set: exit %d: %s", code, errOut)
	}
	x := &program.Stack{Fleet: f, StateDir: stateA}
	backendX, _ := x.Backend()
	// An update (as fleet up's) records the stack's configuration in the
	// backend, where a fresh state dir reads it.
	if err := x.RefreshState(ctx); err != nil {
		t.Fatal(err)
	}
	x = &program.Stack{Fleet: f, StateDir: stateA}
	build := []byte("\x7fELF a relay build for the backup test")
	digest := recordRelease(t, ctx, x, build)
	evX := eventStore(t, ctx, x)
	rec := &events.Record{Event: "final", Stack: events.StackName("cloud", "final"), Backend: "digitalocean", Phase: events.Draining}
	if err := evX.Save(ctx, rec); err != nil {
		t.Fatal(err)
	}
	beat := time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)
	if err := evX.Beat(ctx, beat, true); err != nil {
		t.Fatal(err)
	}

	// The team's passphrase is the one the state dir made.
	t.Setenv(program.PassphraseFileEnv, filepath.Join(stateA, "passphrase"))
	file := filepath.Join(t.TempDir(), "cloud.backup")
	out, errOut, code := fleet(t, "backup", "--inventory", inv, "--state-dir", stateA, "--out", file)
	if code != 0 || !strings.Contains(out, "fleet cloud backed up from "+backendX+" to "+file+": 5 stacks") {
		t.Fatalf("fleet backup: exit %d: %s%s", code, out, errOut)
	}
	t.Logf("fleet backup: %s", strings.TrimSpace(out))
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v, mode %v; want 0600", err, fi.Mode())
	}
	raw := gunzip(t, file)
	if bytes.Contains(raw, []byte(token)) {
		t.Fatalf("the backup holds the hcloud token in clear text")
	}
	if !bytes.Contains(raw, build) || !bytes.Contains(raw, []byte("cloud-e-final-1")) {
		t.Fatalf("the backup lacks the relay build or the event stack's host")
	}
	if bytes.Contains(raw, []byte("cloud-b-s-fsn-1")) {
		t.Fatalf("the backup holds fleet cloud-b's stack")
	}

	// Backend Y: an empty bucket prefix on SeaweedFS.
	s3 := testutil.StartSeaweedFS(t)
	s3.MakeBucket(t, "rfbackup")
	s3.SetEnv(t)
	backendY := s3.Backend("rfbackup", "y")
	stateB := filepath.Join(t.TempDir(), "b")
	onY := []string{"--inventory", inv, "--state-dir", stateB, "--backend", backendY}

	// A truncated backup: refused in one line naming the file and entry;
	// the bucket stays empty (not even a lease taken).
	data, _ := os.ReadFile(file)
	cut := filepath.Join(t.TempDir(), "cut.backup")
	testutil.WriteFile(t, cut, data[:len(data)*2/3], 0o600)
	out, errOut, code = fleet(t, append([]string{"restore", "--in", cut}, onY...)...)
	if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "fleet restore: backup file "+cut+": ") || !strings.Contains(errOut, "entry ") {
		t.Fatalf("restore of a truncated file: exit %d, stdout %q, stderr %q: want 1, one line naming the file and entry", code, out, errOut)
	}
	if keys := bucketKeys(t, ctx, backendY); len(keys) != 0 {
		t.Fatalf("the refused restore wrote %v", keys)
	}

	// Another passphrase than the fleet's: refused, naming a stack, before
	// anything is written (pulumi stack import would take the stacks).
	wrong := filepath.Join(t.TempDir(), "wrong")
	testutil.WriteFile(t, wrong, []byte("not the fleet's passphrase\n"), 0o600)
	t.Setenv(program.PassphraseFileEnv, wrong)
	out, errOut, code = fleet(t, append([]string{"restore", "--in", file}, onY...)...)
	if code != 1 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "the passphrase given does not open the stack's secrets") || strings.Contains(errOut, "not the fleet's passphrase") {
		t.Fatalf("restore with another passphrase: exit %d: %s%s", code, out, errOut)
	}
	if keys := bucketKeys(t, ctx, backendY); len(keys) != 0 {
		t.Fatalf("the refused restore wrote %v", keys)
	}
	t.Setenv(program.PassphraseFileEnv, filepath.Join(stateA, "passphrase"))

	out, errOut, code = fleet(t, append([]string{"restore", "--in", file}, onY...)...)
	if code != 0 || !strings.Contains(out, "fleet cloud restored into "+bucketurl.Redact(backendY)) {
		t.Fatalf("fleet restore: exit %d: %s%s", code, out, errOut)
	}
	t.Logf("fleet restore: %s", strings.TrimSpace(out))

	// The same answers from the file backend and, with a fresh state dir,
	// from the bucket.
	for _, args := range [][]string{{"hosts", "--json"}, {"releases", "--ssh-key", keyFile}, {"auth", "show"}} {
		outX, errX, codeX := fleet(t, append(args, "--inventory", inv, "--state-dir", stateA)...)
		stateC := filepath.Join(t.TempDir(), "c")
		outY, errY, codeY := fleet(t, append(args, "--inventory", inv, "--state-dir", stateC, "--backend", backendY)...)
		if codeX != codeY || outX != outY || outX == "" {
			t.Errorf("fleet %s: against X exit %d:\n%s%s\nagainst Y exit %d:\n%s%s", strings.Join(args, " "), codeX, outX, errX, codeY, outY, errY)
		}
	}
	y := &program.Stack{Fleet: f, StateDir: filepath.Join(t.TempDir(), "d"), BackendURL: backendY}
	secretsX, errX := x.ReadSecrets(ctx)
	secrets, err := y.ReadSecrets(ctx)
	if err != nil || errX != nil || secrets[program.HcloudTokenKey] != token || secrets[program.RelayAuthKeysKey] == "" || !reflect.DeepEqual(secrets, secretsX) {
		t.Errorf("secrets read from Y by a fresh state dir: %v, %v (hcloud token right: %v, auth keys the same: %v)", err, errX, secrets[program.HcloudTokenKey] == token, secrets[program.RelayAuthKeysKey] == secretsX[program.RelayAuthKeysKey])
	}
	evY := eventStore(t, ctx, y)
	recsX, errX := evX.Load(ctx)
	recsY, errY := evY.Load(ctx)
	if errX != nil || errY != nil || len(recsY) != 1 || !reflect.DeepEqual(recsX, recsY) {
		t.Errorf("event records: X %+v (%v), Y %+v (%v)", recsX, errX, recsY, errY)
	}
	if b, err := evY.LastBeat(ctx); err != nil || !b.OK.Equal(beat) {
		t.Errorf("heartbeat on Y: %+v, %v; want ok at %s", b, err, beat)
	}
	blobs, err := releases.OpenBlobs(ctx, backendY, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer blobs.Close()
	if got, err := blobs.Bytes(ctx, digest); err != nil || !bytes.Equal(got, build) {
		t.Errorf("the build on Y: %v", err)
	}
	for _, k := range bucketKeys(t, ctx, backendY) {
		if strings.HasPrefix(k, ".relayfleet/leases/cloud/take/") && !strings.HasSuffix(k, "/00000000000000000001") {
			t.Errorf("the lease came with the backup: %s", k)
		}
	}

	// Again: the fleet has stacks in Y now.
	out, errOut, code = fleet(t, append([]string{"restore", "--in", file}, onY...)...)
	if code != 1 || !strings.Contains(errOut, "fleet cloud already has stacks in "+bucketurl.Redact(backendY)) || !strings.Contains(errOut, "relayfleet-infra/cloud") || !strings.Contains(errOut, "--force") {
		t.Errorf("a second restore: exit %d, %s%s: want refused naming the stacks", code, out, errOut)
	}
	if out, errOut, code = fleet(t, append([]string{"restore", "--in", file, "--force"}, onY...)...); code != 0 {
		t.Errorf("restore --force: exit %d: %s%s", code, out, errOut)
	}
}

// TestBackupRestoreRefuse: what fleet backup and restore refuse without
// running Pulumi: a fleet without stacks (no file written), a file that
// is no backup, a missing one; each one line, nothing left behind.
func TestBackupRestoreRefuse(t *testing.T) {
	t.Setenv(program.BackendEnv, "")
	_, inv, state := cloudFleetFiles(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "cloud.backup")
	notBackup := filepath.Join(dir, "notes.txt")
	testutil.WriteFile(t, notBackup, []byte("not a backup\n"), 0o600)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"backup", "--out", out}, 1, "fleet backup: fleet cloud has no stacks in file://" + filepath.Join(state, "backend") + ": nothing to back up"},
		{[]string{"backup", "--out", filepath.Join(dir, "nodir", "b")}, 2, "fleet backup: flag --out: stat " + filepath.Join(dir, "nodir") + ": no such file or directory"},
		{[]string{"restore", "--in", notBackup}, 1, "fleet restore: backup file " + notBackup + ": not a relayfleet backup (gzip: invalid header); nothing restored"},
		{[]string{"restore", "--in", filepath.Join(dir, "missing")}, 1, "fleet restore: backup file open " + filepath.Join(dir, "missing") + ": no such file or directory"},
	} {
		stdout, stderr, code := fleet(t, append(tc.args, "--inventory", inv, "--state-dir", state)...)
		if code != tc.code || stdout != "" || stderr != tc.want+"\n" {
			t.Errorf("fleet %s: exit %d, stdout %q, stderr %q; want %d, %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.want)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("left in the backup's directory: %v", left)
	}
}

// recordRelease keeps build in st's backend as the fleet's release.
func recordRelease(t *testing.T, ctx context.Context, st *program.Stack, build []byte) string {
	t.Helper()
	backend, err := st.Backend()
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := releases.OpenBlobs(ctx, backend, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer blobs.Close()
	digest, err := blobs.Put(ctx, build)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := st.ProjectWorkspace(ctx, releases.Project)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := releases.NewBook(ws, st.Fleet.Name).Record(ctx, releases.Release{Digest: digest, Version: "v0.backup", At: testNow, By: "ops@test", How: releases.HowFirst}); err != nil {
		t.Fatal(err)
	}
	return digest
}

// eventStore is the fleet's event records in st's backend.
func eventStore(t *testing.T, ctx context.Context, st *program.Stack) *events.PulumiStore {
	t.Helper()
	ws, err := st.ProjectWorkspace(ctx, events.StoreProject)
	if err != nil {
		t.Fatal(err)
	}
	return &events.PulumiStore{WS: ws, Fleet: st.Fleet.Name}
}

// gunzip is a backup file's archive, uncompressed.
func gunzip(t *testing.T, path string) []byte {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	zr, err := gzip.NewReader(fh)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// bucketKeys lists every key under an s3:// backend.
func bucketKeys(t *testing.T, ctx context.Context, backend string) []string {
	t.Helper()
	b, err := bucketurl.Open(ctx, backend)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var keys []string
	it := b.List(nil)
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return keys
		}
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, obj.Key)
	}
}
