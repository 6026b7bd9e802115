package provider

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi/sdk/v3/go/property"
	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/backend"
)

// fakeCloud is a cloud that keeps its servers in a map.
type fakeCloud struct {
	mu      sync.Mutex
	servers map[string]backend.Spec
	next    int
	created []backend.Spec
	deleted []string
	labeled []string // "ID k=v,k2=v2" of every SetLabels
	lookups int      // Named calls
}

func (f *fakeCloud) Create(_ context.Context, s backend.Spec) (backend.Box, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.servers == nil {
		f.servers = map[string]backend.Spec{}
	}
	f.next++
	id := "srv" + string(rune('0'+f.next))
	f.servers[id] = s
	f.created = append(f.created, s)
	return backend.Box{ID: id, Name: s.Name, IPv4: netip.MustParseAddr("127.0.0.1"), Labels: s.Labels, Status: backend.StatusRunning}, nil
}

func (f *fakeCloud) Get(_ context.Context, id string) (backend.Box, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.servers[id]
	if !ok {
		return backend.Box{}, backend.ErrNotFound
	}
	return backend.Box{ID: id, Name: s.Name, IPv4: netip.MustParseAddr("192.0.2.7"), Labels: s.Labels}, nil
}

func (f *fakeCloud) List(_ context.Context, labels map[string]string) ([]backend.Box, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var boxes []backend.Box
	for id, s := range f.servers {
		if backend.MatchLabels(s.Labels, labels) {
			boxes = append(boxes, backend.Box{ID: id, Name: s.Name, Labels: s.Labels})
		}
	}
	return boxes, nil
}

func (f *fakeCloud) Named(_ context.Context, name, fleet string) (backend.Box, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	for id, s := range f.servers {
		if s.Name == name && s.Labels[backend.LabelFleet] == fleet {
			return backend.Box{ID: id, Name: s.Name, Labels: s.Labels}, true, nil
		}
	}
	return backend.Box{}, false, nil
}

func (f *fakeCloud) Delete(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, id)
	if _, ok := f.servers[id]; !ok {
		return backend.ErrNotFound
	}
	delete(f.servers, id)
	return nil
}

func (f *fakeCloud) SetLabels(_ context.Context, id string, labels map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.servers[id]
	if !ok {
		return backend.ErrNotFound
	}
	s.Labels = labels
	f.servers[id] = s
	f.labeled = append(f.labeled, id+" "+backend.Selector(labels))
	return nil
}

func (f *fakeCloud) EnsureFirewall(context.Context, string, map[string]string, [2]uint16, []netip.Prefix) (string, error) {
	return "fw1", nil
}

func (f *fakeCloud) DeleteFirewall(context.Context, string) error { return nil }

func TestCloudCreateHandsOverKeysAndLabelsAndCleansUp(t *testing.T) {
	t.Setenv("SSH_AUTH_SOCK", "")
	old := cloudBootTimeout
	cloudBootTimeout = time.Second
	t.Cleanup(func() { cloudBootTimeout = old })
	fc := &fakeCloud{}
	c := cloudBackend{api: fc}
	a := BoxArgs{Backend: BackendHcloud, Name: "f-burst-1", Fleet: "f", Tier: TierBurst, Event: "final", Shape: "cpx22",
		AuthorizedKeys: []string{testKey + " admin"}}
	_, createErr := c.create(t.Context(), a)
	if createErr == nil {
		t.Fatal("create succeeded without any way to log in")
	}
	if len(fc.created) != 1 {
		t.Fatalf("%d servers created", len(fc.created))
	}
	spec := fc.created[0]
	for k, want := range map[string]string{"fleet": "f", "tier": "burst", "event": "final"} {
		if spec.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, spec.Labels[k], want)
		}
	}
	if len(spec.AuthorizedKeys) != 1 || spec.AuthorizedKeys[0] != testKey+" admin" {
		t.Errorf("authorized keys %v", spec.AuthorizedKeys)
	}
	raw, err := ssh.ParseRawPrivateKey(spec.HostKey)
	if err != nil {
		t.Fatalf("host key handed to cloud-init: %v", err)
	}
	if _, ok := raw.(*ed25519.PrivateKey); !ok {
		t.Fatalf("host key is %T, want ed25519", raw)
	}
	if len(fc.deleted) != 1 || len(fc.servers) != 0 {
		t.Fatalf("a box that never answered was not deleted: deleted %v, left %v", fc.deleted, fc.servers)
	}
	// The failure must not carry the private key.
	if strings.Contains(createErr.Error(), "PRIVATE KEY") {
		t.Fatal("error carries the private key")
	}
}

