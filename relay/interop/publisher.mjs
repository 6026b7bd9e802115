// publisher.mjs: an @moq/lite 0.2.2 publisher. It announces --name, waits
// for the relay to request --track, waits for a line "go" on stdin, then
// writes --groups groups of --frames pattern frames of --size bytes, one
// group every --interval ms, and exits 0. With --pause-at K it stops after
// group K-1, prints a "paused" result and waits for a line "resume".
import { arg, pattern, result } from "./setup.mjs";
import * as Moq from "@moq/lite";
import * as readline from "node:readline";

const url = new URL(arg("url"));
const name = arg("name");
const trackName = arg("track", "audio");
const groups = Number(arg("groups", "20"));
const frames = Number(arg("frames", "3"));
const size = Number(arg("size", "200"));
const interval = Number(arg("interval", "20"));

const pauseAt = Number(arg("pause-at", "-1"));

const lines = readline.createInterface({ input: process.stdin });
const waiting = new Map();
lines.on("line", (line) => {
	const resolve = waiting.get(line.trim());
	if (resolve) resolve();
});
const command = (word) => new Promise((resolve) => waiting.set(word, resolve));
const go = command("go");
const resume = command("resume");

const conn = await Moq.Connection.connect(url);
result({ event: "connected", version: conn.version });
const broadcast = new Moq.Broadcast();
conn.publish(Moq.Path.from(name), broadcast);

let track;
for (;;) {
	const req = await broadcast.requested();
	if (!req) throw new Error("broadcast closed before any request");
	if (req.track.name === trackName) {
		track = req.track;
		break;
	}
	req.track.close(new Error("no such track"));
}
result({ event: "requested", track: track.name });
await go;

for (let g = 0; g < groups; g++) {
	if (g === pauseAt) {
		result({ event: "paused", groups: g });
		await resume;
	}
	const group = track.appendGroup();
	if (group.sequence !== g) throw new Error(`group sequence ${group.sequence}, want ${g}`);
	for (let f = 0; f < frames; f++) {
		group.writeFrame(pattern(g, f, size));
	}
	group.close();
	await new Promise((r) => setTimeout(r, interval));
}
result({ event: "done", groups, frames: groups * frames });
// Give the last group time to leave before closing.
await new Promise((r) => setTimeout(r, 500));
track.close();
broadcast.close();
conn.close();
lines.close();
process.exit(0);
