package provider

import (
	"maps"
	"strings"
	"testing"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi/sdk/v3/go/property"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/lab"
)

const testKey2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHnWQDVpEf0bIyYk3ss6qXaB1VyBd+uVmrv5x0dA8a7P"

// boxProps is a Box's inputs as the engine hands them over.
func boxProps(a BoxArgs) property.Map { return argsProps(a) }

// stateProps is a Box's state: its inputs and the outputs Create made.
func stateProps(a BoxArgs, id string) property.Map {
	m := boxProps(a)
	all := map[string]property.Value{}
	for k, v := range a.AllLabels() {
		all[k] = property.New(v)
	}
	m = m.Set("allLabels", property.New(property.NewMap(all)))
	m = m.Set("backendId", property.New(id))
	m = m.Set("sshAddress", property.New("192.0.2.7:22"))
	m = m.Set("hostPublicKey", property.New(testKey))
	m = m.Set("addresses", property.New(property.NewArray([]property.Value{property.New("192.0.2.7")})))
	m = m.Set("cores", property.New(2.0))
	m = m.Set("ram", property.New(float64(4<<30)))
	return m
}

func testBox(backendName string) BoxArgs {
	a := BoxArgs{Backend: backendName, Name: "f-fsn-1", Fleet: "f", Tier: TierSteady, Event: NoEvent, Shape: "cpx22", Location: "fsn1",
		Labels: map[string]string{"group": "fsn"}, AuthorizedKeys: []string{testKey + " old-admin"}}
	switch backendName {
	case BackendLab:
		a.Name, a.Shape, a.Location = "fsn-1", "small", ""
	case BackendStatic:
		a.Shape, a.Location, a.Address, a.HostKey = "", "", "192.0.2.7", testKey
	}
	return a
}

// TestBoxDiffInPlaceOrReplace: through the provider's gRPC face, on every
// backend, a change of the admin keys or the labels is an update of the
// box (it keeps serving), while a change of what the box is made of
// (shape, image) replaces it.
func TestBoxDiffInPlaceOrReplace(t *testing.T) {
	s := newServer(t)
	for _, be := range []string{BackendLab, BackendStatic, BackendHcloud, BackendDigitalOcean} {
		for _, tc := range []struct {
			name    string
			edit    func(*BoxArgs)
			key     string
			replace bool
		}{
			{"admin keys rotated", func(a *BoxArgs) { a.AuthorizedKeys = []string{testKey2 + " new-admin"} }, "authorizedKeys", false},
			{"admin key added", func(a *BoxArgs) { a.AuthorizedKeys = append(a.AuthorizedKeys, testKey2+" new-admin") }, "authorizedKeys", false},
			{"label changed", func(a *BoxArgs) { a.Labels = map[string]string{"group": "fsn", "team": "audio"} }, "labels", false},
			{"shape", func(a *BoxArgs) { a.Shape = "medium" }, "shape", true},
			{"image", func(a *BoxArgs) { a.Image = "debian-13" }, "image", true},
		} {
			t.Run(be+"/"+tc.name, func(t *testing.T) {
				old := testBox(be)
				n := testBox(be)
				tc.edit(&n)
				d, err := s.Diff(p.DiffRequest{ID: be + "/x", Urn: urn(BoxType, "fsn-1"), State: stateProps(old, "x"), OldInputs: boxProps(old), Inputs: boxProps(n)})
				if err != nil {
					t.Fatal(err)
				}
				if !d.HasChanges {
					t.Fatalf("no changes: %+v", d)
				}
				kind := d.DetailedDiff[tc.key].Kind
				if tc.replace {
					if kind != p.UpdateReplace {
						t.Fatalf("%s: %s, want a replace (%+v)", tc.key, kind, d.DetailedDiff)
					}
					return
				}
				if kind != p.Update {
					t.Fatalf("%s: %s, want an in-place update (%+v)", tc.key, kind, d.DetailedDiff)
				}
				for k, pd := range d.DetailedDiff {
					if pd.Kind != p.Update {
						t.Errorf("%s: %s: a key rotation or a label would replace the box", k, pd.Kind)
					}
				}
				if d.DeleteBeforeReplace {
					t.Error("delete before replace on an in-place change")
				}
			})
		}
	}
}