func TestCloudCreateNeedsAdminKeys(t *testing.T) {
	fc := &fakeCloud{}
	_, err := cloudBackend{api: fc}.create(t.Context(), BoxArgs{Backend: BackendHcloud, Name: "x", Fleet: "f", Tier: TierSteady})
	if err == nil || !strings.Contains(err.Error(), "admin.ssh_keys") || len(fc.created) != 0 {
		t.Fatalf("err %v, created %d; want a refusal before any server is made", err, len(fc.created))
	}
}

func TestCloudGetAndDeleteAreIdempotent(t *testing.T) {
	fc := &fakeCloud{}
	c := cloudBackend{api: fc}
	b, _ := fc.Create(t.Context(), backend.Spec{Name: "x"})
	m, err := c.get(t.Context(), BoxArgs{}, b.ID)
	if err != nil || m.SSHAddress != "192.0.2.7:22" {
		t.Fatalf("get: %+v %v", m, err)
	}
	if err := c.delete(t.Context(), BoxArgs{}, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.delete(t.Context(), BoxArgs{}, b.ID); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := c.get(t.Context(), BoxArgs{}, b.ID); !errors.Is(err, errGone) {
		t.Fatalf("get of a deleted box: %v, want errGone", err)
	}
}

func TestFirewallParams(t *testing.T) {
	rules := []FirewallRule{
		{Protocol: "udp", Ports: "4443-4450", Sources: []string{"0.0.0.0/0", "::/0"}},
		{Protocol: "tcp", Ports: "4443-4450", Sources: []string{"0.0.0.0/0", "::/0"}},
		{Protocol: "tcp", Ports: "22", Sources: []string{"198.51.100.0/24"}},
	}
	ports, admin, err := firewallParams(rules)
	if err != nil || ports != [2]uint16{4443, 4450} || len(admin) != 1 || admin[0].String() != "198.51.100.0/24" {
		t.Fatalf("ports %v admin %v err %v", ports, admin, err)
	}
	open := append(rules[:2:2], FirewallRule{Protocol: "tcp", Ports: "22", Sources: []string{"0.0.0.0/0"}})
	if _, _, err := firewallParams(open); err == nil {
		t.Fatal("ssh from 0.0.0.0/0 accepted")
	}
	if (FirewallArgs{Backend: BackendHcloud, Rules: open}).validate() == nil {
		t.Fatal("check accepted ssh from 0.0.0.0/0")
	}
}

// useCloud makes fc the cloud of every backend until the test ends.
func useCloud(t *testing.T, fc *fakeCloud) {
	t.Helper()
	old := newCloud
	newCloud = func(string, Config) (cloudAPI, error) { return fc, nil }
	t.Cleanup(func() { newCloud = old })
}

// useCloudFacts has every cloud box read as cores and ram bytes, without
// SSH, until the test ends.
func useCloudFacts(t *testing.T, cores int, ram int64) {
	t.Helper()
	old := readCloudFacts
	readCloudFacts = func(_ context.Context, _ cloudBackend, _ BoxArgs, m *machine, _ time.Duration) error {
		m.Cores, m.RAM = cores, ram
		return nil
	}
	t.Cleanup(func() { readCloudFacts = old })
	useCloudRotation(t)
}

// cloudBoxReader is a cloud holding hcloud box f-fsn-1 of fleet f, the
// box's ID, and read, which reads the box as a refresh does, from a state
// of its name, ID and host public key and the properties in more.
func cloudBoxReader(t *testing.T, more map[string]property.Value) (fc *fakeCloud, id string, read func() (p.ReadResponse, error)) {
	t.Helper()
	fc = &fakeCloud{}
	b, _ := fc.Create(t.Context(), backend.Spec{Name: "f-fsn-1"})
	useCloud(t, fc)
	s := newServer(t)
	state := property.NewMap(map[string]property.Value{
		"backend": property.New(BackendHcloud), "name": property.New("f-fsn-1"), "fleet": property.New("f"), "tier": property.New(TierSteady),
		"backendId": property.New(b.ID), "hostPublicKey": property.New(testKey),
	})
	for k, v := range more {
		state = state.Set(k, v)
	}
	return fc, b.ID, func() (p.ReadResponse, error) {
		return s.Read(p.ReadRequest{ID: "hcloud/" + b.ID, Urn: urn(BoxType, "f-fsn-1"), Properties: state})
	}
}

func TestCloudReadKeepsThePrivateKeySecret(t *testing.T) {
	// The engine hands the state back with the key as the secret Create made it.
	fc, id, read := cloudBoxReader(t, map[string]property.Value{
		"hostPrivateKey": property.New("-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----\n").WithSecret(true),
	})
	resp, err := read()
	if err != nil {
		t.Fatal(err)
	}
	if resp.ID == "" {
		t.Fatal("read lost the box")
	}
	v, ok := resp.Properties.GetOk("hostPrivateKey")
	if !ok || !v.Secret() {
		t.Fatalf("hostPrivateKey %v, want it secret in the state", v)
	}
	if got := resp.Properties.Get("sshAddress").AsString(); got != "192.0.2.7:22" {
		t.Errorf("sshAddress %q", got)
	}

	// A box the cloud no longer has reads as gone.
	fc.Delete(t.Context(), id)
	resp, err = read()
	if err != nil || resp.ID != "" {
		t.Fatalf("read of a deleted server: id %q %v, want gone", resp.ID, err)
	}
}

// TestCloudCreateRotatesTheHostKey: the host key cloud-init installed
// (which the cloud's metadata service serves for the box's life) is
// rotated over a session pinned to it: the box's state records the key
// made on the box, and no private key at all.
func TestCloudCreateRotatesTheHostKey(t *testing.T) {
	fc := &fakeCloud{}
	useCloud(t, fc)
	useCloudFacts(t, 4, 8<<30)
	rotated := useCloudRotation(t)
	s := newServer(t)
	in := boxInputs(map[string]string{"backend": "hcloud", "name": "f-fsn-1", "fleet": "f", "tier": "steady", "shape": "cpx32", "location": "fsn1"})
	in = in.Set("authorizedKeys", property.New(property.NewArray([]property.Value{property.New(testKey + " admin")})))
	resp, err := s.Create(p.CreateRequest{Urn: urn(BoxType, "f-fsn-1"), Properties: in})
	if err != nil {
		t.Fatal(err)
	}
	if len(*rotated) != 1 {
		t.Fatalf("rotated %d times, want once", len(*rotated))
	}
	first, err := ssh.ParseRawPrivateKey(fc.created[0].HostKey)
	if err != nil {
		t.Fatal(err)
	}
	firstPub, _ := ssh.NewPublicKey(first.(*ed25519.PrivateKey).Public())
	if want := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(firstPub))); !strings.HasPrefix((*rotated)[0].pinned, want) {
		t.Errorf("rotated over a session pinned to %q, want the user data's key %q", (*rotated)[0].pinned, want)
	}
	if v, ok := resp.Properties.GetOk("hostPrivateKey"); ok && v.IsString() && v.AsString() != "" {
		t.Errorf("hostPrivateKey %v in the state, want none: the box's key never left it", v)
	}
	pub := resp.Properties.Get("hostPublicKey")
	if pub.Secret() || pub.AsString() != (*rotated)[0].made {
		t.Fatalf("hostPublicKey %v, want the rotated key %q", pub, (*rotated)[0].made)
	}
	if got := resp.Properties.Get("cores").AsNumber(); got != 4 {
		t.Errorf("cores %v", got)
	}
}

