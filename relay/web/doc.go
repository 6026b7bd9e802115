// Package web holds the relay's /listen page: its HTML (listen.html), its
// script (src/listen.js) and the script bundled by esbuild with @moq/lite
// into dist/listen.js (make web; make web-check fails when the committed
// bundle is not what the pinned esbuild and package-lock.json give). Package
// relay embeds listen.html and dist/listen.js and serves them on
// GET /listen and GET /listen.js.
//
// Its test (make test-listen) plays ffmpeg-encoded Opus published into a
// relay in headless Chromium, over WebTransport and over WebSocket, and
// reads the page's own counters back. It skips without Chromium or ffmpeg,
// except with CI=true, where a skip is a failure.
package web
