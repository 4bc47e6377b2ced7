#!/usr/bin/env node
// Build a JavaScript weir handler into a component:
//
//   node guest-sdk/js/build.mjs app.js -o app.wasm
//
// `app.js` is an ES module whose default export is the handler (an object
// or class with onUpgrade/onOpen/onMessage/onClose, see src/index.js). This
// script copies it, every module it imports by path and the SDK into a
// scratch folder through src/transform.mjs (async functions become
// generators the SDK drives, since componentize-qjs never runs QuickJS's
// job queue in a synchronous call; see src/promise.js), writes a small
// entry module that wraps the handler with createHandler() and exports it
// as `weir:gateway/handler`, then runs componentize-qjs (QuickJS, pinned in
// package.json; `npm ci` in this folder installs it) against
// weir:gateway 0.4.0 with the synchronous runtime (the gateway does not
// enable component-model async). `import ... from "weir-guest"` names the
// SDK.
//
// Options: -o OUT (default: app.wasm next to app.js), --minify, and
// --world 0.3.0 for a component of the world before I/O (no kv import, no
// resume-upgrade; what a gateway without 0.4.0 runs, and what the tests
// use to check that the gateway still runs such components).

import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync, readFileSync, mkdirSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve, basename, isAbsolute } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const tool = join(here, "node_modules/.bin/componentize-qjs");
const sdkSrc = join(here, "src");

function usage(msg) {
  if (msg) console.error(`build.mjs: ${msg}`);
  console.error("usage: node guest-sdk/js/build.mjs APP.js [-o OUT.wasm] [--minify] [--world 0.3.0]");
  process.exit(2);
}

const args = process.argv.slice(2);
let app = null;
let out = null;
let world = "0.4.0";
const extra = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "-o") out = args[++i];
  else if (args[i] === "--world") world = args[++i];
  else if (args[i] === "--minify") extra.push("--minify");
  else if (args[i].startsWith("-")) usage(`unknown option ${args[i]}`);
  else if (app === null) app = args[i];
  else usage("one handler module at a time");
}
if (!app) usage();
app = resolve(app);
if (!existsSync(app)) usage(`${app} does not exist`);
out = resolve(out || join(dirname(app), `${basename(app, ".js")}.wasm`));
if (world !== "0.4.0" && world !== "0.3.0") usage(`no world ${world}: 0.4.0 or 0.3.0`);
// The WIT next to the SDK (a project made by `weir new --lang js`), else
// the repository's.
const wit =
  world === "0.3.0"
    ? existsSync(join(here, "wit/0.3.0")) ? join(here, "wit/0.3.0") : resolve(here, "../../wit/0.3.0")
    : existsSync(join(here, "wit/weir.wit")) ? join(here, "wit/weir.wit") : resolve(here, "../../wit/weir.wit");
if (!existsSync(tool)) {
  console.error(`build.mjs: ${tool} is missing; run \`npm ci\` in ${here}`);
  process.exit(1);
}

const { transformModule, importsOf } = await import("./src/transform.mjs");

/**
 * Copy `file` and every module it imports by path into `work` (same
 * absolute paths below it, so relative imports still meet), through the
 * rewrite; the SDK's own files as they are. `weir-guest` names the SDK.
 */
function mirror(work, file) {
  const seen = new Set();
  const todo = [file];
  while (todo.length > 0) {
    const path = todo.pop();
    if (seen.has(path)) continue;
    seen.add(path);
    let source = readFileSync(path, "utf8");
    const specs = importsOf(source, path);
    // Rewrite `weir-guest` before the rest (positions are the original's).
    for (const s of specs.slice().sort((a, b) => b.start - a.start)) {
      if (s.spec === "weir-guest") {
        source = source.slice(0, s.start) + JSON.stringify(join(work, sdkSrc, "index.js")) + source.slice(s.end);
        todo.push(join(sdkSrc, "index.js"));
      }
    }
    for (const { spec } of specs) {
      if (spec.startsWith("./") || spec.startsWith("../")) todo.push(resolve(dirname(path), spec));
      else if (isAbsolute(spec) && !spec.startsWith(work)) todo.push(spec);
    }
    const ours = path.startsWith(sdkSrc + "/");
    const text = ours ? source : transformModule(source, path);
    mkdirSync(dirname(join(work, path)), { recursive: true });
    writeFileSync(join(work, path), text);
  }
}

const work = mkdtempSync(join(tmpdir(), "weir-js-"));
try {
  try {
    mirror(work, app);
    mirror(work, join(sdkSrc, "index.js"));
  } catch (e) {
    console.error(`build.mjs: ${e.message}`);
    process.exit(1);
  }
  const entry = join(work, "entry.js");
  writeFileSync(
    entry,
    [
      'import host from "weir:gateway/host";',
      world === "0.4.0" ? 'import kv from "weir:gateway/kv";' : "const kv = null;",
      `import app from ${JSON.stringify(join(work, app))};`,
      `import { createHandler } from ${JSON.stringify(join(work, sdkSrc, "index.js"))};`,
      "const weir = createHandler(app, host, kv);",
      "export const handler = { upgrade: weir.upgrade, resumeUpgrade: weir.resumeUpgrade, handle: weir.handle };",
      // 0.4.0's optional `state` interface (world stateful-handler): a
      // deploy checks live connections' state against this version.
      world === "0.4.0" ? "export const state = { checkState: weir.checkState };" : "",
      "",
    ].join("\n"),
  );
  // Absolute imports resolve under the module root: "/" exposes both the
  // app and the SDK, read-only, during the snapshot.
  const run = spawnSync(
    tool,
    ["--sync", ...extra, "-w", wit, "-n", world === "0.4.0" ? "stateful-handler" : "gateway-handler", "-j", entry, "--module-root", "/", "-o", out],
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
