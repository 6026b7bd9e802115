package events

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/units"
)

// TestInstallTimerSharedBackend: the timer of a fleet whose file names a
// shared backend gets the passphrase and the store's credentials from its
// environment file: install refuses without one, or with one that lacks
// them, naming the flag.
func TestInstallTimerSharedBackend(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"events.yaml", "providers.yaml"} {
		data, err := os.ReadFile(filepath.Join("../../inventories", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fleet, err := os.ReadFile("../../inventories/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fleet = append(fleet, "state:\n  backend: \"s3://team/relayfleet?region=eu-central-1&endpoint=s3.example:443\"\n"...)
	if err := os.WriteFile(filepath.Join(dir, "example.yaml"), fleet, 0o644); err != nil {
		t.Fatal(err)
	}
	unitDir := filepath.Join(dir, "units")
	os.Mkdir(unitDir, 0o755)
	fleetBin := fakeExe(t, dir, "fleet", "exit 0\n")
	state := t.TempDir()
	install := func(env string) error {
		_, err := InstallTimer(context.Background(), TimerOptions{
			Reconciler: units.Reconciler{Events: filepath.Join(dir, "events.yaml"), StateDir: state, Fleet: fleetBin, EnvironmentFile: env},
			UnitDir:    unitDir, Owner: myUID(),
		})
		return err
	}
	envFile := func(body string) string {
		p := filepath.Join(t.TempDir(), "relayfleet.env")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var te *TimerFieldError
	for name, env := range map[string]string{
		"none":           "",
		"no passphrase":  envFile("AWS_ACCESS_KEY_ID=a\nAWS_SECRET_ACCESS_KEY=b\n"),
		"no credentials": envFile(program.PassphraseFileEnv + "=/etc/relayfleet/passphrase\n"),
		"commented out":  envFile("# " + program.PassphraseFileEnv + "=/etc/relayfleet/passphrase\nAWS_SHARED_CREDENTIALS_FILE=/etc/relayfleet/aws\n"),
	} {
		err := install(env)
		if !errors.As(err, &te) || te.Field != "EnvironmentFile" || !strings.Contains(err.Error(), program.PassphraseFileEnv+"=") || strings.Contains(err.Error(), "endpoint=") {
			t.Errorf("%s: %v, want an EnvironmentFile error naming what the timer needs (and not the URL's query)", name, err)
		}
	}
	for name, env := range map[string]string{
		"keys":             envFile(program.PassphraseFileEnv + "=/etc/relayfleet/passphrase\nAWS_ACCESS_KEY_ID=a\nAWS_SECRET_ACCESS_KEY=b\n"),
		"credentials file": envFile(program.PassphraseEnv + "=x\nAWS_SHARED_CREDENTIALS_FILE=/etc/relayfleet/aws\n"),
	} {
		if err := install(env); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got := timerFieldName("EnvironmentFile"); got != "flag --environment-file" {
		t.Errorf("the error names %q", got)
	}
}
