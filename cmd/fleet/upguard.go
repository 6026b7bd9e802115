package main

import (
	"bufio"
	"context"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"io"
	"strings"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
)

// guardUp previews the up and, when it would replace or destroy boxes,
// shows them with their listeners and asks before going ahead (or needs
// yes). A person at ios.In (a terminal) is asked.
func guardUp(ctx context.Context, s *stackFlags, st *program.Stack, yes bool, ios *cli.IOStreams) error {
	_, doomed, err := st.PreviewDoomed(ctx)
	if err != nil || len(doomed) == 0 {
		return err
	}
	boxes := doomedListeners(ctx, s, st, doomed)
	return confirmDoomed(ios.Out, cli.ContextReader(ctx, ios.In), ios.InTerminal(), yes, boxes)
}

// guardDestroy previews the destroy, shows the boxes it would delete with
// their listeners and asks before going ahead when any serves listeners
// (or needs yes), as guardUp does. Static servers are left as they are
// (their relays run on): they are not asked about.
func guardDestroy(ctx context.Context, s *stackFlags, st *program.Stack, yes bool, ios *cli.IOStreams) error {
	doomed, err := st.PreviewDestroyDoomed(ctx)
	if err != nil {
		return err
	}
	doomed = program.DestroyedBoxes(doomed)
	if len(doomed) == 0 {
		return nil
	}
	boxes := doomedListeners(ctx, s, st, doomed)
	return confirmGoing(ios.Out, cli.ContextReader(ctx, ios.In), ios.InTerminal(), yes, boxes, "destroy", "destroy")
}

// doomedListeners reads the listeners of each doomed box from its relays'
// /stats over SSH (program.DoomedListeners), one prober per backend:
// each logs in its own way.
func doomedListeners(ctx context.Context, s *stackFlags, st *program.Stack, doomed []program.Doomed) []program.DoomedBox {
	probes := map[string]*events.SSHProbe{}
	defer func() {
		for _, p := range probes {
			p.Close()
		}
	}()
	return st.DoomedListeners(ctx, doomed, func(backend string) program.ListenerProber {
		p := probes[backend]
		if p == nil {
			cfg := s.labConfig(st)
			p = &events.SSHProbe{Lab: cfg, KeyFile: cfg.SSHKeyFile}
			probes[backend] = p
		}
		return p
	})
}

// confirmDoomed shows the boxes an up would replace or destroy and the
// listeners they serve. Boxes that serve none (read, not guessed) go
// without a question; otherwise yes goes ahead, a terminal is asked, and
// without either the up is refused.
func confirmDoomed(w io.Writer, in io.Reader, terminal, yes bool, boxes []program.DoomedBox) error {
	return confirmGoing(w, in, terminal, yes, boxes, "up", "replace or destroy")
}

// confirmGoing is confirmDoomed for command cmd, which would verb the
// boxes.
func confirmGoing(w io.Writer, in io.Reader, terminal, yes bool, boxes []program.DoomedBox, cmd, verb string) error {
	fmt.Fprintf(w, "%s would %s %s:\n", cmd, verb, text.Plural(len(boxes), "box", "boxes"))
	for _, b := range boxes {
		what := b.Op
		if len(b.Keys) > 0 {
			what += " (" + strings.Join(b.Keys, ", ") + ")"
		}
		held := text.Plural(int(b.Listeners), "listener", "listeners")
		if b.Err != nil {
			held = "listeners unknown: " + oneLine(b.Err)
		}
		fmt.Fprintf(w, "  %-16s %-28s %s\n", b.Name, what, held)
	}
	serving, total := program.Serving(boxes)
	if len(serving) == 0 {
		fmt.Fprintln(w, "none serves listeners: going ahead")
		return nil
	}
	if yes {
		fmt.Fprintf(w, "--yes: going ahead with %s serving listeners\n", text.Plural(len(serving), "box", "boxes"))
		return nil
	}
	if !terminal {
		return fmt.Errorf("flag --yes: %s would %s %s serving listeners or whose listeners could not be read (%s, %s): confirm on a terminal or give --yes",
			cmd, verb, text.Plural(len(serving), "box", "boxes"), strings.Join(serving, ", "), text.Plural(int(total), "listener", "listeners"))
	}
	fmt.Fprintf(w, "%s %s serving listeners (%s)? Type yes to go ahead: ", strings.ToUpper(verb[:1])+verb[1:], text.Plural(len(serving), "box", "boxes"), strings.Join(serving, ", "))
	line, _ := bufio.NewReader(in).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(line)); a != "yes" && a != "y" {
		return fmt.Errorf("not confirmed: nothing changed")
	}
	return nil
}
