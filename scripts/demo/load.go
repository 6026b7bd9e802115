package main

import (
	"fmt"
	"sort"
	"strings"
)

// maxSteadyGapMs bounds the steady listeners' longest audible gap over the
// whole demo, the rollout included. A listener whose relay goes without a
// word hears nothing for its silence timeout (960 ms) and then the time it
// takes to reconnect through the router; a make-before-break rollout
// should cost far less (the fault tests hold it to 500 ms). 3 s leaves
// room for a loaded machine and still fails the 30 s of a listener that
// waits for the QUIC idle timeout.
const maxSteadyGapMs = 3000

// checkSteady fails the demo when a steady listener was silent at the
// end, was lost, or had a gap longer than maxSteadyGapMs.
func (r *loadReport) checkSteady() error {
	switch {
	case r.SilentAtEnd > 0:
		return fmt.Errorf("%d of %d steady listeners were silent at the end (no frame in the last silence timeout)", r.SilentAtEnd, r.Listeners)
	case r.ListenersLost > 0:
		return fmt.Errorf("%d steady listeners were lost across the rollout", r.ListenersLost)
	case r.GapMs.Max > maxSteadyGapMs:
		return fmt.Errorf("a steady listener heard nothing for %.0f ms (p99 %.0f ms), more than the %d ms allowed", r.GapMs.Max, r.GapMs.P99, maxSteadyGapMs)
	}
	return nil
}

// line is the report in one line, for the terminal.
func (r *loadReport) line() string {
	return fmt.Sprintf("%d of %d connected, audible gap p50 %.0f ms, p99 %.0f ms, longest %.0f ms, %d silent at the end; "+
		"%d frames received, %d lost of %d (%.3f%%), %d late; %d reconnects%s, %d lost listeners",
		r.Connected, r.Listeners, r.GapMs.P50, r.GapMs.P99, r.GapMs.Max, r.SilentAtEnd,
		r.FramesReceived, r.FramesLost, r.FramesExpected, 100*r.LossRatio, r.LateFrames, r.Reconnects, r.reasons(), r.ListenersLost)
}

// reasons is the reconnects by reason, " (silent 3, going-away 40)", or
// nothing.
func (r *loadReport) reasons() string {
	if len(r.ReconnectsByReason) == 0 {
		return ""
	}
	var s []string
	for k, n := range r.ReconnectsByReason {
		s = append(s, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(s)
	return " (" + strings.Join(s, ", ") + ")"
}

// loadTableHeader and row are the report's listener table.
const loadTableHeader = "| who | connected | longest gap | p99 gap | silent at end | frames lost | loss | reconnects | lost listeners | frames received | late frames |\n" +
	"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"

// loadTableNote says what the table's figures mean.
const loadTableNote = "\nGap: per listener, the longest time from one frame received to the next (to the end for a listener silent then); " +
	"longest and p99 across listeners. Silent at end: no frame in the last silence timeout. Frames lost: sent by the publisher " +
	"while the listener was subscribed (or should have been) and never received.\n"

func (r *loadReport) row(name string) string {
	return fmt.Sprintf("| %s | %d of %d | %.0f ms | %.0f ms | %d | %d of %d | %.3f%% | %d%s | %d | %d | %d |\n",
		name, r.Connected, r.Listeners, r.GapMs.Max, r.GapMs.P99, r.SilentAtEnd, r.FramesLost, r.FramesExpected, 100*r.LossRatio,
		r.Reconnects, r.reasons(), r.ListenersLost, r.FramesReceived, r.LateFrames)
}
