// build.mjs: bundles src/listen.js with @moq/lite into one ES module for
// the relay's /listen page (node build.mjs [OUTFILE]; default
// dist/listen.js, which is committed and embedded by the relay). The same
// pinned esbuild and package-lock.json give the same bytes: make web-check
// rebuilds into a temporary file and compares.
import * as esbuild from "esbuild";

const outfile = process.argv[2] || "dist/listen.js";
await esbuild.build({
	entryPoints: ["src/listen.js"],
	bundle: true,
	format: "esm",
	target: "es2022",
	minify: true,
	legalComments: "eof",
	charset: "utf8",
	logLevel: "warning",
	outfile,
});
