//go:build lab

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/relay/testutil"
)

// TestConvergeStaticHost adopts a lab box as a static server, the way a
// dedicated root server is listed in an inventory: by address, user and
// host key, reached with an SSH key file.
func TestConvergeStaticHost(t *testing.T) {
	images := labImages()
	l, err := lab.New(lab.Config{Dir: filepath.Join(os.TempDir(), "relayfleet-static-test"), ImageDir: images, Bridge: "rfstat0", Subnet: mustPrefix(t, "10.231.83.0/24"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l.Cleanup(ctx)
	box, err := l.Create(ctx, lab.Spec{Name: "root1", Shape: lab.Small})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Delete(context.Background(), box.Name); l.Cleanup(context.Background()) })

	dir := t.TempDir()
	relay := filepath.Join(dir, "relay")
	build := exec.Command("go", "build", "-o", relay, "github.com/relayfleet/relayfleet/cmd/relay")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatal(err)
	}
	inv := filepath.Join(dir, "fleet.yaml")
	testutil.WriteFile(t, inv, fmt.Appendf(nil, `version: 1
name: adopted
steady:
  - name: roots
    provider: static
    shape: hetzner-robot/ax42
    hosts:
      - {address: %q, user: root, host_key: %q}
`, box.Address.String(), strings.TrimSpace(box.HostKey)), 0o644)
	t.Setenv("SSH_AUTH_SOCK", "")
	args := []string{"converge", "--inventory", inv, "--relay-binary", relay, "--ssh-key", l.AdminKeyPath()}

	out, errOut, code := fleet(t, args...)
	if code != 0 || !strings.Contains(out, "changes applied") || !strings.Contains(out, "start relay@4443.service") {
		t.Fatalf("first converge: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = fleet(t, args...)
	if code != 0 || !strings.Contains(out, "converged, nothing to change") {
		t.Errorf("re-run: exit %d\n%s", code, out)
	}
	// A wrong pinned key in the inventory is refused before anything runs.
	other, _ := testKey(t)
	testutil.WriteFile(t, inv, []byte(strings.Replace(string(must(os.ReadFile(inv))), strings.Fields(box.HostKey)[1], strings.Fields(strings.TrimSpace(string(sshPublic(other))))[1], 1)), 0o644)
	_, errOut, code = fleet(t, args...)
	if code != exitHostsFailed || !strings.Contains(errOut, "host key refused") {
		t.Errorf("wrong host key: exit %d, %s", code, errOut)
	}
}
