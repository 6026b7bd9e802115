package testutil

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// SeaweedFSVersion is the SeaweedFS build make seaweedfs puts in the
// cache (tools/seaweedfs/go.mod pins it; a test holds the two equal).
const SeaweedFSVersion = "v0.0.0-20261109003541-7506e5f91cd6"

// WeedEnv names the weed binary to run (make seaweedfs and the make
// targets that need it set it); default the cached build (CachedWeed),
// then weed on $PATH.
const WeedEnv = "RELAYFLEET_WEED"

// CachedWeed is where make seaweedfs puts the weed binary:
// ~/.cache/relayfleet/seaweedfs-VERSION/bin/weed.
func CachedWeed() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "relayfleet", "seaweedfs-"+SeaweedFSVersion, "bin", "weed")
}

// findWeed is $RELAYFLEET_WEED, else the cached build, else weed on
// $PATH; "" when there is none.
func findWeed() string {
	if p := os.Getenv(WeedEnv); p != "" {
		return p
	}
	if p := CachedWeed(); p != "" {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	p, _ := exec.LookPath("weed")
	return p
}

// S3Store is a SeaweedFS server with its S3 API on loopback, for the
// tests that need a real object store (a shared Pulumi backend).
type S3Store struct {
	// Endpoint is the S3 API's HOST:PORT on 127.0.0.1.
	Endpoint string
	// Region is the region the store's clients name (any: SeaweedFS has
	// one).
	Region string
	// AccessKey and SecretKey are the one identity the store admits;
	// Env gives them to a command as AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY. Requests without them are refused.
	AccessKey, SecretKey string
	// Proc is the weed server (Proc.Kill to see a store go away;
	// Restart brings it back).
	Proc *Proc

	weed string   // the binary
	args []string // its arguments: the data dir, the ports, the identity
}

// StartSeaweedFS runs `weed server` with its master, volume, filer and
// S3 API on free ports of 127.0.0.1 until the test ends, its data in a
// t.TempDir(), admitting only the identity it returns. Without the weed
// binary the test is skipped (Skipf: a failure under CI=true), naming
// make seaweedfs.
func StartSeaweedFS(t testing.TB) *S3Store {
	t.Helper()
	weed := findWeed()
	if weed == "" {
		Skipf(t, "needs SeaweedFS's weed binary: make seaweedfs builds it into %s (or set $%s)", CachedWeed(), WeedEnv)
	}
	dir := t.TempDir()
	s := &S3Store{Region: "us-east-1", AccessKey: "relayfleet-test", SecretKey: "relayfleet-test-" + randomHex(t)}
	conf, err := json.Marshal(map[string]any{"identities": []map[string]any{{
		"name":        "relayfleet",
		"credentials": []map[string]string{{"accessKey": s.AccessKey, "secretKey": s.SecretKey}},
		"actions":     []string{"Admin", "Read", "Write", "List", "Tagging"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(dir, "s3.json")
	WriteFile(t, confPath, conf, 0o600)
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	ports := freeTCPPorts(t, 4)
	// The master's gRPC port is its HTTP port + 10000, the volume's and
	// the filer's too: keep every port low enough.
	s.Endpoint = "127.0.0.1:" + ports[3]
	s.weed = weed
	s.args = []string{"server", "-dir", data, "-ip", "127.0.0.1", "-ip.bind", "127.0.0.1",
		"-master.port", ports[0], "-volume.port", ports[1], "-filer", "-filer.port", ports[2],
		"-s3", "-s3.port", ports[3], "-s3.config", confPath,
		// Loopback only: no telemetry to seaweedfs.com, and none of the
		// fixed-port extras (Iceberg, Lance) two tests would share.
		"-master.telemetry=false", "-s3.port.iceberg", "0", "-s3.port.lance", "0",
		"-volume.max", "16", "-master.volumeSizeLimitMB", "64"}
	s.start(t, "weed")
	return s
}

// start runs the weed server under name and waits for its S3 API.
func (s *S3Store) start(t testing.TB, name string) {
	t.Helper()
	// weed stops slowly on SIGTERM: Start's stop waits, then kills.
	s.Proc = Start(t, name, exec.Command(s.weed, s.args...))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, err := s.request(http.MethodGet, "/", "")
		if err == nil && code == http.StatusOK {
			return
		}
		if s.Proc.Exited() {
			t.Fatalf("weed server exited: %s", s.Proc.Tail(20))
		}
		if time.Now().After(deadline) {
			t.Fatalf("SeaweedFS's S3 API on %s did not answer within 2 minutes (last: %d %v): %s", s.Endpoint, code, err, s.Proc.Tail(20))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Restart starts the weed server again on the same data dir, ports and
// identity (after Proc.Kill: a store that crashed and came back), and
// waits until it takes writes again: its S3 API answers and an object
// can be written (the volume server registered with the master again).
// It kills the server first if it still runs.
func (s *S3Store) Restart(t testing.TB) {
	t.Helper()
	s.Proc.Kill()
	s.start(t, "weed-restarted")
	var code int
	var err error
	ok := PollEvery(2*time.Minute, 500*time.Millisecond, func() bool {
		// 409: the bucket is there already (an earlier try, or restart).
		code, err = s.request(http.MethodPut, "/"+restartProbe, "")
		if err == nil && (code == http.StatusOK || code == http.StatusConflict) {
			code, err = s.request(http.MethodPut, "/"+restartProbe+"/probe", "written after a restart")
		}
		return err == nil && code == http.StatusOK
	})
	if !ok {
		t.Fatalf("SeaweedFS on %s took no write within 2 minutes of its restart (last: %d %v): %s", s.Endpoint, code, err, s.Proc.Tail(20))
	}
}

// restartProbe is the bucket Restart writes to, to see the store take
// writes again.
const restartProbe = "testutil-restart-probe"

// MakeBucket creates a bucket (a signed S3 PUT).
func (s *S3Store) MakeBucket(t testing.TB, bucket string) {
	t.Helper()
	var code int
	var err error
	// Right after start the filer may still refuse: try for a while.
	ok := PollEvery(time.Minute, 500*time.Millisecond, func() bool {
		code, err = s.request(http.MethodPut, "/"+bucket, "")
		return err == nil && code == http.StatusOK
	})
	if !ok {
		t.Fatalf("make bucket %s on %s: %d %v", bucket, s.Endpoint, code, err)
	}
}

// Backend is the Pulumi backend URL of prefix in bucket on this store
// (credentials not in it: see Env).
func (s *S3Store) Backend(bucket, prefix string) string {
	u := "s3://" + bucket
	if prefix != "" {
		u += "/" + strings.Trim(prefix, "/")
	}
	return u + "?endpoint=" + s.Endpoint + "&disableSSL=true&s3ForcePathStyle=true&region=" + s.Region
}

// Env is the environment that gives a command the store's identity.
func (s *S3Store) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + s.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s.SecretKey, "AWS_REGION=" + s.Region}
}

// SetEnv sets Env in the test's environment (t.Setenv).
func (s *S3Store) SetEnv(t *testing.T) {
	t.Helper()
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// request sends one request signed with the store's identity and
// returns its status.
func (s *S3Store) request(method, path, body string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+s.Endpoint+path, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	sum := sha256.Sum256([]byte(body))
	hash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", hash)
	creds := aws.Credentials{AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey}
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hash, "s3", s.Region, time.Now()); err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// freeTCPPorts returns n distinct ports free on TCP loopback now, each
// below 55535 (SeaweedFS listens for gRPC on each port + 10000).
func freeTCPPorts(t testing.TB, n int) []string {
	t.Helper()
	var out []string
	var hold []net.Listener
	defer func() {
		for _, l := range hold {
			l.Close()
		}
	}()
	for tries := 0; len(out) < n && tries < 200; tries++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		if p+10000 > 65535 {
			l.Close()
			continue
		}
		if g, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+10000)); err == nil {
			g.Close()
		} else {
			l.Close()
			continue
		}
		hold = append(hold, l)
		out = append(out, fmt.Sprint(p))
	}
	if len(out) < n {
		t.Fatal("no free ports")
	}
	return out
}

func randomHex(t testing.TB) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
