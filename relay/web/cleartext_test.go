package web_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// tap is a TCP proxy to a relay's port that keeps every byte the browser
// sends through it.
type tap struct {
	ln  net.Listener
	mu  sync.Mutex
	out bytes.Buffer
}

func newTap(t *testing.T, to string) *tap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp := &tap{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go tp.pipe(c, to)
		}
	}()
	return tp
}

func (tp *tap) pipe(c net.Conn, to string) {
	defer c.Close()
	up, err := net.Dial("tcp", to)
	if err != nil {
		return
	}
	defer up.Close()
	go io.Copy(c, up)
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			tp.mu.Lock()
			tp.out.Write(buf[:n])
			tp.mu.Unlock()
			if _, werr := up.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (tp *tap) sent() string {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.out.String()
}

// TestListenPageNoTokenInClear: the /listen page over http:// from a host
// that is not loopback (relay.test, which the browser resolves to the
// tap) never sends its token in clear: the WebSocket it falls back to goes
// over wss:, so nothing the browser sends through the tap holds the
// token, though it sent the page request and tried the WebSocket.
func TestListenPageNoTokenInClear(t *testing.T) {
	testutil.Short(t, "make test-listen (headless Chromium)")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	env := startRelay(t, ctx)
	tp := newTap(t, env.relay.Addr().String())
	br := newBrowser(t, ctx, true, chromedp.Flag("host-resolver-rules", "MAP relay.test 127.0.0.1"))
	tok := env.token(t, "", "private")
	_, port, _ := net.SplitHostPort(tp.ln.Addr().String())
	page := fmt.Sprintf("http://relay.test:%s/listen?broadcast=private/room&transport=websocket#jwt=%s", port, tok)
	if err := chromedp.Do(br.ctx, chromedp.Navigate(page)); err != nil {
		t.Fatalf("open %s: %v", page, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	st := br.waitStats(t, wctx, "a WebSocket try", func(p pageStats) bool { return p.Connects > 0 || p.Reconnects > 0 })
	sent := tp.sent()
	if !strings.Contains(sent, "GET /listen?broadcast=private/room") {
		t.Fatalf("the page did not come through the tap: %q", sent)
	}
	if strings.Contains(sent, tok) {
		t.Errorf("the token went in clear through the tap (page %s): %q", st, sent[strings.Index(sent, tok)-min(strings.Index(sent, tok), 80):][:80])
	}
	if st.Connects != 0 || !strings.Contains(st.LastReason, "WebSocket (wss:") {
		t.Errorf("page: %s; want the WebSocket over wss: refused (the relay's certificate is its own)", st)
	}
}