// TestCloudUpdateLabelsInPlace: Update puts the new labels on the server
// through the cloud's API; nothing is created or deleted, and the state
// keeps the box's id, address and host key.
func TestCloudUpdateLabelsInPlace(t *testing.T) {
	for _, be := range []string{BackendHcloud, BackendDigitalOcean} {
		t.Run(be, func(t *testing.T) {
			fc := &fakeCloud{}
			old := testBox(be)
			b, _ := fc.Create(t.Context(), backend.Spec{Name: old.Name, Labels: old.AllLabels()})
			fc.created = nil
			useCloud(t, fc)
			s := newServer(t)
			n := old
			n.Labels = map[string]string{"group": "fsn", "team": "audio"}
			resp, err := s.Update(p.UpdateRequest{ID: be + "/" + b.ID, Urn: urn(BoxType, "fsn-1"), State: stateProps(old, b.ID), OldInputs: boxProps(old), Inputs: boxProps(n)})
			if err != nil {
				t.Fatal(err)
			}
			want := n.AllLabels()
			if len(fc.labeled) != 1 || fc.labeled[0] != b.ID+" "+backend.Selector(want) {
				t.Fatalf("labels set %v, want %s once", fc.labeled, backend.Selector(want))
			}
			if len(fc.created) != 0 || len(fc.deleted) != 0 {
				t.Fatalf("created %v, deleted %v: an update must keep the box", fc.created, fc.deleted)
			}
			got := map[string]string{}
			for k, v := range resp.Properties.Get("allLabels").AsMap().All {
				got[k] = v.AsString()
			}
			if !maps.Equal(got, want) {
				t.Errorf("allLabels %v, want %v", got, want)
			}
			if id := resp.Properties.Get("backendId").AsString(); id != b.ID {
				t.Errorf("backendId %q, want %q", id, b.ID)
			}
			if addr := resp.Properties.Get("sshAddress").AsString(); addr != "192.0.2.7:22" {
				t.Errorf("sshAddress %q", addr)
			}

			// A preview changes nothing.
			n.Labels = map[string]string{"group": "fsn", "team": "video"}
			if _, err := s.Update(p.UpdateRequest{ID: be + "/" + b.ID, Urn: urn(BoxType, "fsn-1"), State: stateProps(old, b.ID), Inputs: boxProps(n), DryRun: true}); err != nil {
				t.Fatal(err)
			}
			if len(fc.labeled) != 1 {
				t.Errorf("a preview set labels: %v", fc.labeled)
			}
		})
	}
}

// TestUpdateRefusesNoAdminKeys: rotating to no admin key at all would lock
// everyone out: refused before any SSH.
func TestUpdateRefusesNoAdminKeys(t *testing.T) {
	fc := &fakeCloud{}
	useCloud(t, fc)
	s := newServer(t)
	old := testBox(BackendHcloud)
	n := old
	n.AuthorizedKeys = []string{}
	_, err := s.Update(p.UpdateRequest{ID: "hcloud/srv1", Urn: urn(BoxType, "fsn-1"), State: stateProps(old, "srv1"), Inputs: boxProps(n)})
	if err == nil || !strings.Contains(err.Error(), "admin.ssh_keys") {
		t.Fatalf("err %v, want a refusal naming admin.ssh_keys", err)
	}
}

// TestUpdateRefusesAReplace: Update never quietly takes a change that
// needs a new box.
func TestUpdateRefusesAReplace(t *testing.T) {
	old := testBox(BackendHcloud)
	n := old
	n.Shape = "cpx32"
	d, err := boxDiff(old, n)
	if err != nil {
		t.Fatal(err)
	}
	if !d.HasChanges || d.DetailedDiff["shape"].Kind != p.UpdateReplace {
		t.Fatalf("diff %+v", d)
	}
	s := newServer(t)
	_, err = s.Update(p.UpdateRequest{ID: "hcloud/srv1", Urn: urn(BoxType, "fsn-1"), State: stateProps(old, "srv1"), Inputs: boxProps(n), DryRun: true})
	if err == nil || !strings.Contains(err.Error(), "shape") {
		t.Fatalf("update of the shape: %v, want a refusal", err)
	}
}

