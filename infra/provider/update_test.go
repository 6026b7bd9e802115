package provider

import (
	"maps"
	"strings"
	"testing"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi/sdk/v3/go/property"

	"github.com/relayfleet/relayfleet/infra/backend"
)

const testKey2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHnWQDVpEf0bIyYk3ss6qXaB1VyBd+uVmrv5x0dA8a7P"

// boxProps is a Box's inputs as the engine hands them over.
func boxProps(a BoxArgs) property.Map {
	vs := map[string]property.Value{}
	for k, v := range map[string]string{
		"backend": a.Backend, "name": a.Name, "fleet": a.Fleet, "tier": a.Tier, "event": a.Event,
		"shape": a.Shape, "location": a.Location, "image": a.Image, "address": a.Address, "user": a.User, "hostKey": a.HostKey,
	} {
		if v != "" {
			vs[k] = property.New(v)
		}
	}
	if a.Labels != nil {
		m := map[string]property.Value{}
		for k, v := range a.Labels {
			m[k] = property.New(v)
		}
		vs["labels"] = property.New(property.NewMap(m))
	}
	if a.AuthorizedKeys != nil {
		var arr []property.Value
		for _, k := range a.AuthorizedKeys {
			arr = append(arr, property.New(k))
		}
		vs["authorizedKeys"] = property.New(property.NewArray(arr))
	}
	return property.NewMap(vs)
}

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
			orig := newCloud
			newCloud = func(string, Config) (cloudAPI, error) { return fc, nil }
			t.Cleanup(func() { newCloud = orig })
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
	orig := newCloud
	newCloud = func(string, Config) (cloudAPI, error) { return fc, nil }
	t.Cleanup(func() { newCloud = orig })
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
	d := boxDiff(old, n)
	if !d.HasChanges || d.DetailedDiff["shape"].Kind != p.UpdateReplace {
		t.Fatalf("diff %+v", d)
	}
	s := newServer(t)
	_, err := s.Update(p.UpdateRequest{ID: "hcloud/srv1", Urn: urn(BoxType, "fsn-1"), State: stateProps(old, "srv1"), Inputs: boxProps(n), DryRun: true})
	if err == nil || !strings.Contains(err.Error(), "shape") {
		t.Fatalf("update of the shape: %v, want a refusal", err)
	}
}
