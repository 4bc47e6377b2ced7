// The JavaScript SDK's weir:gateway 0.4.0 I/O, driven by its harness
// (src/testing.mjs) under node's test runner: fetch and Response, async
// hooks resuming in a later batch, timers, kv, deferred upgrades, bounds.
// Run: node --test guest-sdk/js/test/

import { test } from "node:test";
import assert from "node:assert/strict";
import { TestRoute } from "../src/testing.mjs";
import { MAX_PENDING_REQUESTS } from "../src/index.js";

const handler = new URL("./handlers/async.js", import.meta.url);
const load = (options) => TestRoute.load(handler, "/a", options);

test("await fetch resolves in the batch that answers it, with a Response", async () => {
  const route = await load();
  const c = route.connect("/a");
  route.sendText(c, "json pen");
  const [req] = route.requests();
  assert.equal(req.method, "POST");
  assert.equal(req.url, "http://api/item");
  assert.deepEqual(req.headers, [["content-type", "application/json"]]);
  assert.equal(req.text, '{"q":"pen"}');
  assert.equal(req.conn, c, "a fetch inside a hook is the connection's");
  assert.deepEqual(route.received(c), [], "nothing until the answer comes");
  route.respond(req.tag, 201, [["X-Count", "3"]], '{"name":"pen"}');
  assert.deepEqual(route.texts(c), ["201 3 pen"]);
  assert.deepEqual(route.requests(), []);
});

test("a failed fetch rejects with the gateway's reason", async () => {
  const route = await TestRoute.load(new URL("../../../examples/js/fixtures/io-probe.js", import.meta.url), "/io");
  const c = route.connect("/io");
  for (const reason of ["refused", "timeout", "connect", "too-large", "busy", "invalid"]) {
    route.sendText(c, `get ${reason} http://x/`);
    route.fail(route.requests()[0].tag, reason);
    assert.deepEqual(route.texts(c), [`${reason} error ${reason}`]);
  }
});

test("Promise.all over two requests answered out of order", async () => {
  const route = await load();
  const c = route.connect("/a");
  route.sendText(c, "both");
  const [a, b] = route.requests();
  route.respond(b.tag, 200, [], "B");
  assert.deepEqual(route.received(c), []);
  route.respond(a.tag, 200, [], "A");
  assert.deepEqual(route.texts(c), ["A+B"]);
});

test("microtasks run before the next event, timers after", async () => {
  const route = await load();
  const c = route.connect("/a");
  route.sendText(c, "order");
  route.advance(0);
  assert.deepEqual(route.texts(c), ["sync,micro,then"]);
});

test("an async hook that rejects closes only its connection with 1011", async () => {
  const route = await load();
  const c = route.connect("/a");
  const d = route.connect("/a");
  route.sendText(c, "throw-later");
  assert.deepEqual(route.closedWith(c), { code: 1011, reason: "handler error" });
  assert.ok(route.logs.some(([l, m]) => l === "error" && m.includes("Error: later")), JSON.stringify(route.logs));
  route.sendText(d, "hi");
  assert.deepEqual(route.texts(d), ["hi"]);
});

test("an unhandled rejection is logged, the connection goes on", async () => {
  const route = await load();
  const c = route.connect("/a");
  route.sendText(c, "unhandled");
  assert.deepEqual(route.texts(c), ["ok"]);
  assert.ok(route.isOpen(c));
  assert.ok(route.logs.some(([l, m]) => l === "error" && m.includes("unhandled promise rejection") && m.includes("nobody")));
});

test("setInterval re-arms until cleared; a connection's timers end with it", async () => {
  const route = await load();
  const c = route.connect("/a");
  route.sendText(c, "interval");
  route.advance(1000);
  assert.deepEqual(route.texts(c), ["tick 1", "tick 2", "tick 3"]);
  assert.deepEqual(route.timers(), []);
  route.sendText(c, "interval");
  assert.equal(route.timers().length, 1);
  route.close(c);
  assert.deepEqual(route.timers(), [], "the gateway drops a closed connection's timers");
});

test("cleared timers never fire", async () => {
  const route = await TestRoute.load(new URL("../../../examples/js/fixtures/io-probe.js", import.meta.url), "/io");
  const c = route.connect("/io");
  route.sendText(c, "cancelled 5 100");
  assert.deepEqual(route.timers(), []);
  route.advance(1000);
  assert.deepEqual(route.received(c), []);
});

