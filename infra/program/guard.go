package program

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/relayfleet/relayfleet/infra/provider"
)

// Doomed is a box that an up would delete or replace: its listeners go
// with it unless they are moved first.
type Doomed struct {
	// Name is the box's name at its backend; URN its Pulumi URN.
	Name string
	URN  string
	// Op is "delete" or "replace".
	Op string
	// Keys are the inputs that force a replace (shape, image, ...).
	Keys []string
	// Backend is the box's backend (lab, static, hcloud, ...), as the
	// state has it; "" when unknown.
	Backend string
}

// Doomed operations.
const (
	OpDelete  = "delete"
	OpReplace = "replace"
)

// collectEvents returns a channel to give the engine as an event stream,
// and wait, which returns the events sent on it once the engine has
// closed it (call it after the operation returned).
func collectEvents() (chan<- events.EngineEvent, func() []events.EngineEvent) {
	ch := make(chan events.EngineEvent)
	done := make(chan []events.EngineEvent, 1)
	go func() {
		var evs []events.EngineEvent
		for e := range ch {
			evs = append(evs, e)
		}
		done <- evs
	}()
	return ch, func() []events.EngineEvent { return <-done }
}

// PreviewDoomed previews an up, without a refresh (which boxes go does
// not depend on drift), and returns what it would change, by operation,
// and the boxes it would delete or replace, read from the engine's step
// events.
func (s *Stack) PreviewDoomed(ctx context.Context) (map[string]int, []Doomed, error) {
	st, err := s.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	ch, wait := collectEvents()
	res, err := st.Preview(ctx, optpreview.EventStreams(ch), optpreview.ErrorProgressStreams(s.progress()))
	evs := wait()
	if err != nil {
		return nil, nil, fmt.Errorf("preview: %s", lastLines(err.Error()))
	}
	changes := map[string]int{}
	for k, v := range res.ChangeSummary {
		changes[string(k)] = v
	}
	s.doomed, s.previewed = doomedBoxes(evs), true
	return changes, s.doomed, nil
}

// doomedBoxes reads the Box resources a preview deletes or replaces from
// its step events, once each, in the order the engine reports them.
func doomedBoxes(evs []events.EngineEvent) []Doomed {
	var out []Doomed
	seen := map[string]int{}
	for _, e := range evs {
		if e.ResourcePreEvent == nil {
			continue
		}
		m := e.ResourcePreEvent.Metadata
		if m.Type != provider.BoxType {
			continue
		}
		op := ""
		switch m.Op {
		case apitype.OpDelete:
			op = OpDelete
		case apitype.OpReplace, apitype.OpCreateReplacement, apitype.OpDeleteReplaced:
			op = OpReplace
		default:
			continue
		}
		if i, ok := seen[m.URN]; ok {
			out[i].Keys = mergeKeys(out[i].Keys, m.Keys)
			continue
		}
		seen[m.URN] = len(out)
		out = append(out, Doomed{Name: stepBoxName(m), URN: m.URN, Op: op, Keys: mergeKeys(nil, m.Keys), Backend: stepBackend(m)})
	}
	return out
}

func mergeKeys(a, b []string) []string {
	for _, k := range b {
		if !slices.Contains(a, k) {
			a = append(a, k)
		}
	}
	slices.Sort(a)
	return a
}

// PreviewDestroyDoomed previews a destroy and returns the boxes it would
// delete, read from the engine's step events.
func (s *Stack) PreviewDestroyDoomed(ctx context.Context) ([]Doomed, error) {
	st, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	ch, wait := collectEvents()
	_, err = st.PreviewDestroy(ctx, optdestroy.EventStreams(ch), optdestroy.ErrorProgressStreams(s.progress()))
	evs := wait()
	if err != nil {
		return nil, fmt.Errorf("preview destroy: %s", lastLines(err.Error()))
	}
	return doomedBoxes(evs), nil
}

// stepBackend is the backend of the box a step is about, from its old
// state.
func stepBackend(m apitype.StepEventMetadata) string {
	if m.Old != nil {
		for _, props := range []map[string]any{m.Old.Outputs, m.Old.Inputs} {
			if b, ok := props["backend"].(string); ok && b != "" {
				return b
			}
		}
	}
	return ""
}

// stepBoxName is the name of the box a step is about: the old state's
// name output, else its input, else the URN's last part.
func stepBoxName(m apitype.StepEventMetadata) string {
	if m.Old != nil {
		for _, props := range []map[string]any{m.Old.Outputs, m.Old.Inputs} {
			if n, ok := props["name"].(string); ok && n != "" {
				return n
			}
		}
	}
	if i := strings.LastIndex(m.URN, "::"); i >= 0 {
		return m.URN[i+2:]
	}
	return m.URN
}
