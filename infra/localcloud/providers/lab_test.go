package providers

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/internal/cli"
)

func TestCheckName(t *testing.T) {
	for _, name := range Names() {
		if err := CheckName(name); err != nil {
			t.Errorf("CheckName(%s): %v", name, err)
		}
	}
	var ue *cli.UsageError
	if err := CheckName("aws"); !errors.As(err, &ue) || err.Error() != `unknown provider "aws": want digitalocean or hcloud or digitalocean` {
		t.Errorf("CheckName(aws) = %v", err)
	}
}

func TestServeLabBadInput(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "token")
	if err := os.WriteFile(tf, []byte("abc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	user := lab.Options{Dir: dir, Geteuid: func() int { return 1000 }}
	root := lab.Options{Dir: dir, Geteuid: func() int { return 0 }}
	for _, tc := range []struct {
		name string
		o    LabOptions
		want string
	}{
		{"no listen", LabOptions{Lab: user}, "flag --listen: want HOST:PORT, for example 127.0.0.1:8780"},
		{"port only", LabOptions{Lab: user, Listen: "8780"}, `flag --listen "8780": want HOST:PORT`},
		{"any address", LabOptions{Lab: user, Listen: "0.0.0.0:8780"}, "only loopback or the lab bridge's address (10.231.77.1)"},
		{"not root", LabOptions{Lab: user, Listen: "127.0.0.1:1"}, lab.ErrNotRoot.Error()},
		{"token file mode", LabOptions{Lab: root, Listen: "127.0.0.1:0", TokenFile: tf}, "flag --token-file: token file " + tf + ": mode 0644"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := ServeLab(context.Background(), "hcloud", tc.o, &cli.IOStreams{Out: &out, ErrOut: &out})
			var ue *cli.UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) || out.Len() != 0 {
				t.Errorf("error %v, output %q; want a usage error with %q", err, out.String(), tc.want)
			}
		})
	}
}
