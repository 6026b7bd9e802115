package loadgen

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// WriteText writes the report as a few lines of text (relay loadgen's
// summary).
func (rep *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "listeners %d: connected %d, failed %d, frozen %d, ended early %d\n",
		rep.Listeners, rep.Connected, rep.Failed, rep.Frozen, rep.Ended)
	fmt.Fprintf(w, "audible gap per listener: p50 %.0f ms, p99 %.0f ms, longest %.0f ms; silent at the end %d\n",
		rep.GapMs.P50, rep.GapMs.P99, rep.GapMs.Max, rep.SilentAtEnd)
	fmt.Fprintf(w, "frames received %d, lost %d of %d expected (%.3f%%), late %d over %.1f s\n",
		rep.FramesReceived, rep.FramesLost, rep.FramesExpected, 100*rep.LossRatio, rep.LateFrames, rep.Seconds)
	reasons := make([]string, 0, len(rep.ReconnectsByReason))
	for r, n := range rep.ReconnectsByReason {
		reasons = append(reasons, fmt.Sprintf("%s %d", r, n))
	}
	sort.Strings(reasons)
	by := ""
	if len(reasons) > 0 {
		by = " (" + strings.Join(reasons, ", ") + ")"
	}
	fmt.Fprintf(w, "reconnects %d%s, listeners lost %d\n", rep.Reconnects, by, rep.ListenersLost)
	fmt.Fprintf(w, "bitrate per listener: mean %.0f bit/s, min %.0f bit/s; latency p50 %.1f ms, max %.1f ms\n",
		rep.BitrateBpsMean, rep.BitrateBpsMin, rep.LatencyMsP50, rep.LatencyMsMax)
	errs := make([]string, 0, len(rep.Errors))
	for e := range rep.Errors {
		errs = append(errs, e)
	}
	sort.Strings(errs)
	for _, e := range errs {
		fmt.Fprintf(w, "error x%d: %s\n", rep.Errors[e], e)
	}
}
