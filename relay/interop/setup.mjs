// Node 20 lacks what @moq/lite 0.2.2 expects of a browser: a global
// WebSocket (the `ws` package), Promise.withResolvers and
// Set.prototype.difference. Import this module before @moq/lite.
import { WebSocket } from "ws";

if (!globalThis.WebSocket) {
	globalThis.WebSocket = WebSocket;
}

if (!Promise.withResolvers) {
	Promise.withResolvers = function withResolvers() {
		let resolve;
		let reject;
		const promise = new this((res, rej) => {
			resolve = res;
			reject = rej;
		});
		return { promise, resolve, reject };
	};
}

if (!Set.prototype.difference) {
	Object.defineProperty(Set.prototype, "difference", {
		value: function difference(other) {
			const out = new Set();
			for (const v of this) {
				if (!other.has(v)) out.add(v);
			}
			return out;
		},
		writable: true,
		configurable: true,
	});
}

// @moq/lite logs connection chatter with console.debug/log/warn; keep stdout
// for results unless MOQ_DEBUG is set.
if (!process.env.MOQ_DEBUG) {
	console.debug = () => {};
	console.log = () => {};
	console.warn = (...args) => process.stderr.write(`${args.join(" ")}\n`);
}

// pattern returns frame f of group g, the same bytes as Go's client.Pattern.
export function pattern(g, f, size) {
	const head = new TextEncoder().encode(`g${g} f${f} `);
	const out = new Uint8Array(Math.max(size, head.length));
	out.set(head);
	for (let i = head.length; i < size; i++) {
		out[i] = 97 + ((g * 7 + f * 13 + i) % 26);
	}
	return out;
}

// result prints one machine-readable line for the Go test.
export function result(obj) {
	process.stdout.write(`RESULT ${JSON.stringify(obj)}\n`);
}

export function arg(name, fallback) {
	const i = process.argv.indexOf(`--${name}`);
	if (i >= 0 && i + 1 < process.argv.length) return process.argv[i + 1];
	if (fallback === undefined) throw new Error(`missing --${name}`);
	return fallback;
}
