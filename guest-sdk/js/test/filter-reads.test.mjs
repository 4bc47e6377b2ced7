// The JavaScript SDK's proxy filter hook and realtime reads, driven by its
// harness (src/testing.mjs) under node's test runner, with the fixtures
// host/tests/polyglot_filters.rs runs against a real gateway:
// examples/js/fixtures/moderate.js (onProxyMessage) and rt-probe.js
// (await conn.history / conn.presence / route.history).
// Run: node --test guest-sdk/js/test/

import { test } from "node:test";
import assert from "node:assert/strict";
import { TestRoute } from "../src/testing.mjs";
import { MAX_PENDING_READS } from "../src/index.js";

const fixture = (name) => new URL(`../../../examples/js/fixtures/${name}`, import.meta.url);

test("a filter passes, rewrites and drops both ways, in order", async () => {
  const route = await TestRoute.load(fixture("moderate.js"), "/p");
  const c = route.connect("/p");
  route.proxyMessage(c, "to-upstream", "hello");
  route.proxyMessage(c, "to-upstream", "buy spam");
  route.proxyMessage(c, "to-client", "darn it, darn");
  route.proxyMessage(c, "to-client", new Uint8Array([0, 0xff]));
  assert.deepEqual(route.forwarded(c), [
    ["to-upstream", "hello"],
    ["to-client", "d**n it, d**n"],
    ["to-client", new Uint8Array([0, 0xff])],
  ]);
  assert.deepEqual(route.received(c), [], "a filter's verdicts are forwards, not sends");
  assert.deepEqual(route.forwarded(c), [], "forwarded() drains");
});

test("a filter's own message and its state: conn.forward and conn.state", async () => {
  const route = await TestRoute.load(fixture("moderate.js"), "/p");
  const c = route.connect("/p");
  route.proxyMessage(c, "to-client", "spam 1");
  route.proxyMessage(c, "to-upstream", "spam 2");
  assert.equal(route.state(c), 2, "the drop count is saved as the connection's state");
  route.replaceInstance();
  route.proxyMessage(c, "to-upstream", "!dropped");
  assert.deepEqual(route.forwarded(c), [["to-client", "dropped 2"]], "a fresh instance restores it");
});

test("Verdict.close closes the client with its code; nothing goes on", async () => {
  const route = await TestRoute.load(fixture("moderate.js"), "/p");
  const c = route.connect("/p");
  route.proxyMessage(c, "to-client", "!kick");
  assert.deepEqual(route.forwarded(c), [["to-client", "!kick"]], "only the client's !kick closes");
  route.proxyMessage(c, "to-upstream", "!kick");
  assert.deepEqual(route.forwarded(c), []);
  assert.deepEqual(route.closedWith(c), { code: 1008, reason: "kicked by the moderator" });
  assert.ok(!route.isOpen(c));
});

test("a filter that throws, returns a non-verdict or a promise closes only its connection 1011", async () => {
  const route = await TestRoute.load(new URL("./handlers/filters.js", import.meta.url), "/f");
  const ok = route.connect("/f");
  for (const bad of ["throw", "number", "async"]) {
    const c = route.connect("/f");
    route.proxyMessage(c, "to-upstream", bad);
    assert.deepEqual(route.forwarded(c), [], bad);
    assert.deepEqual(route.closedWith(c), { code: 1011, reason: "handler error" }, bad);
  }
  assert.ok(route.logs.some(([l, m]) => l === "error" && m.includes("onProxyMessage returned a promise")));
  assert.ok(route.logs.some(([l, m]) => l === "error" && m.includes("returned 42, not a verdict")));
  route.proxyMessage(ok, "to-upstream", "fine");
  route.proxyMessage(ok, "to-client", "swap");
  route.proxyMessage(ok, "to-client", "bytes");
  assert.deepEqual(route.forwarded(ok), [
    ["to-upstream", "fine"],
    ["to-client", "swapped"],
    ["to-client", new Uint8Array([1, 2, 3])],
  ]);
});

test("a handler without onProxyMessage passes every message on unchanged", async () => {
  const route = await TestRoute.load(new URL("./handlers/async.js", import.meta.url), "/a");
  const c = route.connect("/a");
  route.proxyMessage(c, "to-client", "as is");
  assert.deepEqual(route.forwarded(c), [["to-client", "as is"]]);
});

test("await conn.history resolves with the position and publications, in a later batch", async () => {
  const route = await TestRoute.load(fixture("rt-probe.js"), "/g");
  const c = route.connect("/g");
  route.sendText(c, "newest chat:room 2");
  const [read] = route.reads();
  assert.deepEqual(
    { ...read, tag: 0 },
    { conn: c, tag: 0, kind: "history", channel: "chat:room", limit: 2, newest: true },
  );
  assert.deepEqual(route.received(c), [], "nothing until the answer comes");
  route.answerHistory(read.tag, { offset: 9, epoch: "ep", publications: [[9, '"b"'], [8, { n: 1 }]] });
  assert.deepEqual(route.json(c), [
    { history: { offset: 9, epoch: "ep", publications: [{ offset: 9, data: "b" }, { offset: 8, data: { n: 1 } }] } },
  ]);
  assert.deepEqual(route.reads(), []);
});

test("await conn.presence resolves with the members; a failed read rejects with its reason", async () => {
  const route = await TestRoute.load(fixture("rt-probe.js"), "/g");
  const c = route.connect("/g");
  route.sendText(c, "presence chat:room");
  route.answerPresence(route.reads()[0].tag, [
    { client: "c1", user: "u1", info: { n: 1 } },
    { client: "c2", user: "" },
  ]);
  assert.deepEqual(route.json(c), [
    { presence: [{ client: "c1", user: "u1", info: { n: 1 } }, { client: "c2", user: "", info: null }] },
  ]);
  const reasons = ["bad-channel", "history-off", "presence-off", "unavailable", "busy", "not-realtime"];
  for (const reason of reasons) {
    route.sendText(c, reason === "presence-off" ? "presence chat:x" : "history chat:x 5");
    route.failRead(route.reads()[0].tag, reason);
    const [answer] = route.json(c);
    assert.deepEqual(Object.values(answer)[0], { error: reason });
  }
});

test("route.history is the route's: conn 0, answered after the connection closed", async () => {
  const route = await TestRoute.load(fixture("rt-probe.js"), "/g");
  const c = route.connect("/g");
  const d = route.connect("/g");
  route.sendText(c, "route-history chat:room");
  route.sendText(d, "history chat:room 3");
  const [mine, its] = route.reads();
  assert.equal(mine.conn, 0);
  assert.equal(mine.limit, 100);
  assert.equal(its.conn, d);
  route.close(d);
  assert.deepEqual(route.reads().map((r) => r.tag), [mine.tag], "a connection's read ends with it");
  route.answerHistory(mine.tag, { offset: 0, epoch: "e" });
  assert.deepEqual(route.json(c), [{ history: { offset: 0, epoch: "e", publications: [] } }]);
});

test("reads are bounded per instance and checked before they are sent", async () => {
  const route = await TestRoute.load(new URL("./handlers/filters.js", import.meta.url), "/f");
  const c = route.connect("/f");
  route.sendText(c, "flood");
  assert.equal(route.reads().length, MAX_PENDING_READS);
  assert.deepEqual(route.texts(c), [`busy ${MAX_PENDING_READS}`, "bad-channel"]);
  route.failRead(route.reads()[0].tag, "unavailable");
  route.sendText(c, "one more");
  assert.equal(route.reads().length, MAX_PENDING_READS, "a settled read frees its place");
});