// rotation is one host key rotation a test saw: the key the session was
// pinned to and the key it made.
type rotation struct{ pinned, made string }

// useCloudRotation has every cloud box's host key rotated without SSH,
// to a new key, until the test ends; it returns what it rotated.
func useCloudRotation(t *testing.T) *[]rotation {
	t.Helper()
	var seen []rotation
	old := rotateCloudHostKey
	rotateCloudHostKey = func(_ context.Context, _ cloudBackend, _ BoxArgs, m *machine) error {
		_, priv, err := ed25519.GenerateKey(nil)
		if err != nil {
			return err
		}
		pub, _ := ssh.NewPublicKey(priv.Public())
		made := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
		seen = append(seen, rotation{pinned: m.HostPublicKey, made: made})
		m.HostPublicKey, m.HostPrivate = made, ""
		return nil
	}
	t.Cleanup(func() { rotateCloudHostKey = old })
	return &seen
}

// TestCloudCreateRefusesAnExistingServer: a server of the box's name in
// the fleet (an interrupted create's, or one made by hand) holds a host
// key no state has. Create refuses it in one line naming it, makes
// nothing, and leaves it alone: before, it pinned a fresh key the server
// did not have, failed its SSH check and deleted the server.
func TestCloudCreateRefusesAnExistingServer(t *testing.T) {
	t.Setenv("SSH_AUTH_SOCK", "")
	old := cloudBootTimeout
	cloudBootTimeout = time.Second
	t.Cleanup(func() { cloudBootTimeout = old })
	a := BoxArgs{Backend: BackendHcloud, Name: "f-s-fsn-1", Fleet: "f", Tier: TierSteady, Shape: "cpx22",
		AuthorizedKeys: []string{testKey + " admin"}}
	fc := &fakeCloud{}
	there, _ := fc.Create(t.Context(), backend.Spec{Name: a.ServerName(), Labels: a.AllLabels()})
	// Another fleet's server of the name is another server: not in the way.
	fc.Create(t.Context(), backend.Spec{Name: "f-s-fsn-2", Labels: map[string]string{"fleet": "g"}})
	fc.created = nil

	_, err := cloudBackend{api: fc}.create(t.Context(), a)
	if err == nil || !strings.Contains(err.Error(), "server f-s-fsn-1 (id "+there.ID+") exists already") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("create over an existing server: %v; want one line naming it", err)
	}
	if len(fc.created) != 0 || len(fc.deleted) != 0 {
		t.Fatalf("created %v, deleted %v: the existing server must be left alone", fc.created, fc.deleted)
	}

	b := a
	b.Name = "f-s-fsn-2"
	if _, err := (cloudBackend{api: fc}).create(t.Context(), b); err != nil && strings.Contains(err.Error(), "exists already") {
		t.Fatalf("another fleet's server of the name refused the create: %v", err)
	}
}

