package inventories

import (
	"embed"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Shipped holds the data files of this folder, so that the fleet binary
// works without a checkout.
//
//go:embed providers.yaml lab.yaml example.yaml events.yaml lab-events.yaml calibrations/*.yaml
var Shipped embed.FS

// Names of the shipped files.
const (
	ProvidersFile = "providers.yaml"
	// CalibrationFile is the calibration fleet plan and fleet events read
	// beside an inventory (fleet loadtest writes it there). Shipped under
	// this name is the default named calibration (DefaultCalibration).
	CalibrationFile = "calibration.yaml"
	LabFile         = "lab.yaml"
)

// readFile reads path from disk, or from the shipped files when path is
// "embedded:NAME".
func readFile(path string) ([]byte, error) {
	if name, ok := cutEmbedded(path); ok {
		if name == CalibrationFile {
			name = calibrationDir + "/" + DefaultCalibration + ".yaml"
		}
		return Shipped.ReadFile(name)
	}
	return os.ReadFile(path)
}

const embeddedPrefix = "embedded:"

func cutEmbedded(path string) (string, bool) {
	if len(path) > len(embeddedPrefix) && path[:len(embeddedPrefix)] == embeddedPrefix {
		return path[len(embeddedPrefix):], true
	}
	return "", false
}

// Embedded names a shipped file the way Load* functions accept it.
func Embedded(name string) string { return embeddedPrefix + name }

func load(path string, v any) (*document, error) {
	data, err := readFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &Error{File: path, Msg: "no such file"}
		}
		return nil, &Error{File: path, Msg: err.Error()}
	}
	return decodeStrict(path, data, v)
}

// loadChecked reads path into a new T, as load does, then checks it.
func loadChecked[T any](path string, check func(*T) error) (*T, error) {
	var v T
	d, err := load(path, &v)
	return checked(&v, d, err, check)
}

// checked returns v, decoded into d, once check passes: a decoding error
// err as it is, check's error placed in d's file.
func checked[T any](v *T, d *document, err error, check func(*T) error) (*T, error) {
	if err != nil {
		return nil, err
	}
	if err := check(v); err != nil {
		return nil, d.errorAt(err)
	}
	return v, nil
}

// LoadCatalogue reads and validates a providers.yaml.
func LoadCatalogue(path string) (*Catalogue, error) {
	return loadChecked(path, (*Catalogue).validate)
}

// LoadCalibration reads and validates a calibration.yaml.
func LoadCalibration(path string) (*Calibration, error) {
	return loadChecked(path, (*Calibration).validate)
}

// ParseCalibration validates a calibration given as data; file names it
// in errors.
func ParseCalibration(file string, data []byte) (*Calibration, error) {
	var c Calibration
	d, err := decodeStrict(file, data, &c)
	return checked(&c, d, err, (*Calibration).validate)
}

// LoadFleet reads a fleet file and validates it against the catalogue.
func LoadFleet(path string, cat *Catalogue) (*Fleet, error) {
	return loadChecked(path, func(f *Fleet) error { return f.validate(cat) })
}

// LoadFleetFile reads a fleet file and validates it against the catalogue
// beside it (Beside: its directory's providers.yaml, else the shipped one),
// which it returns too.
func LoadFleetFile(path string) (*Fleet, *Catalogue, error) {
	cat, err := LoadCatalogue(Beside(path, ProvidersFile))
	if err != nil {
		return nil, nil, err
	}
	f, err := LoadFleet(path, cat)
	return f, cat, err
}

// Beside returns the file name next to path when it exists there, and the
// shipped file otherwise. It is how a fleet file's directory can carry its
// own providers.yaml and calibration.yaml (fleet loadtest writes the
// latter).
func Beside(path, name string) string {
	if path != "" {
		if _, ok := cutEmbedded(path); !ok {
			p := filepath.Join(filepath.Dir(path), name)
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	return Embedded(name)
}
