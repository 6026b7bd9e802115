package program

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/provision"
)

var (
	cmdNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	// The fleet's keys in the tests: its signing key, its link key and
	// an old signing key kept through a rotation, as the state text.
	signingKey = key(1, false, time.Time{})
	linkKey    = key(2, true, time.Time{})
	oldKey     = key(3, false, time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	stateText  = provision.FormatAuthKeys([]provision.AuthKey{signingKey, linkKey, oldKey})
)

// testEnv is an Env on the mixed fleet whose keys are text, kept in
// memory, at cmdNow; its output goes to out.
func testEnv(t *testing.T, text string, out *strings.Builder) (Env, *memKeys) {
	t.Helper()
	m := &memKeys{secrets: map[string]string{}}
	if text != "" {
		m.secrets[RelayAuthKeysKey] = text
	}
	return Env{
		Settings: Settings{Inventory: "testdata/mixed.yaml"},
		IO:       &cli.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: out},
		Keys:     func(*Stack) KeyStore { return m },
		Clock:    func() time.Time { return cmdNow },
		Release:  flagRelease,
	}, m
}

// flagRelease is an Env.Release for tests without a backend: the fleet's
// release is the --relay-binary build.
func flagRelease(_ context.Context, st *Stack, relayFlag string, _ bool, _ io.Writer) error {
	path, data, err := provision.ReadRelay(relayFlag)
	if err != nil {
		return err
	}
	st.Program.RelayBinary, st.Program.Release = path, provision.Digest(data)
	return nil
}

// TestMintToken: the token is signed with the first key for the one
// prefix asked; a bad request is a usage error naming the flag, and a
// fleet without a key gets none made.
func TestMintToken(t *testing.T) {
	var out strings.Builder
	env, _ := testEnv(t, stateText, &out)
	var signed []any
	sign := func(key []byte, pub, sub string, hasPub, hasSub bool, ttl time.Duration) (string, error) {
		signed = []any{string(key), pub, sub, hasPub, hasSub, ttl}
		return "TOKEN", nil
	}
	o := TokenOptions{Env: env, Publish: "live/", HasPublish: true, TTL: 2 * time.Hour, Sign: sign}
	if err := MintToken(context.Background(), o); err != nil || out.String() != "TOKEN\n" {
		t.Fatalf("MintToken: %v, printed %q", err, out.String())
	}
	if want := []any{string(signingKey.Seed), "live/", "", true, false, 2 * time.Hour}; len(signed) != len(want) || signed[0] != want[0] || signed[1] != want[1] || signed[3] != want[3] || signed[4] != want[4] || signed[5] != want[5] {
		t.Errorf("signed %v, want %v", signed, want)
	}
	for _, tc := range []struct {
		o    TokenOptions
		want string
	}{
		{TokenOptions{}, "give exactly one of --publish PREFIX or --subscribe PREFIX"},
		{TokenOptions{HasPublish: true, HasSubscribe: true}, "give exactly one of"},
		{TokenOptions{Publish: "live now/", HasPublish: true}, "flag --publish: character ' '"},
		{TokenOptions{Subscribe: "../x", HasSubscribe: true}, `flag --subscribe: segment ".."`},
		{TokenOptions{HasPublish: true}, "flag --publish: empty"},
	} {
		tc.o.Env, tc.o.Sign = env, sign
		var usage *cli.UsageError
		if err := MintToken(context.Background(), tc.o); !errors.As(err, &usage) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want a usage error %q", tc.o, err, tc.want)
		}
	}
	none, store := testEnv(t, "", &out)
	if err := MintToken(context.Background(), TokenOptions{Env: none, Publish: "live/", HasPublish: true, Sign: sign}); !errors.Is(err, provision.ErrNoAuthKey) || len(store.secrets) != 0 {
		t.Errorf("no key: %v, stored %v; want ErrNoAuthKey and no key made", err, store.secrets)
	}
}

