// listen.js: the script of the relay's /listen page. It subscribes to one
// broadcast's audio track over WebTransport (WebSocket when that fails),
// speaks moq-lite with @moq/lite, decodes the Opus packets with WebCodecs
// and plays them through WebAudio, and shows what it sees: transport,
// groups, gaps, decoder errors, latency. window.listenStats holds the same
// counters for tests.
//
// Page URL: /listen?broadcast=NAME[&track=audio][&transport=webtransport|websocket]
// [#jwt=TOKEN]. The token stays in the fragment, which the browser never
// sends with the page request; it goes only on the session URL (?jwt=, as
// every relay client presents it), only over TLS (WebTransport, wss:) or
// to a page on loopback, and is never shown or logged.
//
// Fresh tokens: a relay closes a session whose token expired (code 8,
// "token expired"), and the page comes back at once with a fresh token
// from its hook, asked before every connection: a page that embeds this
// script sets window.listenTokenSource = async () => "TOKEN"; or the
// fragment names a same-origin URL whose body is a token,
// #token_url=/my/token (fetched with the page's cookies); or the #jwt=
// token is used as it is.
import * as Moq from "@moq/lite";
import QMux from "@moq/qmux";

// A relay that wants its listeners elsewhere closes with these codes
// (WebTransport/QUIC application code, WebSocket status).
const GOING_AWAY_CODE = 0x10;
// The relay closes a session whose token expired with this code.
const TOKEN_EXPIRED_CODE = 8;
const WEBSOCKET_GOING_AWAY = 1001;
// No group for this long: the path is presumed dead; reconnect.
const SILENCE_MS = 1000;
// How long a transport may take to come up before the next is tried.
const CONNECT_MS = 5000;
// Audio held before the first buffer plays (jitter buffer).
const LEAD_S = 0.3;

const query = new URLSearchParams(location.search);
const fragment = new URLSearchParams(location.hash.slice(1));
const broadcast = (query.get("broadcast") || "").replace(/^\/+|\/+$/g, "");
const trackName = query.get("track") || "audio";
const force = (query.get("transport") || "").toLowerCase();
let token = fragment.get("jwt") || "";
const tokenURL = fragment.get("token_url") || "";

const stats = {
	state: "starting",
	broadcast,
	track: trackName,
	transport: "",
	fallback: "", // why the last connect did not use WebTransport
	pinned: "", // the certificate hash the last WebTransport try pinned
	connects: 0,
	reconnects: 0,
	lastReason: "",
	groups: 0,
	frames: 0,
	bytes: 0,
	decoded: 0,
	decoderErrors: 0,
	lastDecoderError: "",
	frameMs: 0,
	gaps: 0,
	longestGapMs: 0,
	missedGroups: 0,
	late: 0,
	underruns: 0,
	heldBack: 0, // decoded while the browser held audio back
	scheduledSeconds: 0,
	playedSeconds: 0,
	latencyMs: 0,
	maxLatencyMs: 0,
	audio: "not started",
};
window.listenStats = stats;

// scrub keeps the token out of any message the page shows.
function scrub(s) {
	s = String(s);
	return token ? s.split(token).join("…") : s;
}