// TestCloudCreateReplacesAnEventsCutOffServer: a reconcile cut off after
// its create request left the event's server, which no state holds. The
// next create finds it by name in one lookup, whatever the fleet's size,
// deletes it (its labels prove it is this event's box, its host key
// unknown) and makes the box again. A server of the name whose event
// label differs is another box: refused, left alone.
func TestCloudCreateReplacesAnEventsCutOffServer(t *testing.T) {
	t.Setenv("SSH_AUTH_SOCK", "")
	old := cloudBootTimeout
	cloudBootTimeout = time.Second
	t.Cleanup(func() { cloudBootTimeout = old })
	oldRead := readCloudFacts
	readCloudFacts = func(context.Context, cloudBackend, BoxArgs, *machine, time.Duration) error { return nil }
	t.Cleanup(func() { readCloudFacts = oldRead })
	useCloudRotation(t)
	a := BoxArgs{Backend: BackendHcloud, Name: "f-b-gig-1", Fleet: "f", Tier: TierBurst, Event: "gig", Shape: "cpx22",
		AuthorizedKeys: []string{testKey + " admin"}}
	fc := &fakeCloud{}
	left, _ := fc.Create(t.Context(), backend.Spec{Name: a.ServerName(), Labels: a.AllLabels()})
	for i := range 120 { // a large fleet: the lookup must not list it
		fc.Create(t.Context(), backend.Spec{Name: fmt.Sprintf("f-s-fsn-%d", i+1), Labels: map[string]string{"fleet": "f", "tier": TierSteady, "event": NoEvent}})
	}
	fc.created = nil

	if _, err := (cloudBackend{api: fc}).create(t.Context(), a); err != nil {
		t.Fatalf("create over the event's cut-off server: %v", err)
	}
	if len(fc.deleted) != 1 || fc.deleted[0] != left.ID || len(fc.created) != 1 || fc.created[0].Name != a.ServerName() {
		t.Fatalf("deleted %v, created %d: want %s deleted and the box made again", fc.deleted, len(fc.created), left.ID)
	}
	if fc.lookups != 1 {
		t.Errorf("%d lookups by name for one create, want 1", fc.lookups)
	}

	// Another event's server of the name: not this box, never deleted.
	other := a
	other.Event = "other"
	fc2 := &fakeCloud{}
	theirs, _ := fc2.Create(t.Context(), backend.Spec{Name: a.ServerName(), Labels: other.AllLabels()})
	fc2.created = nil
	_, err := cloudBackend{api: fc2}.create(t.Context(), a)
	if err == nil || !strings.Contains(err.Error(), theirs.ID) || !strings.Contains(err.Error(), "event") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("create over another event's server: %v; want one line naming it and the label", err)
	}
	if len(fc2.created) != 0 || len(fc2.deleted) != 0 {
		t.Fatalf("created %v, deleted %v: another event's server must be left alone", fc2.created, fc2.deleted)
	}
}

