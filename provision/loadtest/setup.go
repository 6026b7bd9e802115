package loadtest

import (
	"fmt"
	"os"
	"path/filepath"
)

// TokenFiles writes the publisher's token pub and the listeners' token
// sub to files, 0600 in a 0700 directory of their own: the relay
// commands read them from there, never from their command lines. remove
// deletes the directory.
func TokenFiles(pub, sub string) (pubFile, subFile string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "fleet-loadtest-")
	if err != nil {
		return "", "", nil, err
	}
	remove = func() { os.RemoveAll(dir) }
	pubFile, subFile = filepath.Join(dir, "publish.jwt"), filepath.Join(dir, "subscribe.jwt")
	for f, tok := range map[string]string{pubFile: pub, subFile: sub} {
		if err := os.WriteFile(f, []byte(tok+"\n"), 0o600); err != nil {
			remove()
			return "", "", nil, fmt.Errorf("token file: %w", err)
		}
	}
	return pubFile, subFile, remove, nil
}

// GeneratorNote says where the load generator ran (host, with cpus
// cores) and how that limits the steps; sharesCPU when the boxes it
// measures run on the same machine (lab boxes).
func GeneratorNote(host string, cpus int, sharesCPU bool) string {
	if sharesCPU {
		return fmt.Sprintf("the load generator runs on this machine (%s, %d cores) and shares its CPU with the lab boxes it measures: keep the steps small, read the drops chart before trusting the top steps", host, cpus)
	}
	return fmt.Sprintf("the load generator runs on this machine (%s, %d cores) and its CPU limits the steps", host, cpus)
}
