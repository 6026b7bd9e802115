package provision

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
)

// localRunner runs commands with bash on this machine, as a box would.
type localRunner struct{}

func (localRunner) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	c := exec.CommandContext(ctx, "bash", "-c", cmd)
	c.Stdin = stdin
	return c.Output()
}

// TestProcessStatusReadsDrops: status reads a relay process's drops from
// its /stats, asked the way it is asked on a box (bash's /dev/tcp on the
// process's port): 0 at first, more once a blaster overran its tiny
// receive buffer.
func TestProcessStatusReadsDrops(t *testing.T) {
	testutil.Require(t, "bash", "bash")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := relay.Start(ctx, relay.Config{Listen: "127.0.0.1:0", UDPBuffer: 4096, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	unit := fmt.Sprintf("relay@%d.service", r.Addr().Port)
	if p := processStatus(ctx, localRunner{}, unit); p.Error != "" || p.Drops != 0 || !p.Admitting {
		t.Fatalf("before the blast: %+v, want /stats read and 0 drops", p)
	}
	c, err := net.DialUDP("udp", nil, r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	junk := make([]byte, 1200)
	deadline := time.Now().Add(30 * time.Second)
	for r.Stats().UDPDrops == 0 && time.Now().Before(deadline) {
		for range 20000 {
			_, _ = c.Write(junk)
		}
	}
	want := r.Stats().UDPDrops
	if p := processStatus(ctx, localRunner{}, unit); p.Error != "" || p.Drops < want || want == 0 {
		t.Fatalf("after the blast: %+v, want drops >= %d (> 0)", p, want)
	}
}
