package program

import (
	"slices"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/relayfleet/relayfleet/infra/provider"
)

func step(op apitype.OpType, typ, urn, name string, keys ...string) events.EngineEvent {
	m := apitype.StepEventMetadata{Op: op, URN: urn, Type: typ, Keys: keys}
	if name != "" {
		m.Old = &apitype.StepEventStateMetadata{Outputs: map[string]any{"name": name, "backend": "lab"}}
	}
	return events.EngineEvent{EngineEvent: apitype.EngineEvent{ResourcePreEvent: &apitype.ResourcePreEvent{Metadata: m}}}
}

// TestDoomedBoxes: the boxes a preview deletes or replaces, read from its
// steps: each once (a replace has several steps), hosts and firewalls and
// updated boxes left out.
func TestDoomedBoxes(t *testing.T) {
	const u1 = "urn:pulumi:lab::relayfleet-infra::relayfleet:index:Box::lab-steady-1"
	const u2 = "urn:pulumi:lab::relayfleet-infra::relayfleet:index:Box::lab-steady-2"
	const u3 = "urn:pulumi:lab::relayfleet-infra::relayfleet:index:Box::lab-steady-3"
	evs := []events.EngineEvent{
		{EngineEvent: apitype.EngineEvent{PreludeEvent: &apitype.PreludeEvent{}}},
		step(apitype.OpUpdate, provider.BoxType, u1, "steady-1"),
		step(apitype.OpCreateReplacement, provider.BoxType, u2, "steady-2", "shape"),
		step(apitype.OpReplace, provider.BoxType, u2, "steady-2", "image"),
		step(apitype.OpDeleteReplaced, provider.BoxType, u2, "steady-2"),
		step(apitype.OpReplace, provider.HostType, "urn:pulumi:lab::relayfleet-infra::relayfleet:index:Host::lab-steady-2", "steady-2"),
		step(apitype.OpDelete, provider.BoxType, u3, ""),
		step(apitype.OpSame, provider.BoxType, u1, "steady-1"),
	}
	got := doomedBoxes(evs)
	if len(got) != 2 {
		t.Fatalf("doomed %+v, want the replaced and the deleted box", got)
	}
	if got[0].Name != "steady-2" || got[0].Op != OpReplace || !slices.Equal(got[0].Keys, []string{"image", "shape"}) || got[0].Backend != "lab" {
		t.Errorf("replaced box %+v", got[0])
	}
	if got[1].Name != "lab-steady-3" || got[1].Op != OpDelete {
		t.Errorf("deleted box %+v (a step without state is named by its URN)", got[1])
	}
	if d := doomedBoxes(evs[:2]); len(d) != 0 {
		t.Errorf("an update dooms %+v", d)
	}
}

// TestCollectEvents: wait returns every event sent, in order, once the
// sender closed the channel.
func TestCollectEvents(t *testing.T) {
	ch, wait := collectEvents()
	var sent []events.EngineEvent
	for _, name := range []string{"lab-1", "lab-2", "lab-3"} {
		e := step(apitype.OpDelete, provider.BoxType, "urn:"+name, name)
		sent = append(sent, e)
		ch <- e
	}
	close(ch)
	got := wait()
	if len(got) != len(sent) {
		t.Fatalf("%d events, want %d", len(got), len(sent))
	}
	for i := range got {
		if got[i].ResourcePreEvent.Metadata.URN != sent[i].ResourcePreEvent.Metadata.URN {
			t.Errorf("event %d is %s, want %s", i, got[i].ResourcePreEvent.Metadata.URN, sent[i].ResourcePreEvent.Metadata.URN)
		}
	}
}