// TestUpdatePreviewKeepsTheBoxKnown: the preview of a key rotation keeps
// the box's address, host key and size known (the hosts converged on it
// see no change), and its labels unknown only when they change.
func TestUpdatePreviewKeepsTheBoxKnown(t *testing.T) {
	s := newServer(t)
	for _, be := range []string{BackendLab, BackendHcloud} {
		old := testBox(be)
		n := old
		n.AuthorizedKeys = []string{testKey2 + " new-admin"}
		resp, err := s.Update(p.UpdateRequest{ID: be + "/x", Urn: urn(BoxType, "fsn-1"), State: stateProps(old, "x"), OldInputs: boxProps(old), Inputs: boxProps(n), DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"sshAddress", "hostPublicKey", "cores", "ram", "backendId", "allLabels"} {
			if v := resp.Properties.Get(k); v.IsComputed() || v.IsNull() {
				t.Errorf("%s: %s is %v in the preview of a key rotation, want it known", be, k, v)
			}
		}
		if got := resp.Properties.Get("sshAddress").AsString(); got != "192.0.2.7:22" {
			t.Errorf("%s: sshAddress %q", be, got)
		}
	}
}

// TestCheckRaisesTheGenerationOnAReplace: Check gives a box that a change
// replaces the next generation, and so a name of its own, while an
// in-place change or none keeps the generation (and the name).
func TestCheckRaisesTheGenerationOnAReplace(t *testing.T) {
	s := newServer(t)
	for _, tc := range []struct {
		name    string
		be      string
		oldGen  int
		edit    func(*BoxArgs)
		wantGen int
	}{
		{"nothing", BackendHcloud, 0, func(*BoxArgs) {}, 0},
		{"admin keys", BackendHcloud, 0, func(a *BoxArgs) { a.AuthorizedKeys = []string{testKey2} }, 0},
		{"labels, after a replace", BackendLab, 2, func(a *BoxArgs) { a.Labels = map[string]string{"x": "y"} }, 2},
		{"shape", BackendLab, 0, func(a *BoxArgs) { a.Shape = "medium" }, 1},
		{"image, again", BackendHcloud, 1, func(a *BoxArgs) { a.Image = "debian-13" }, 2},
		{"static readopted", BackendStatic, 0, func(a *BoxArgs) { a.Address = "192.0.2.8" }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := testBox(tc.be)
			old.Generation = tc.oldGen
			n := testBox(tc.be)
			tc.edit(&n)
			oldIn := boxProps(old).Set("generation", property.New(float64(old.Generation)))
			resp, err := s.Check(p.CheckRequest{Urn: urn(BoxType, "fsn-1"), State: oldIn, Inputs: boxProps(n)})
			if err != nil || len(resp.Failures) > 0 {
				t.Fatalf("check: %v %v", err, resp.Failures)
			}
			got := 0
			if v, ok := resp.Inputs.GetOk("generation"); ok && v.IsNumber() {
				got = int(v.AsNumber())
			}
			if got != tc.wantGen {
				t.Fatalf("generation %d, want %d", got, tc.wantGen)
			}
			// The engine diffs the checked inputs: a raised generation
			// is a replace, made before the old box goes.
			n.Generation = got
			d, err := boxDiff(old, n)
			if err != nil {
				t.Fatal(err)
			}
			if replaces(d) != (got != tc.oldGen || tc.be == BackendStatic && tc.name == "static readopted") {
				t.Errorf("diff %+v after generation %d -> %d", d.DetailedDiff, tc.oldGen, got)
			}
			if d.DeleteBeforeReplace {
				t.Error("delete before replace: the old box would go before its replacement is made")
			}
		})
	}
	// A new box (no old inputs) is generation 0, named as the program says.
	resp, err := s.Check(p.CheckRequest{Urn: urn(BoxType, "fsn-1"), Inputs: boxProps(testBox(BackendLab))})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := resp.Inputs.GetOk("generation"); ok && v.IsNumber() && v.AsNumber() != 0 {
		t.Fatalf("a new box has generation %v", v)
	}
}

// TestServerName: a replacement's name is its own, within the backend's
// length, and two boxes' replacements do not share one.
func TestServerName(t *testing.T) {
	for _, tc := range []struct {
		a    BoxArgs
		want string
	}{
		{BoxArgs{Backend: BackendLab, Name: "safc-1"}, "safc-1"},
		{BoxArgs{Backend: BackendLab, Name: "safc-1", Generation: 1}, "safc-1-r1"},
		{BoxArgs{Backend: BackendHcloud, Name: "example-fsn-1", Generation: 3}, "example-fsn-1-r3"},
		{BoxArgs{Backend: BackendStatic, Name: "s-1", Generation: 3}, "s-1"},
	} {
		if got := tc.a.ServerName(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.a, got, tc.want)
		}
	}
	seen := map[string]string{}
	for _, n := range []string{"lab-stead-1", "lab-stead-2", "lab-stea-12", "abcdefghijk"} {
		for gen := 1; gen <= 12; gen++ {
			a := BoxArgs{Backend: BackendLab, Name: n, Generation: gen}
			got := a.ServerName()
			if err := lab.ValidName(got); err != nil {
				t.Fatalf("%s generation %d: %q: %v", n, gen, got, err)
			}
			if got == n {
				t.Fatalf("%s generation %d keeps the old name", n, gen)
			}
			if o, ok := seen[got]; ok {
				t.Fatalf("%s and %s share the name %q", o, n, got)
			}
			seen[got] = n
		}
	}
	long := BoxArgs{Backend: BackendDigitalOcean, Name: strings.Repeat("a", 60) + "-1", Generation: 1}
	if got := long.ServerName(); len(got) > 63 || !strings.HasSuffix(got, "-r1") {
		t.Errorf("long cloud name: %q", got)
	}
}