// TestCloudReadKeepsThePinnedHostKey: a refresh reads the server from the
// cloud, which knows neither its host key nor its cores and RAM; the
// state's are kept (before, the pinned key was emptied).
func TestCloudReadKeepsThePinnedHostKey(t *testing.T) {
	_, _, read := cloudBoxReader(t, map[string]property.Value{"cores": property.New(4.0), "ram": property.New(float64(8 << 30))})
	resp, err := read()
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Properties.Get("hostPublicKey"); !got.IsString() || got.AsString() != testKey {
		t.Errorf("hostPublicKey after a refresh %v, want the pinned %q", got, testKey)
	}
	if got := resp.Properties.Get("cores"); !got.IsNumber() || got.AsNumber() != 4 {
		t.Errorf("cores after a refresh %v, want 4", got)
	}
}

// hangingCloud takes a create and never finishes it (its action hangs):
// the server exists and runs nothing until the create's context ends.
type hangingCloud struct{ *fakeCloud }

func (h hangingCloud) Create(ctx context.Context, s backend.Spec) (backend.Box, error) {
	h.fakeCloud.Create(ctx, s)
	<-ctx.Done()
	return backend.Box{}, fmt.Errorf("waiting for action: %w", ctx.Err())
}

// TestCloudCreateThatNeverFinishesFailsAndDeletesItsServer: past
// RELAYFLEET_CLOUD_CREATE_TIMEOUT the create fails, and the server it made
// (found by name, its labels this box's) is deleted; a bad value of the
// variable is refused in one line naming it.
func TestCloudCreateThatNeverFinishesFailsAndDeletesItsServer(t *testing.T) {
	t.Setenv(CreateTimeoutEnv, "50ms")
	a := BoxArgs{Backend: BackendHcloud, Name: "f-e-gig-1", Fleet: "f", Tier: TierBurst, Event: "gig", Shape: "cpx22",
		AuthorizedKeys: []string{testKey + " admin"}}
	fc := &fakeCloud{}
	_, err := cloudBackend{api: hangingCloud{fc}}.create(t.Context(), a)
	if err == nil || !strings.Contains(err.Error(), "not running after 50ms") || !strings.Contains(err.Error(), "srv1 deleted") {
		t.Fatalf("create that never finished: %v", err)
	}
	if len(fc.servers) != 0 || len(fc.deleted) != 1 {
		t.Fatalf("servers %v, deleted %v: want the hung server deleted", fc.servers, fc.deleted)
	}
	t.Setenv(CreateTimeoutEnv, "soon")
	_, err = cloudBackend{api: hangingCloud{&fakeCloud{}}}.create(t.Context(), a)
	if err == nil || !strings.Contains(err.Error(), CreateTimeoutEnv+`="soon"`) {
		t.Fatalf("bad timeout: %v", err)
	}
}
