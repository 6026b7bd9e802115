// subscriber.mjs: an @moq/lite 0.2.2 subscriber. It waits for --name to be
// announced, subscribes to --track, and checks that groups 0..--groups-1
// each arrive with --frames frames whose bytes are the expected pattern.
// It prints a RESULT line and exits 0 when all arrived, 1 on any mismatch.
// With --first K (a late joiner) the first group must be K and the groups
// K..--groups-1 must all arrive.
import { arg, pattern, result } from "./setup.mjs";
import * as Moq from "@moq/lite";

const url = new URL(arg("url"));
const name = arg("name");
const trackName = arg("track", "audio");
const groups = Number(arg("groups", "20"));
const frames = Number(arg("frames", "3"));
const size = Number(arg("size", "200"));
const first = Number(arg("first", "0"));

function fail(msg) {
	result({ event: "error", error: msg });
	process.exit(1);
}

function equal(a, b) {
	if (a.length !== b.length) return false;
	for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
	return true;
}

const conn = await Moq.Connection.connect(url);
result({ event: "connected", version: conn.version });
const announced = conn.announced(Moq.Path.empty());
for (;;) {
	const a = await announced.next();
	if (!a) fail("announcements ended before the broadcast appeared");
	if (a.active && a.path === name) break;
}
const broadcast = conn.consume(Moq.Path.from(name));
const track = broadcast.subscribe(trackName, 0);
result({ event: "subscribed" });

const seen = new Set();
let frameCount = 0;
while (seen.size < groups - first) {
	const group = await track.nextGroup();
	if (!group) fail(`track ended after ${seen.size} groups`);
	const g = group.sequence;
	if (seen.size === 0 && g !== first) fail(`first group ${g}, want ${first}`);
	if (seen.has(g)) fail(`group ${g} twice`);
	if (g >= groups || g < first) fail(`unexpected group ${g}`);
	let f = 0;
	for (;;) {
		const frame = await group.readFrame();
		if (!frame) break;
		if (!equal(frame, pattern(g, f, size))) {
			fail(`group ${g} frame ${f}: content mismatch (${new TextDecoder().decode(frame.slice(0, 16))})`);
		}
		f++;
		frameCount++;
	}
	if (f !== frames) fail(`group ${g}: ${f} frames, want ${frames}`);
	seen.add(g);
}
result({ event: "done", groups: seen.size, frames: frameCount, first });
conn.close();
process.exit(0);