function message(err) {
	return scrub(err && err.message ? err.message : err);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// within resolves like p, or rejects with Error(what) after ms.
function within(p, ms, what) {
	let timer;
	const t = new Promise((_, reject) => {
		timer = setTimeout(() => reject(new Error(what)), ms);
	});
	return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

function hexBytes(hex) {
	hex = hex.trim();
	if (!/^([0-9a-fA-F]{2}){32}$/.test(hex)) throw new Error(`certificate hash: not 64 hex digits`);
	stats.pinned = hex.toLowerCase();
	const out = new Uint8Array(32);
	for (let i = 0; i < 32; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
	return out;
}

function closeReason(info, goingAway) {
	const code = info && info.closeCode;
	if (code === goingAway || code === GOING_AWAY_CODE) return "going-away";
	if (code === TOKEN_EXPIRED_CODE) return "token expired";
	return `closed by the relay (code ${code ?? "none"})${info && info.reason ? `: ${scrub(info.reason)}` : ""}`;
}

// sessionURL is the relay's root on this page's host, with the token.
function sessionURL(protocol) {
	const u = new URL("/", location.href);
	u.protocol = protocol;
	if (token) u.searchParams.set("jwt", token);
	return u;
}

// label is the URL handed to @moq/lite, which only names the session with
// it: no token.
const label = new URL("/", location.href);

async function certificateHashes() {
	const resp = await fetch("/certificate.sha256", { cache: "no-store" });
	if (!resp.ok) throw new Error(`certificate hash: HTTP ${resp.status}`);
	return [{ algorithm: "sha-256", value: hexBytes(await resp.text()) }];
}

async function openWebTransport(hashes) {
	const opts = { allowPooling: false, congestionControl: "low-latency", protocols: ["moql"] };
	if (hashes) opts.serverCertificateHashes = hashes;
	const wt = new WebTransport(sessionURL("https:"), opts);
	wt.closed.catch(() => {});
	try {
		await within(wt.ready, CONNECT_MS, `no handshake within ${CONNECT_MS / 1000} s`);
	} catch (err) {
		wt.close();
		throw err;
	}
	return wt;
}

async function connectWebTransport() {
	let wt;
	if (location.protocol === "https:") {
		// A certificate the browser trusts first; else the relay's own
		// short-lived one, pinned by its hash.
		try {
			wt = await openWebTransport();
		} catch {
			wt = await openWebTransport(await certificateHashes());
		}
	} else {
		wt = await openWebTransport(await certificateHashes());
	}
	const conn = await within(Moq.Connection.connect(label, { transport: wt }), CONNECT_MS, "moq-lite setup timed out");
	const closed = wt.closed.then(
		(info) => closeReason(info, GOING_AWAY_CODE),
		(err) => `WebTransport closed: ${message(err)}`,
	);
	return { conn, transport: "WebTransport", closed, close: () => wt.close() };
}

// onLoopback says the page came from this machine (an SSH tunnel's
// end): a cleartext WebSocket to it never crosses a network.
function onLoopback() {
	const h = location.hostname.replace(/^\[|\]$/g, "").toLowerCase();
	return h === "localhost" || h.endsWith(".localhost") || /^127\.\d+\.\d+\.\d+$/.test(h) || h === "::1";
}

// webSocketProtocol is wss: for a page over https:, and for a token on a
// page over http: from another host: a token never goes over a
// cleartext transport across a network (the relay answers TLS on the
// same port; the browser must accept its certificate). ws: otherwise.
function webSocketProtocol() {
	if (location.protocol === "https:" || (token && !onLoopback())) return "wss:";
	return "ws:";
}

async function connectWebSocket() {
	const protocol = webSocketProtocol();
	const ws = new QMux(sessionURL(protocol));
	ws.closed.catch(() => {});
	try {
		await within(ws.ready, CONNECT_MS, `not open within ${CONNECT_MS / 1000} s`);
	} catch (err) {
		ws.close();
		throw err;
	}
	const conn = await within(Moq.Connection.connect(label, { transport: ws }), CONNECT_MS, "moq-lite setup timed out");
	const closed = ws.closed.then(
		(info) => closeReason(info, WEBSOCKET_GOING_AWAY),
		(err) => `WebSocket closed: ${message(err)}`,
	);
	return { conn, transport: "WebSocket", closed, close: () => ws.close() };
}

// freshToken asks the page's hook, or fetches #token_url=, for the token
// of the next connection.
async function freshToken() {
	if (typeof window.listenTokenSource === "function") {
		token = String((await window.listenTokenSource()) || "").trim();
	} else if (tokenURL) {
		const u = new URL(tokenURL, location.href);
		if (u.origin !== location.origin) throw new Error("token_url: not on this page's origin");
		const resp = await fetch(u, { cache: "no-store", credentials: "same-origin" });
		if (!resp.ok) throw new Error(`token_url: HTTP ${resp.status}`);
		token = (await resp.text()).trim();
	}
}

async function connect() {
	await freshToken();
	const failures = [];
	if (force !== "websocket") {
		if (!globalThis.WebTransport) {
			failures.push("WebTransport: not supported by this browser");
		} else {
			try {
				const s = await connectWebTransport();
				stats.fallback = "";
				return s;
			} catch (err) {
				failures.push(`WebTransport: ${message(err)}`);
			}
		}
	}
	if (force !== "webtransport") {
		try {
			const s = await connectWebSocket();
			stats.fallback = failures.join("; ");
			return s;
		} catch (err) {
			const clear = location.protocol !== "https:" && webSocketProtocol() === "wss:";
			failures.push(`WebSocket${clear ? " (wss:, as the token never goes in clear: open the page over https:// or through an SSH tunnel)" : ""}: ${message(err)}`);
		}
	}
	throw new Error(failures.join("; "));
}

// --- Opus ---------------------------------------------------------------

// opusDurationMs is a packet's duration from its TOC byte (RFC 6716 3.1).
function opusDurationMs(p) {
	if (p.length < 1) return 0;
	const config = p[0] >> 3;
	let size;
	if (config < 12) size = [10, 20, 40, 60][config & 3];
	else if (config < 16) size = [10, 20][config & 1];
	else size = [2.5, 5, 10, 20][config & 3];
	switch (p[0] & 3) {
		case 0:
			return size;
		case 1:
		case 2:
			return 2 * size;
		default:
			return p.length < 2 ? 0 : (p[1] & 0x3f) * size;
	}
}

let audioCtx;
let playAt = 0;
const arrivals = new Map(); // chunk timestamp (µs) -> arrival (performance.now)

function audio() {
	if (!audioCtx) {
		audioCtx = new AudioContext({ latencyHint: "interactive", sampleRate: 48000 });
		audioCtx.onstatechange = () => {
			stats.audio = audioCtx.state;
		};
		stats.audio = audioCtx.state;
	}
	if (audioCtx.state === "suspended") audioCtx.resume().catch(() => {});
	return audioCtx;
}

function play(data) {
	const arrival = arrivals.get(data.timestamp);
	arrivals.delete(data.timestamp);
	const c = audio();
	const n = data.numberOfFrames;
	const buf = c.createBuffer(data.numberOfChannels, n, data.sampleRate);
	for (let ch = 0; ch < data.numberOfChannels; ch++) {
		const plane = new Float32Array(n);
		data.copyTo(plane, { planeIndex: ch, format: "f32-planar" });
		buf.copyToChannel(plane, ch);
	}
	data.close();
	stats.decoded++;
	if (c.state !== "running") {
		// Held back (autoplay, until a click): nothing to queue up for later.
		stats.heldBack++;
		return;
	}
	const now = c.currentTime;
	if (playAt < now + 0.005) {
		// Ran dry (or first buffer): start again one lead ahead.
		if (stats.scheduledSeconds > 0) stats.underruns++;
		playAt = now + LEAD_S;
	}
	const src = c.createBufferSource();
	src.buffer = buf;
	src.connect(c.destination);
	src.start(playAt);
	const d = buf.duration;
	src.onended = () => {
		stats.playedSeconds += d;
	};
	if (arrival !== undefined) {
		// From the packet's arrival to its first sample leaving the speaker.
		const out = (c.outputLatency || c.baseLatency || 0) * 1000;
		stats.latencyMs = Math.round((playAt - now) * 1000 + (performance.now() - arrival) + out);
		stats.maxLatencyMs = Math.max(stats.maxLatencyMs, stats.latencyMs);
	}
	playAt += d;
	stats.scheduledSeconds += d;
}

let decoder;
let decoderChannels = 0;
let chunkTime = 0; // µs, the next chunk's timestamp

function decoderFor(channels) {
	if (decoder && decoder.state === "configured" && decoderChannels === channels) return decoder;
	if (decoder && decoder.state !== "closed") decoder.close();
	decoder = new AudioDecoder({
		output: play,
		error: (err) => {
			stats.decoderErrors++;
			stats.lastDecoderError = message(err);
			decoder = undefined;
			arrivals.clear(); // what it held is gone
		},
	});
	decoder.configure({ codec: "opus", sampleRate: 48000, numberOfChannels: channels });
	decoderChannels = channels;
	return decoder;
}

let lastArrival = 0;
let lastFrameMs = 0;

// arrived counts a frame as it comes off the network: the gaps are
// measured here, in arrival order.
function arrived(packet) {
	const t = performance.now();
	stats.frames++;
	stats.bytes += packet.length;
	const ms = opusDurationMs(packet);
	stats.frameMs = ms;
	if (lastArrival) {
		const gap = t - lastArrival;
		stats.longestGapMs = Math.max(stats.longestGapMs, Math.round(gap));
		if (gap > 2 * (lastFrameMs || ms)) stats.gaps++;
	}
	lastArrival = t;
	lastFrameMs = ms;
	return t;
}

function decode(packet, arrival) {
	const ts = chunkTime;
	chunkTime += Math.round(opusDurationMs(packet) * 1000);
	arrivals.set(ts, arrival);
	try {
		const stereo = packet.length > 0 && (packet[0] & 4) !== 0;
		decoderFor(stereo ? 2 : 1).decode(new EncodedAudioChunk({ type: "key", timestamp: ts, data: packet }));
	} catch (err) {
		stats.decoderErrors++;
		stats.lastDecoderError = message(err);
		arrivals.delete(ts);
	}
}

// Groups are decoded in sequence order. Each group comes on its own
// stream, so one can overtake the one before it: a group after a hole
// waits up to HOLE_MS for the missing one, which is then counted missed
// (and dropped if it still comes: late).
const HOLE_MS = 150;
const pending = new Map(); // sequence -> [{packet, arrival}]
let expect = -1; // the next sequence to decode
let holeSince = 0;

function deliver(seq, frames, firstOfSession) {
	if (expect >= 0 && seq < expect) {
		if (!firstOfSession) {
			stats.late++;
			return;
		}
		// A new session whose publisher counts from lower down: it
		// restarted. Start over from here.
		pending.clear();
		expect = -1;
	}
	pending.set(seq, frames);
	flush();
}

function flush() {
	for (;;) {
		if (pending.size === 0) {
			holeSince = 0;
			return;
		}
		const first = Math.min(...pending.keys());
		if (expect < 0) expect = first;
		const frames = pending.get(expect);
		if (frames) {
			pending.delete(expect);
			expect++;
			holeSince = 0;
			for (const f of frames) decode(f.packet, f.arrival);
			continue;
		}
		const now = performance.now();
		if (!holeSince) holeSince = now;
		if (now - holeSince < HOLE_MS) return;
		stats.missedGroups += first - expect;
		expect = first;
		holeSince = 0;
	}
}

setInterval(flush, 30);

// --- the session --------------------------------------------------------

// listen subscribes on one session and plays until it ends; it returns
// (or throws) the reason to reconnect.
async function listen(s) {
	const dead = s.closed.then((reason) => {
		throw new Error(reason);
	});
	dead.catch(() => {});
	const path = Moq.Path.from(broadcast);
	stats.state = "waiting for the broadcast";
	const announced = s.conn.announced(path);
	for (;;) {
		const a = await Promise.race([announced.next(), dead]);
		if (!a) throw new Error("announcements ended");
		if (a.active && String(a.path) === String(path)) break;
	}
	const track = s.conn.consume(path).subscribe(trackName, 0);
	stats.state = "subscribed";
	let firstOfSession = true;
	for (;;) {
		const group = await Promise.race([within(track.nextGroup(), SILENCE_MS, "silent"), dead]);
		if (!group) return "the broadcast ended";
		stats.groups++;
		stats.state = "playing";
		const frames = [];
		for (;;) {
			const packet = await Promise.race([within(group.readFrame(), SILENCE_MS, "silent"), dead]);
			if (!packet) break;
			frames.push({ packet, arrival: arrived(packet) });
		}
		deliver(group.sequence, frames, firstOfSession);
		firstOfSession = false;
	}
}

async function run() {
	if (!broadcast) {
		stats.state = "no broadcast: open /listen?broadcast=NAME";
		return;
	}
	let backoff = 250;
	for (;;) {
		let s;
		let reason;
		const before = stats.frames;
		try {
			stats.state = "connecting";
			s = await connect();
			stats.connects++;
			stats.transport = s.transport;
			reason = await listen(s);
		} catch (err) {
			reason = message(err);
			if (s) {
				// A closing session resets its streams, which may fail a
				// read before the close itself arrives: the session's own
				// reason (going-away) wins when it comes within moments.
				reason = await Promise.race([s.closed, sleep(250).then(() => reason)]);
			}
		} finally {
			if (s) {
				try {
					s.conn.close();
				} catch {
					// already closed
				}
				s.close();
			}
		}
		stats.lastReason = reason;
		stats.reconnects++;
		// An expired token: back at once with a fresh one.
		backoff = reason === "token expired" ? 0 : stats.frames > before ? 250 : Math.min(backoff * 2, 8000);
		stats.state = `reconnecting in ${(backoff / 1000).toFixed(1)} s (${reason})`;
		await sleep(backoff);
	}
}

// --- the page -----------------------------------------------------------

const rows = [
	["state", () => stats.state],
	["transport", () => (stats.transport || "none yet") + (stats.fallback ? ` (${stats.fallback})` : "")],
	["connects", () => `${stats.connects} (last reason to reconnect: ${stats.lastReason || "none"})`],
	["groups received", () => `${stats.groups} (${stats.missedGroups} missed, ${stats.late} too late)`],
	["frames", () => `${stats.frames} (${stats.frameMs} ms each, ${(stats.bytes / 1024).toFixed(1)} KiB)`],
	["decoded / decoder errors", () => `${stats.decoded} / ${stats.decoderErrors}${stats.lastDecoderError ? ` (${stats.lastDecoderError})` : ""}`],
	["gaps (> 2 frame intervals)", () => `${stats.gaps} (longest between frames: ${stats.longestGapMs} ms)`],
	["underruns", () => String(stats.underruns)],
	["played", () => `${stats.playedSeconds.toFixed(1)} s (audio ${stats.audio}${stats.heldBack ? `, ${stats.heldBack} packets held back` : ""})`],
	["latency (arrival to speaker)", () => `${stats.latencyMs} ms (max ${stats.maxLatencyMs} ms)`],
];

function render() {
	const dl = document.getElementById("stats");
	if (!dl) return;
	if (!dl.childElementCount) {
		for (const [name] of rows) {
			const dt = document.createElement("dt");
			dt.textContent = name;
			dl.append(dt, document.createElement("dd"));
		}
	}
	const dds = dl.querySelectorAll("dd");
	rows.forEach(([, value], i) => {
		dds[i].textContent = value();
	});
	const btn = document.getElementById("play");
	if (btn) btn.hidden = !(audioCtx && audioCtx.state === "suspended");
}

function start() {
	const title = document.getElementById("title");
	if (title) title.textContent = broadcast ? `Listening to ${broadcast}` : "Listen";
	document.title = broadcast ? `listen: ${broadcast}` : "listen";
	const where = document.getElementById("where");
	if (where) where.textContent = `${location.host}, track ${trackName}`;
	const btn = document.getElementById("play");
	if (btn) btn.onclick = () => audio();
	// The audio output now, not at the first packet: opening it can hold
	// the page up for a while (seconds in a headless browser), which would
	// stall the first packets behind it.
	const c = audio();
	render();
	setInterval(render, 250);
	// Give the audio output a moment to start before the first packet
	// (packets decoded while it is not running are not queued up); where
	// the browser holds audio back until a click, connect anyway.
	const running = new Promise((resolve) => {
		const check = () => c.state === "running" && resolve();
		c.addEventListener("statechange", check);
		check();
	});
	Promise.race([running, sleep(2000)]).then(run);
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
else start();
