#!/usr/bin/env node
// Build a JavaScript weir handler into a component:
//
//   node guest-sdk/js/build.mjs app.js -o app.wasm
//
// `app.js` is an ES module whose default export is the handler (an object
// or class with onUpgrade/onOpen/onMessage/onClose, see src/index.js). This
// script writes a small entry module that imports it, wraps it with
// createHandler() and exports it as `weir:gateway/handler`, then runs
// componentize-qjs (QuickJS, pinned in package.json; `npm ci` in this
// folder installs it) against wit/weir.wit with the synchronous runtime
// (the gateway does not enable component-model async).
//
// Options: -o OUT (default: app.wasm next to app.js), --minify.

import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve, basename } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
// The WIT next to the SDK (a project made by `weir new --lang js`), else
// the repository's weir:gateway 0.3.0 (this SDK has no I/O yet; the
// gateway runs 0.3.0 components beside 0.4.0 ones).
const wit = existsSync(join(here, "wit")) ? join(here, "wit") : resolve(here, "../../wit/0.3.0");
const tool = join(here, "node_modules/.bin/componentize-qjs");

function usage(msg) {
  if (msg) console.error(`build.mjs: ${msg}`);
  console.error("usage: node guest-sdk/js/build.mjs APP.js [-o OUT.wasm] [--minify]");
  process.exit(2);
}

const args = process.argv.slice(2);
let app = null;
let out = null;
const extra = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "-o") out = args[++i];
  else if (args[i] === "--minify") extra.push("--minify");
  else if (args[i].startsWith("-")) usage(`unknown option ${args[i]}`);
  else if (app === null) app = args[i];
  else usage("one handler module at a time");
}
if (!app) usage();
app = resolve(app);
if (!existsSync(app)) usage(`${app} does not exist`);
out = resolve(out || join(dirname(app), `${basename(app, ".js")}.wasm`));
if (!existsSync(tool)) {
  console.error(`build.mjs: ${tool} is missing; run \`npm ci\` in ${here}`);
  process.exit(1);
}

const work = mkdtempSync(join(tmpdir(), "weir-js-"));
try {
  const entry = join(work, "entry.js");
  writeFileSync(
    entry,
    [
      'import host from "weir:gateway/host";',
      `import app from ${JSON.stringify(app)};`,
      `import { createHandler } from ${JSON.stringify(join(here, "src/index.js"))};`,
      "export const handler = createHandler(app, host);",
      "",
    ].join("\n"),
  );
  // Absolute imports resolve under the module root: "/" exposes both the
  // app and the SDK, read-only, during the snapshot.
  const run = spawnSync(
    tool,
    ["--sync", ...extra, "-w", wit, "-n", "gateway-handler", "-j", entry, "--module-root", "/", "-o", out],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  if (run.status !== 0) {
    process.stdout.write(run.stdout || "");
    console.error(`build.mjs: componentize-qjs failed for ${app}`);
    process.exit(run.status || 1);
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
