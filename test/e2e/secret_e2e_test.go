//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/inventories"
)

// TestE2ESecretTokenIsEncrypted: fleet secret set keeps a cloud token in
// the fleet's stack through the real Pulumi CLI, never in clear text on
// disk, and reads back for the event stacks.
func TestE2ESecretTokenIsEncrypted(t *testing.T) {
	cli, work, fleetBin, _ := e2eBuildSetup(t)
	state := filepath.Join(work, "state")
	const token = "hc-0123456789abcdefDEADBEEFtoken"
	cmd := exec.Command(fleetBin, "secret", "set", "hcloud-token", "--inventory", "../../inventories/lab.yaml", "--state-dir", state, "--pulumi", cli)
	cmd.Stdin = strings.NewReader(token + "\n")
	cmd.Env = append(os.Environ(), "PULUMI_CONFIG_PASSPHRASE=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("fleet secret set: %v: %s", err, out.String())
	}
	if strings.Contains(out.String(), token) {
		t.Fatalf("the token was printed: %s", out.String())
	}
	filepath.WalkDir(state, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		data, _ := os.ReadFile(p)
		if bytes.Contains(data, []byte(token)) {
			t.Errorf("%s holds the token in clear text", p)
		}
		return nil
	})
	cat, _ := inventories.LoadCatalogue(inventories.Embedded(inventories.ProvidersFile))
	f, err := inventories.LoadFleet("../../inventories/lab.yaml", cat)
	if err != nil {
		t.Fatal(err)
	}
	st := &program.Stack{Fleet: f, Catalogue: cat, StateDir: state, Pulumi: cli}
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "")
	got, err := st.ReadSecrets(context.Background())
	if err != nil || got[program.HcloudTokenKey] != token {
		t.Fatalf("ReadSecrets = %v, %v", got, err)
	}
	other := &program.Stack{Fleet: f, Catalogue: cat, StateDir: state, Pulumi: cli, Name: "no-such-stack"}
	if got, err := other.ReadSecrets(context.Background()); err != nil || len(got) != 0 {
		t.Fatalf("a missing stack: %v, %v", got, err)
	}
}
