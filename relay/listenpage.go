package relay

import (
	_ "embed"
	"net/http"
)

// The listen page: GET /listen?broadcast=NAME[&track=audio] plays a
// broadcast in a browser (WebTransport pinned by /certificate.sha256,
// WebSocket when that fails; Opus through WebCodecs and WebAudio) and shows
// transport, groups, gaps, decoder errors and latency. Its script is
// relay/web/src/listen.js bundled with esbuild (make web) into
// relay/web/dist/listen.js, committed so a build needs no npm; the page
// loads nothing but these two files and the relay's own endpoints.

//go:embed web/listen.html
var listenHTML []byte

//go:embed web/dist/listen.js
var listenJS []byte

// listenPageCSP lets the page run only its own script and talk only to
// relays (WebTransport over https:, WebSocket over ws: or wss:).
const listenPageCSP = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; " +
	"connect-src 'self' https: ws: wss:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// listenRoutes registers the page and its script on mux.
func listenRoutes(mux *http.ServeMux) {
	serve := func(ctype string, body []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			h := w.Header()
			h.Set("Content-Type", ctype)
			h.Set("Cache-Control", "no-cache")
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("Referrer-Policy", "no-referrer")
			h.Set("Content-Security-Policy", listenPageCSP)
			_, _ = w.Write(body)
		}
	}
	mux.HandleFunc("GET /listen", serve("text/html; charset=utf-8", listenHTML))
	mux.HandleFunc("GET /listen.js", serve("text/javascript; charset=utf-8", listenJS))
}
