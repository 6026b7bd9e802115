package program

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/relayfleet/relayfleet/internal/text"
)

// Confirm shows the boxes command cmd would verb (fleet up would
// "replace or destroy" them, fleet destroy "destroy") and the listeners
// they serve, on w. Boxes that serve none (read, not guessed) go without
// a question; otherwise yes goes ahead, a person at in (terminal) is
// asked to type yes, and without either the command is refused in one
// line naming --yes.
func Confirm(w io.Writer, in io.Reader, terminal, yes bool, boxes []DoomedBox, cmd, verb string) error {
	fmt.Fprintf(w, "%s would %s %s:\n", cmd, verb, text.Plural(len(boxes), "box", "boxes"))
	for _, b := range boxes {
		what := b.Op
		if len(b.Keys) > 0 {
			what += " (" + strings.Join(b.Keys, ", ") + ")"
		}
		held := text.Plural(int(b.Listeners), "listener", "listeners")
		if b.Err != nil {
			held = "listeners unknown: " + text.OneLine(b.Err)
		}
		fmt.Fprintf(w, "  %-16s %-28s %s\n", b.Name, what, held)
	}
	serving, total := Serving(boxes)
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

// ChangeSummary says what an operation changed, by operation in name
// order ("1 create, 2 same"), or "no changes".
func ChangeSummary(m map[string]int) string {
	if len(m) == 0 {
		return "no changes"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}
