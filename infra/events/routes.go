package events

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/text"
)

// FleetRoutes reads from the Pulumi backend what a fleet puts in the
// router's list: its steady stack's hosts (the stack's "hosts" output;
// none when the stack does not exist) and each event's entry as the
// event's record keeps it (draining, last resort). Nothing in the state
// dir is read: any machine pointed at the backend gets the same list.
func FleetRoutes(ctx context.Context, st *program.Stack) ([]program.StackHosts, error) {
	if st.Fleet == nil {
		return nil, fmt.Errorf("relays: no fleet")
	}
	ro := *st
	ro.Config, ro.Secrets = nil, nil
	if ro.Name == "" {
		ro.Name = st.Fleet.Name
	}
	hosts, ok, err := ro.ReadHostsOutput(ctx)
	if err != nil {
		return nil, err
	}
	var out []program.StackHosts
	if ok && len(hosts) > 0 {
		out = append(out, program.StackHosts{Stack: ro.Name, Hosts: hosts, Regions: program.RouterRegions(st.Fleet)})
	}
	ws, err := ro.ProjectWorkspace(ctx, StoreProject)
	if err != nil {
		return nil, err
	}
	recs, err := StoredRecords(ctx, ws, st.Fleet.Name)
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		if rec.Route == nil || len(rec.Route.Hosts) == 0 {
			continue
		}
		r := *rec.Route
		r.Stack = rec.Stack
		out = append(out, r)
	}
	return out, nil
}

// ownedBy says which stacks' entries in a state dir are the fleet's:
// its steady stack and its events'.
func ownedBy(st *program.Stack) func(string) bool {
	steady := st.Name
	if steady == "" {
		steady = st.Fleet.Name
	}
	prefix := StackName(st.Fleet.Name, "")
	return func(stack string) bool { return stack == steady || strings.HasPrefix(stack, prefix) }
}

// SyncRelays rewrites the state dir's entries of the fleet's stacks, and
// so its relays file, from the backend (FleetRoutes): a stack of the
// fleet the backend no longer routes (an event another machine tore
// down) leaves it. It returns the relays file's path.
func SyncRelays(ctx context.Context, st *program.Stack) (string, error) {
	if _, err := st.Backend(); err != nil { // fills StateDir
		return "", err
	}
	routes, err := FleetRoutes(ctx, st)
	if err != nil {
		return "", err
	}
	return program.ReplaceStackHosts(st.StateDir, ownedBy(st), routes)
}

// SyncIfShared is SyncRelays when the stack's backend is shared (not
// file://): after a command changed the fleet, the relays file on this
// machine lists what every operator's commands made. On the state
// dir's own file backend the state dir is already the truth.
func SyncIfShared(ctx context.Context, st *program.Stack) (string, error) {
	remote, err := st.Remote()
	if err != nil || !remote {
		return "", err
	}
	return SyncRelays(ctx, st)
}

// RelaysWatch keeps a router's relays file current from the backend
// (fleet relays --out FILE --watch INTERVAL).
type RelaysWatch struct {
	// Stack is the fleet's steady stack, pointed at the backend.
	Stack *program.Stack
	// Out is the relays file written (atomically, only when it changes).
	Out string
	// Every is how often the backend is read; 0: once.
	Every time.Duration
	// Log takes one line per change and per failed read; nil: nowhere.
	Log io.Writer
	// Read reads the routes; nil: FleetRoutes of Stack.
	Read func(ctx context.Context) ([]program.StackHosts, error)
}

// Run reads the backend and writes Out, then with Every again every
// Every until ctx ends (ctx's error: a signal stopped it). A read that fails leaves Out as it was (a router
// keeps routing to the last list) and, with Every, is tried again; once
// it is the error returned.
func (w RelaysWatch) Run(ctx context.Context) error {
	log := w.Log
	if log == nil {
		log = io.Discard
	}
	last, _ := os.ReadFile(w.Out)
	if w.Every > 0 && w.Stack != nil && w.Stack.WorkDir == "" {
		// Read every Every for long, beside the commands that share the
		// state dir: in workspaces of its own.
		st, done, err := w.Stack.PrivateWork()
		if err != nil {
			return err
		}
		defer done()
		w.Stack = st
	}
	for {
		changed, n, err := w.once(ctx, last)
		switch {
		case err != nil && w.Every == 0:
			return err
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Fprintf(log, "relays: %s kept as it was: %s\n", w.Out, strings.ReplaceAll(err.Error(), "\n", "; "))
		case changed != nil:
			last = changed
			fmt.Fprintf(log, "relays: %s now lists %s\n", w.Out, text.Plural(n, "relay", "relays"))
		}
		if w.Every == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(w.Every):
		}
	}
}

// once reads the list and writes it when it differs from last: it
// returns what it wrote (nil: nothing changed) and how many relays it
// lists.
func (w RelaysWatch) once(ctx context.Context, last []byte) ([]byte, int, error) {
	read := w.Read
	if read == nil {
		read = func(ctx context.Context) ([]program.StackHosts, error) { return FleetRoutes(ctx, w.Stack) }
	}
	routes, err := read(ctx)
	if err != nil {
		return nil, 0, err
	}
	file := program.ComposeRelaysFile(routes)
	rs := file.Relays
	data, err := json.MarshalIndent(file, "", "  ")
	if err != nil {
		return nil, 0, err
	}
	data = append(data, '\n')
	if bytes.Equal(data, last) {
		return nil, len(rs), nil
	}
	if err := program.WriteRelaysFileOf(w.Out, file); err != nil {
		return nil, 0, err
	}
	return data, len(rs), nil
}