// TestCloudReplacementGetsItsOwnServer: the replacement is created under
// its own name, so a cloud's create-by-name does not hand back the old
// server (which the engine then deletes).
func TestCloudReplacementGetsItsOwnServer(t *testing.T) {
	fc := &fakeCloud{}
	useCloudFacts(t, 2, 4<<30)
	a := testBox(BackendHcloud)
	a.Generation = 1
	m, err := cloudBackend{api: fc}.create(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	if len(fc.created) != 1 || fc.created[0].Name != "f-fsn-1-r1" || !strings.Contains(m.HostPublicKey, "ssh-ed25519") {
		t.Fatalf("created %v", fc.created)
	}
	if st := m.state(a); st.ServerName != "f-fsn-1-r1" || st.Name != "f-fsn-1" {
		t.Errorf("state names %q (server %q)", st.Name, st.ServerName)
	}
}

// TestDeleteOfAnUnreachableBoxStillDeletes: the drain before a delete is
// best effort: a box relayfleet cannot reach serves nobody through it, and
// is deleted all the same.
func TestDeleteOfAnUnreachableBoxStillDeletes(t *testing.T) {
	t.Setenv("SSH_AUTH_SOCK", "")
	fc := &fakeCloud{}
	a := testBox(BackendHcloud)
	b, _ := fc.Create(t.Context(), backend.Spec{Name: a.Name, Labels: a.AllLabels()})
	useCloud(t, fc)
	s := newServer(t)
	st := stateProps(a, b.ID).Set("sshAddress", property.New("127.0.0.1:1"))
	if err := s.Delete(p.DeleteRequest{ID: "hcloud/" + b.ID, Urn: urn(BoxType, "fsn-1"), Properties: st}); err != nil {
		t.Fatal(err)
	}
	if len(fc.deleted) != 1 || fc.deleted[0] != b.ID {
		t.Fatalf("deleted %v, want %s", fc.deleted, b.ID)
	}
}

// TestReplacementRecheckKeepsTheGeneration: when the engine replaces a box
// it checks the inputs again without the old ones; that Check must give
// the raised generation too, or the replacement takes the old box's name,
// Create hands back the old box, and the engine deletes it (seen on the
// lab: zero boxes after a shape change).
func TestReplacementRecheckKeepsTheGeneration(t *testing.T) {
	s := newServer(t)
	old := testBox(BackendLab)
	n := old
	n.Shape = "medium"
	gen := func(resp p.CheckResponse) int {
		if v, ok := resp.Inputs.GetOk("generation"); ok && v.IsNumber() {
			return int(v.AsNumber())
		}
		return 0
	}
	u := urn(BoxType, "recheck-1")
	first, err := s.Check(p.CheckRequest{Urn: u, State: boxProps(old), Inputs: boxProps(n)})
	if err != nil || gen(first) != 1 {
		t.Fatalf("first check: generation %d, %v; want 1", gen(first), err)
	}
	again, err := s.Check(p.CheckRequest{Urn: u, Inputs: boxProps(n)})
	if err != nil || gen(again) != 1 {
		t.Fatalf("the replacement's second check: generation %d, %v; want 1 (the old box's name otherwise)", gen(again), err)
	}
	other, err := s.Check(p.CheckRequest{Urn: urn(BoxType, "recheck-new"), Inputs: boxProps(n)})
	if err != nil || gen(other) != 0 {
		t.Fatalf("a new box: generation %d, %v; want 0", gen(other), err)
	}
	// A later run that no longer replaces it forgets the replacement.
	n.Generation = 1
	if _, err := s.Check(p.CheckRequest{Urn: u, State: boxProps(n).Set("generation", property.New(1.0)), Inputs: boxProps(n)}); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Check(p.CheckRequest{Urn: u, Inputs: boxProps(n)}); gen(again) != 0 {
		t.Fatalf("generation %d remembered after a run without a replace", gen(again))
	}
}
