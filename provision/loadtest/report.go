package loadtest

import (
	"encoding/json"
	"fmt"
	"io"
)

// WriteResult writes the outcome of a load test written by Write: the
// document as indented JSON when asJSON, else the fit's summary (when it
// fitted, fitErr nil) and the files written.
func (d *Doc) WriteResult(w io.Writer, asJSON bool, fitErr error) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	if fitErr == nil {
		fmt.Fprintf(w, "\n%s\n", d.Fit.Summary())
		fmt.Fprintf(w, "wrote %s (fleet plan reads calibration.yaml beside the inventory)\n", d.Files["calibration"])
	}
	_, err := fmt.Fprintf(w, "wrote %s\nwrote %s\n", d.Files["json"], d.Files["svg"])
	return err
}