test("a durable timer reaches onTimer in an instance that replaced the one that set it", async () => {
  const route = await load();
  const c = route.connect("/a");
  route.sendText(c, "durable 500");
  const [t] = route.timers();
  assert.equal(t.conn, c);
  assert.deepEqual(route.state(c), { timer: t.tag });
  await route.replaceInstance();
  route.advance(500);
  assert.deepEqual(route.texts(c), ["durable fired"]);
});

test("a route timer set by a callback outlives its instance through onTimer", async () => {
  const route = await TestRoute.load(new URL("../../../examples/js/fixtures/io-probe.js", import.meta.url), "/io");
  const a = route.connect("/io");
  const b = route.connect("/io");
  route.sendText(a, "route-timer 50");
  assert.equal(route.timers()[0].conn, 0);
  await route.replaceInstance();
  route.close(a);
  route.advance(50);
  assert.deepEqual(route.texts(b), ["route-timer"]);
});

test("state changed after an await is saved, and restored by a fresh instance", async () => {
  const route = await TestRoute.load(new URL("../../../examples/js/fixtures/io-probe.js", import.meta.url), "/io");
  const c = route.connect("/io");
  route.sendText(c, "count");
  route.advance(1);
  route.sendText(c, "count");
  route.advance(1);
  assert.deepEqual(route.texts(c), ["1", "2"]);
  assert.deepEqual(route.state(c), { n: 2 });
  await route.replaceInstance();
  route.sendText(c, "count");
  route.advance(1);
  assert.deepEqual(route.texts(c), ["3"]);
});

test("kv: writes land after the batch, with ttl; refusals reach onKvError", async () => {
  const route = await load({ kvMaxKeys: 1 });
  const c = route.connect("/a");
  route.sendText(c, "kv");
  assert.deepEqual(
    route.texts(c),
    ["null null", "refused b max-keys"],
    "this batch's writes are not visible to it; the refusal comes in a later batch",
  );
  assert.deepEqual(route.kv(), { a: "1" }, "b refused: max-keys 1");
  const route2 = await load();
  const d = route2.connect("/a");
  route2.sendText(d, "kv");
  assert.equal(route2.kvGet("b"), '{"x":2}');
  assert.equal(route2.kvExpires("b"), 1000);
  route2.advance(1000);
  assert.equal(route2.kvGet("b"), null, "expired");
});

test("a route fetch is answered to the route, whatever connection closes", async () => {
  const route = await load();
  const a = route.connect("/a");
  const b = route.connect("/a");
  route.sendText(a, "route-fetch");
  const [req] = route.requests();
  assert.equal(req.conn, 0);
  route.close(a);
  route.respond(req.tag, 200, [], "news");
  assert.deepEqual(route.texts(b), ["news"]);
});

test("pending requests are bounded: past the cap fetch rejects as busy", async () => {
  const route = await load();
  const c = route.connect("/a");
  route.sendText(c, "flood");
  assert.equal(route.requests().length, MAX_PENDING_REQUESTS);
  for (const r of route.requests()) route.fail(r.tag, "timeout");
  assert.deepEqual(route.texts(c), [
    [...Array(MAX_PENDING_REQUESTS).fill("timeout"), "busy", "busy"].join(","),
  ]);
});

test("deferred upgrade: accepted with state and protocol after the request", async () => {
  const route = await load();
  const r = route.upgradeAnswering(
    { target: "/a?token=t1", headers: [["sec-websocket-protocol", "v2, v1"]] },
    (sent) => {
      assert.equal(sent.url, "http://auth/check?token=t1");
      assert.deepEqual(sent.headers, [["authorization", "Bearer x"]]);
      return { status: 200, body: '{"name":"ann"}' };
    },
  );
  assert.equal(r.protocol, "v2");
  assert.deepEqual(route.state(r.id), { user: "ann" });
});

test("deferred upgrade: refused by status, by error, and one request only", async () => {
  const route = await load();
  assert.deepEqual(route.upgradeAnswering({ target: "/a?token=bad" }, () => ({ status: 403 })), { status: 401 });
  assert.deepEqual(route.upgradeAnswering({ target: "/a?token=x" }, () => ({ error: "timeout" })), { status: 500 });
  assert.ok(route.logs.some(([, m]) => m.includes("fetch failed: timeout")), "a rejected onUpgrade is a 500, logged");
  assert.deepEqual(route.upgradeAnswering({ target: "/a?twice" }, () => ({ status: 200 })), { status: 500 });
  assert.deepEqual(route.upgrade({ target: "/a?sleep" }), { status: 500 });
  assert.ok(route.logs.some(([, m]) => m.includes("one request per upgrade")));
  assert.ok(route.logs.some(([, m]) => m.includes("setTimeout is not possible in onUpgrade")));
});
