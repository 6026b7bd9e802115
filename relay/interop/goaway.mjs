// goaway.mjs: what an @moq/lite 0.2.2 subscriber sees when the relay
// closes its session with going-away (code 0x10; over WebSocket, the qmux
// CLOSE frame then status 1001). It subscribes to --track of --name, and
// once --groups groups came prints "receiving"; then it waits for the end
// and prints "closed" with how the connection's `closed` promise settled
// and how the track ended, and the milliseconds from the last group to
// each. With --reload it connects through Moq.Connection.Reload (the
// library's own reconnect loop) instead, and prints "reconnected" if a
// second connection is established within --wait ms, else
// "not-reconnected".
import { arg, result } from "./setup.mjs";
import * as Moq from "@moq/lite";

const url = new URL(arg("url"));
const name = arg("name");
const trackName = arg("track", "audio");
const groups = Number(arg("groups", "5"));
const reload = process.argv.includes("--reload");
const wait = Number(arg("wait", "8000"));

async function waitAnnounced(conn) {
	const announced = conn.announced(Moq.Path.empty());
	for (;;) {
		const a = await announced.next();
		if (!a) throw new Error("announcements ended before the broadcast appeared");
		if (a.active && a.path === name) return;
	}
}

// listen subscribes on conn and reads groups; it returns when the track
// ends, with when the last group came.
async function listen(conn, onReceiving) {
	await waitAnnounced(conn);
	const track = conn.consume(Moq.Path.from(name)).subscribe(trackName, 0);
	let n = 0;
	let last = performance.now();
	for (;;) {
		let group;
		try {
			group = await track.nextGroup();
		} catch (err) {
			return { last, end: `error: ${err?.message ?? err}` };
		}
		if (!group) return { last, end: "ended" };
		while (await group.readFrame().catch(() => undefined)) {}
		last = performance.now();
		if (++n === groups) onReceiving();
	}
}

if (!reload) {
	const conn = await Moq.Connection.connect(url);
	result({ event: "connected", version: conn.version });
	let closedAt;
	let closedHow;
	conn.closed.then(
		(v) => {
			closedAt = performance.now();
			closedHow = `resolved ${JSON.stringify(v ?? null)}`;
		},
		(err) => {
			closedAt = performance.now();
			closedHow = `rejected: ${err?.message ?? err}`;
		},
	);
	const { last, end } = await listen(conn, () => result({ event: "receiving" }));
	const trackEndAt = performance.now();
	// The connection's promise settles around the same time; give it 10 s.
	for (let i = 0; i < 1000 && closedAt === undefined; i++) await new Promise((r) => setTimeout(r, 10));
	result({
		event: "closed",
		closed: closedHow ?? "unsettled after 10 s",
		track_end: end,
		closed_ms: closedAt === undefined ? -1 : Math.round(closedAt - last),
		end_ms: Math.round(trackEndAt - last),
	});
	process.exit(0);
}

const r = new Moq.Connection.Reload({ url, enabled: true });
let established = 0;
let receivingSent = false;
r.established.subscribe((conn) => {
	if (!conn) return;
	established++;
	result({ event: established === 1 ? "connected" : "reconnected", version: conn.version });
	if (established > 1) process.exit(0);
	listen(conn, () => {
		if (!receivingSent) result({ event: "receiving" });
		receivingSent = true;
	}).then(({ last, end }) => {
		setTimeout(() => {
			result({ event: "not-reconnected", track_end: end, closed: `status ${r.status.peek()}`, end_ms: Math.round(performance.now() - last) });
			process.exit(0);
		}, wait);
	});
});
