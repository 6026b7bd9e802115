// Package inventories loads relayfleet's versioned YAML data: fleet files
// (steady boxes and burst pools), the provider catalogue (providers.yaml)
// and the capacity calibrations (calibrations/: relayfleet.yaml, measured on
// the bundled relay and the default; story.yaml; or a calibration.yaml).
//
// Every file starts with `version: 1`. Loading is strict: an unknown key, a
// value of the wrong type or a value out of range is an *Error naming the
// file, the line and the field. The data files shipped in this folder are
// embedded, so the fleet binary works without a checkout; a file on disk
// given by the user always wins.
package inventories
