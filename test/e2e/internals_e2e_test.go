//go:build e2e

package e2e

import (
	"io"
	"net/http"
	"os"

	"github.com/relayfleet/relayfleet/infra/fleethosts"
	"github.com/relayfleet/relayfleet/infra/localcloud"
	lcdigitalocean "github.com/relayfleet/relayfleet/infra/localcloud/digitalocean"
	lchcloud "github.com/relayfleet/relayfleet/infra/localcloud/hcloud"
	"github.com/relayfleet/relayfleet/provision"
)

// labImages is the lab image cache the tests share: $RELAYFLEET_LAB_IMAGES,
// else the default lab's (as cmd/fleet's lab tests find it).
func labImages() string {
	if d := os.Getenv("RELAYFLEET_LAB_IMAGES"); d != "" {
		return d
	}
	return "/var/lib/relayfleet/lab/images"
}

// boxJSON is one box of fleet status --json, as the binary writes it.
type boxJSON struct {
	Host  string `json:"host"`
	Error string `json:"error,omitempty"`
	provision.BoxStatus
}

// hostJSONEntry is one host of fleet hosts --json, as the binary writes
// it.
type hostJSONEntry struct {
	fleethosts.Host
	Release string `json:"release,omitempty"`
	Error   string `json:"error,omitempty"`
}

// localCloudAPI is one provider API the local cloud test serves in
// process, as `fleet lab cloud` serves it: the handler of its
// infra/localcloud package under its base path.
type localCloudAPI struct {
	mount string // the API's base path
	new   func(localcloud.Machines, localcloud.Config) (http.Handler, io.Closer, error)
}

// localCloudAPIs are the APIs `fleet lab cloud` serves.
var localCloudAPIs = map[string]localCloudAPI{
	"hcloud": {"/v1", func(m localcloud.Machines, c localcloud.Config) (http.Handler, io.Closer, error) {
		s, err := lchcloud.New(m, c)
		if err != nil {
			return nil, nil, err
		}
		return s, s, nil
	}},
	"digitalocean": {"/v2", func(m localcloud.Machines, c localcloud.Config) (http.Handler, io.Closer, error) {
		s, err := lcdigitalocean.New(m, c)
		if err != nil {
			return nil, nil, err
		}
		return s, s, nil
	}},
}
