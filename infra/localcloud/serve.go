package localcloud

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// TokenFile returns the API token kept in path, creating the file (mode
// 0600, 32 random bytes in hex) when it is missing. An existing file that
// others may read, or that holds no token, is an error naming it.
func TokenFile(path string) (token string, created bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", false, err
		}
		token = hex.EncodeToString(b[:])
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return "", false, fmt.Errorf("token file %s: %w", path, err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return "", false, fmt.Errorf("token file %s: %w", path, err)
		}
		if _, err := f.WriteString(token + "\n"); err != nil {
			f.Close()
			return "", false, fmt.Errorf("token file %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			return "", false, fmt.Errorf("token file %s: %w", path, err)
		}
		return token, true, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("token file %s: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", false, fmt.Errorf("token file %s: %w", path, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", false, fmt.Errorf("token file %s: mode %04o lets others read it; want 0600 (chmod 600 %s)", path, st.Mode().Perm(), path)
	}
	token = strings.TrimSpace(string(data))
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return "", false, fmt.Errorf("token file %s: want one token on one line", path)
	}
	return token, false, nil
}

// CheckListen checks that addr is HOST:PORT with HOST a loopback address
// or bridge (the lab bridge's own address): the local cloud is for this
// machine and its lab boxes only.
func CheckListen(addr string, bridge netip.Addr) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fmt.Errorf("flag --listen %q: want HOST:PORT, for example 127.0.0.1:8780", addr)
	}
	if host == "localhost" {
		return nil
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("flag --listen %q: want an IP address, loopback or the lab bridge's %s", addr, bridge)
	}
	if a.IsLoopback() || (bridge.IsValid() && a == bridge) {
		return nil
	}
	return fmt.Errorf("flag --listen %q: only loopback or the lab bridge's address (%s) is allowed: the local cloud is not for other machines", addr, bridge)
}

// Serve serves h under mount ("/v1") on ln until ctx ends, then shuts the
// server down.
func Serve(ctx context.Context, ln net.Listener, mount string, h http.Handler) error {
	mux := http.NewServeMux()
	mux.Handle(mount+"/", http.StripPrefix(mount, h))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}
