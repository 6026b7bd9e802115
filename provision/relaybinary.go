package provision

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/relayfleet/relayfleet/internal/cli"
)

// ErrNoRelay is RelayBinary's error when no path was given and no relay
// build lies beside the running binary.
var ErrNoRelay = errors.New("no relay")

// RelayBinary finds the relay build a command releases or runs: path, or,
// when path is "", relay beside the running binary (where make build puts
// both). It returns the build's absolute path once it has checked that
// the file is a Linux executable (an ELF file with an execute bit); a
// missing default wraps ErrNoRelay.
func RelayBinary(path string) (string, error) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("find the running binary: %w", err)
		}
		path = filepath.Join(filepath.Dir(exe), "relay")
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("%w beside %s", ErrNoRelay, exe)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil || string(magic) != "\x7fELF" {
		return "", fmt.Errorf("%s is not a Linux executable", path)
	}
	return filepath.Abs(path)
}

// FindRelay is RelayBinary for a command's --relay-binary flag: its
// errors are usage errors naming the flag, and a missing default says how
// to build one.
func FindRelay(flagValue string) (string, error) {
	path, err := RelayBinary(flagValue)
	if errors.Is(err, ErrNoRelay) {
		return "", cli.Usagef("flag --relay-binary: %v; build it with make build or give --relay-binary", err)
	}
	if err != nil {
		return "", cli.Usagef("flag --relay-binary: %v", err)
	}
	return path, nil
}

// ReadRelay is FindRelay's build and its bytes.
func ReadRelay(flagValue string) (path string, data []byte, err error) {
	if path, err = FindRelay(flagValue); err != nil {
		return "", nil, err
	}
	if data, err = os.ReadFile(path); err != nil {
		return "", nil, cli.Usagef("flag --relay-binary: %v", err)
	}
	return path, data, nil
}