// TestShowAuthKeys: key ids, never keys.
func TestShowAuthKeys(t *testing.T) {
	var out strings.Builder
	env, _ := testEnv(t, stateText, &out)
	if err := ShowAuthKeys(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	want := "key " + signingKey.ID() + "  signs and verifies, until rotated\n" +
		"key " + linkKey.ID() + "  link key (subscribe only), until rotated\n" +
		"key " + oldKey.ID() + "  verifies, until 2026-12-01T12:00:00Z\n"
	if out.String() != want {
		t.Errorf("ShowAuthKeys:\n%s\nwant\n%s", out.String(), want)
	}
}

// TestExportAuthKeys: the public key file goes to --out, mode 0600, and
// only ids to the output; no private key is exported; --out must be a
// regular file in a directory.
func TestExportAuthKeys(t *testing.T) {
	var out strings.Builder
	env, _ := testEnv(t, stateText, &out)
	path := filepath.Join(t.TempDir(), "origin.keys")
	if err := ExportAuthKeys(context.Background(), env, path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || string(data) != provision.PublicKeyFile([]provision.AuthKey{signingKey, linkKey, oldKey}) || strings.Contains(string(data), "private") {
		t.Errorf("exported %q (%v)", data, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if !strings.HasPrefix(out.String(), "wrote "+path+" (mode 0600): 3 keys, public halves only") || strings.Contains(out.String(), "ERERERER") {
		t.Errorf("output:\n%s", out.String())
	}
	for out, want := range map[string]string{
		"":                             "flag --out: required",
		"/nonexistent/dir/origin.keys": "flag --out: no directory /nonexistent/dir",
		os.DevNull:                     "flag --out: /dev/null is not a regular file",
	} {
		if err := ExportAuthKeys(context.Background(), env, out); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("--out %q: %v, want %q", out, err, want)
		}
	}
}

// TestRotateAuth: the new key signs, the old one verifies for the
// overlap, both are stored, and every steady target is converged onto
// them with the fleet's public prefixes.
func TestRotateAuth(t *testing.T) {
	exe, err := os.Executable() // any ELF file passes as the relay build
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	env, store := testEnv(t, provision.FormatAuthKeys([]provision.AuthKey{signingKey, linkKey}), &out)
	env.NeedsRelay, env.RelayBinary, env.SSHKey, env.LabDir = true, exe, "", "labdir"
	var converged []provision.Target
	closed := false
	o := RotateOptions{Env: env, Overlap: 6 * time.Hour,
		Targets: func(_ context.Context, st *Stack, sshKey, labDir string, _ io.Writer) ([]provision.Target, func(), error) {
			if labDir != "labdir" {
				t.Errorf("targets reached with lab dir %q", labDir)
			}
			return []provision.Target{{}, {}}, func() { closed = true }, nil
		},
		Converge: func(_ context.Context, targets []provision.Target, binary []byte) error {
			converged = targets
			if len(binary) == 0 {
				t.Error("no relay build to converge to")
			}
			return nil
		},
	}
	if err := RotateAuth(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	keys, err := provision.ParseAuthKeys(store.secrets[RelayAuthKeysKey])
	if err != nil || len(keys) != 4 || keys[0].ID() == signingKey.ID() || keys[2].ID() != signingKey.ID() || !keys[2].Until.Equal(cmdNow.Add(6*time.Hour)) {
		t.Fatalf("stored keys %v %v", keys, err)
	}
	if len(converged) != 2 || string(converged[1].AuthKeys) != provision.BoxKeyFile(keys, cmdNow) || !closed {
		t.Errorf("converged %d targets (closed %v): %+v", len(converged), closed, converged)
	}
	for _, want := range []string{"new signing key " + keys[0].ID(), "old keys verify until 2026-11-30T18:00:00Z", "every relay of the fleet verifies with the new keys"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), base64.StdEncoding.EncodeToString(keys[0].Seed)[:16]) || strings.Contains(out.String(), "ERERERER") {
		t.Errorf("a key was printed:\n%s", out.String())
	}
	o.Converge = func(context.Context, []provision.Target, []byte) error { return errors.New("1 of 2 hosts failed") }
	out.Reset()
	if err := RotateAuth(context.Background(), o); err == nil || strings.Contains(out.String(), "every relay") {
		t.Errorf("a failed converge: %v\n%s", err, out.String())
	}
}

// TestSecretArgs: fleet secret set takes one known NAME, and completes
// the names for the first argument only.
func TestSecretArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "want NAME"},
		{[]string{"aws-token"}, `unknown secret "aws-token"`},
		{[]string{"hcloud-token", "x"}, `unexpected argument "x"`},
		{[]string{"digitalocean-token"}, ""},
	} {
		err := CheckSecretArgs(tc.args)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
	if got := SecretCompletions(nil); strings.Join(got, " ") != "hcloud-token digitalocean-token" || SecretCompletions([]string{"x"}) != nil {
		t.Errorf("completions %v", got)
	}
}

// TestSetSecretBadInput: the token is one word on stdin; an empty or a
// spaced one is refused without echoing it.
func TestSetSecretBadInput(t *testing.T) {
	for in, want := range map[string]string{"\n": "stdin: empty hcloud-token", "two words\n": "stdin: the hcloud-token has spaces"} {
		var out strings.Builder
		env, _ := testEnv(t, "", &out)
		env.IO.In = strings.NewReader(in)
		err := SetSecret(context.Background(), env, "hcloud-token")
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "two words") {
			t.Errorf("stdin %q: %v, want %q", in, err, want)
		}
	}
}
