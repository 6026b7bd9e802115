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

// LoadCatalogue reads and validates a providers.yaml.
func LoadCatalogue(path string) (*Catalogue, error) {
	var c Catalogue
	d, err := load(path, &c)
	if err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, d.errorAt(err)
	}
	return &c, nil
}

// LoadCalibration reads and validates a calibration.yaml.
func LoadCalibration(path string) (*Calibration, error) {
	var c Calibration
	d, err := load(path, &c)
	if err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, d.errorAt(err)
	}
	return &c, nil
}

// ParseCalibration validates a calibration given as data; file names it
// in errors.
func ParseCalibration(file string, data []byte) (*Calibration, error) {
	var c Calibration
	d, err := decodeStrict(file, data, &c)
	if err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, d.errorAt(err)
	}
	return &c, nil
}

// LoadFleet reads a fleet file and validates it against the catalogue.
func LoadFleet(path string, cat *Catalogue) (*Fleet, error) {
	var f Fleet
	d, err := load(path, &f)
	if err != nil {
		return nil, err
	}
	if err := f.validate(cat); err != nil {
		return nil, d.errorAt(err)
	}
	return &f, nil
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
