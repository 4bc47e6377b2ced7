// The JavaScript examples under the SDK's harness (guest-sdk/js/src/
// testing.mjs), with the assertions their Rust twins' tests make. Run:
// node --test examples/js/test/

import { test } from "node:test";
import assert from "node:assert/strict";
import { TestRoute } from "../../../guest-sdk/js/src/testing.mjs";

const example = (name) => new URL(`../${name}.js`, import.meta.url);

test("echo sends every message back as it came", async () => {
  const route = await TestRoute.load(example("echo"), "/plain");
  const c = route.connect("/plain");
  route.sendText(c, "héllo");
  route.sendBinary(c, new Uint8Array([0, 255]));
  assert.deepEqual(route.received(c), ["héllo", new Uint8Array([0, 255])]);
});

test("json answers the next even number, and errors without closing", async () => {
  const route = await TestRoute.load(example("json"), "/json");
  const c = route.connect("/json");
  route.sendText(c, '{"number": 3}');
  route.sendText(c, '{"number": 4}');
  route.sendText(c, "nope");
  route.sendText(c, '{"number": 1.5}');
  const [three, four, bad, frac] = route.json(c);
  assert.deepEqual([three, four], [{ number: 4 }, { number: 6 }]);
  assert.match(bad.error, /^malformed JSON/);
  assert.equal(frac.error, '"number" must be an integer');
  assert.ok(route.isOpen(c));
});

test("chat reaches the other members of the room only", async () => {
  const route = await TestRoute.load(example("chat"), "/chat/{room}");
  const a = route.connect("/chat/red");
  const b = route.connect("/chat/red");
  const other = route.connect("/chat/blue");
  assert.deepEqual(route.topics(a), ["red"]);
  route.sendText(a, "hi");
  assert.deepEqual(route.texts(b), ["hi"]);
  assert.deepEqual(route.received(a), []);
  assert.deepEqual(route.received(other), []);
});

test("counter counts per connection from ?from=N and survives a new instance", async () => {
  const route = await TestRoute.load(example("counter"), "/counter");
  const c = route.connect("/counter?from=10");
  route.sendText(c, "x");
  route.sendText(c, "x");
  await route.replaceInstance();
  route.sendText(c, "x");
  assert.deepEqual(route.texts(c), ["11", "12", "13"]);
  const d = route.connect("/counter");
  route.sendText(d, "x");
  assert.deepEqual(route.texts(d), ["1"]);
});

test("ticker polls on a route timer and publishes changes only", async () => {
  const route = await TestRoute.load(example("ticker"), "/ticker");
  const a = route.connect("/ticker");
  const [first] = route.timers();
  assert.equal(first.conn, 0, "the route's timer, not the connection's");
  route.fire(first.tag);
  const [req] = route.requests();
  assert.equal(req.url, "http://127.0.0.1:9002/ticker.txt");
  assert.equal(req.conn, 0);
  route.respond(req.tag, 200, [], "42\n");
  assert.deepEqual(route.texts(a), ["42"]);
  assert.equal(route.kvGet("last"), "42");
  // The same value again: nothing published. A failure: nothing either.
  route.advance(1000);
  route.respond(route.requests()[0].tag, 200, [], "42");
  route.advance(1000);
  route.fail(route.requests()[0].tag, "timeout");
  assert.deepEqual(route.received(a), []);
  // A fresh instance keeps polling on the timer it inherited; a late
  // joiner gets the last value at once.
  await route.replaceInstance();
  route.advance(1000);
  route.respond(route.requests()[0].tag, 200, [], "43");
  assert.deepEqual(route.texts(a), ["43"]);
  const b = route.connect("/ticker");
  assert.deepEqual(route.texts(b), ["43"]);
  assert.equal(route.timers().length, 1, "one poll going, not one per client");
});

test("remote-auth accepts on 200 with the user, 401 otherwise, 503 without an answer", async () => {
  const route = await TestRoute.load(example("remote-auth"), "/auth");
  const ok = route.upgradeAnswering({ target: "/auth?token=let-me-in" }, (sent) => {
    assert.equal(sent.url, "http://127.0.0.1:9003/auth?token=let-me-in");
    return { status: 200, body: "ann\n" };
  });
  route.sendText(ok.id, "hi");
  assert.deepEqual(route.texts(ok.id), ["ann: hi"]);
  route.sendBinary(ok.id, new Uint8Array([1]));
  assert.deepEqual(route.closedWith(ok.id), { code: 1003, reason: "text only" });
  assert.deepEqual(route.upgradeAnswering({ target: "/auth?token=nope" }, () => ({ status: 403 })), { status: 401 });
  assert.deepEqual(route.upgradeAnswering({ target: "/auth?token=x" }, () => ({ error: "connect" })), { status: 503 });
  assert.deepEqual(route.upgrade({ target: "/auth?token=a%20b" }), { status: 401 }, "refused before any request");
  assert.deepEqual(route.upgradeAnswering({ target: "/auth?token=t" }, () => ({ status: 200, body: " " })), { status: 502 });
});
