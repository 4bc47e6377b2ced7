// src/transform.mjs: the rewrite build.mjs and the harness apply to a
// handler's modules. Run: node --test guest-sdk/js/test/

import { test } from "node:test";
import assert from "node:assert/strict";
import { transformModule } from "../src/transform.mjs";
import { WeirPromise, runAsync, drainMicrotasks } from "../src/promise.js";

/** Evaluate rewritten `source` (a function body) with the SDK's globals in scope. */
function run(source) {
  const names = ["__weirAsync", "__weirPromise", "__weirSetTimeout"];
  const f = new Function(...names, transformModule(source));
  f(runAsync, WeirPromise, (fn) => WeirPromise.resolve().then(fn));
}

test("every async form becomes a generator driven by the SDK", () => {
  const out = transformModule(`
    export default { async m(a) { return await a; }, asyncKey: async (x) => await x };
    class K { static async s() { await 1; } }
    async function f() { const g = async () => ({ v: await 2 }); return g; }
    const o = { Promise, p: Promise.resolve(1), fetch };`);
  assert.doesNotMatch(out, /\basync\b(?!Key)/, out);
  assert.doesNotMatch(out, /\bawait\b/, out);
  assert.match(out, /asyncKey:/, "a key that starts with async is kept");
  assert.match(out, /\{ Promise: __weirPromise, p: __weirPromise\.resolve\(1\), fetch: __weirFetch \}/, out);
});

test("the rewritten code keeps await's order and values", () => {
  const seen = [];
  globalThis.__seen = seen;
  run(`
    const seen = globalThis.__seen;
    async function inner(x) { seen.push("inner " + x); return (await x) * 2; }
    const outer = async () => { seen.push("start"); const v = await inner(21); seen.push("got " + v);
      try { await Promise.reject(new Error("no")); } catch (e) { seen.push("caught " + e.message); }
      return v; };
    globalThis.__out = outer();`);
  const r = globalThis.__out;
  delete globalThis.__seen;
  delete globalThis.__out;
  assert.ok(r instanceof WeirPromise);
  assert.deepEqual(seen, ["start", "inner 21"], "the body runs at once up to its first await");
  let value;
  r.then((v) => (value = v));
  drainMicrotasks();
  assert.deepEqual(seen, ["start", "inner 21", "got 42", "caught no"]);
  assert.equal(value, 42);
});

test("forms a generator cannot carry fail the build with the place", () => {
  assert.throws(() => transformModule("async function* g() {}", "h.js"), /h\.js:1:1: an async generator/);
  assert.throws(() => transformModule("async function f(xs) { for await (const x of xs) {} }", "h.js"), /`for await`/);
  assert.throws(() => transformModule("class A extends B { async m() { super.m(); } }", "h.js"), /`super` inside an async method/);
});

test("names the module imports or declares at top level are left alone", () => {
  const out = transformModule(`import { setTimeout } from "./t.js"; function fetch() {} setTimeout(fetch); clearTimeout(1);`);
  assert.match(out, /setTimeout\(fetch\); __weirClearTimeout\(1\)/, out);
});
