// The JavaScript SDK as a real-time namespace's guest (onSubscribe,
// onClientPublish), a Pusher app's guest (onPusherConnect,
// onPusherSubscribe, onPusherClientEvent) and the `check-state` export
// (checkState), driven by its harness (src/testing.mjs) with the fixtures
// host/tests/rt_hooks.rs, pusher_guest.rs and deploy_state.rs run against
// a real gateway: examples/js/fixtures/moderate.js, pusher-gate.js and
// state-check.js. Run: node --test guest-sdk/js/test/

import { test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { TestRoute } from "../src/testing.mjs";

const fixture = (name) => new URL(`../../../examples/js/fixtures/${name}`, import.meta.url);
const handler = (name) => new URL(`./handlers/${name}`, import.meta.url);

test("a namespace guest refuses secret and vip channels and moderates publications", async () => {
  const route = await TestRoute.load(fixture("moderate.js"), "/rt");
  const sub = (channel) => route.subscribe({ channel, client: "c", user: "u" });
  assert.deepEqual(sub("chat:index"), { verdict: "allow" });
  assert.deepEqual(sub("chat:secret-1"), { verdict: "refuse", code: 103 });
  assert.deepEqual(sub("chat:vip"), { verdict: "refuse", code: 4403 });
  const publish = (data) => route.clientPublish({ channel: "chat:index", data });
  assert.deepEqual(publish({ t: "hi" }), { verdict: "pass" });
  assert.deepEqual(publish({ t: "darn" }), { verdict: "replace", text: '{"t":"d**n"}' });
  assert.deepEqual(publish({ t: "spam" }), { verdict: "drop", code: 103 });
  assert.deepEqual(publish({ t: "!broken" }), { verdict: "replace", text: "{not json" });
});

test("a question's request carries the client, user, token info and data", async () => {
  const route = await TestRoute.load(handler("questions.js"), "/rt");
  assert.deepEqual(route.subscribe({ channel: "echo:x", client: "c-9", user: "ann", info: { name: "Ann" } }), {
    verdict: "refuse",
    code: 4000 + "c-9|ann|Ann".length,
  });
  assert.deepEqual(route.clientPublish({ channel: "echo:x", user: "ann", info: '{"n":1}', data: { n: 2 } }), {
    verdict: "replace",
    text: '{"user":"ann","info":1,"data":2,"text":"{\\"n\\":2}"}',
  });
  // Bytes that are not UTF-8: text null, data undefined.
  assert.deepEqual(route.clientPublish({ channel: "echo:x", data: new Uint8Array([0xff]) }), {
    verdict: "replace",
    text: '{"user":"","info":null,"text":null}',
  });
  assert.deepEqual(route.pusherConnect({ target: "/app/k?protocol=7&x=1", socketId: "1.2", headers: [["Origin", "https://a"]] }), {
    verdict: "refuse",
    code: 4001,
    message: "/app/k 7 https://a 1.2",
  });
});

test("a hook that throws, awaits or answers nonsense answers nothing: the gateway fails the question", async () => {
  const route = await TestRoute.load(handler("questions.js"), "/rt");
  for (const channel of ["throw:x", "async:x", "nonsense:x"]) {
    route.logs.length = 0;
    assert.deepEqual(route.subscribe({ channel }), { verdict: "failed" }, channel);
    assert.ok(
      route.logs.some(([level, line]) => level === "error" && line.includes("onSubscribe") && line.includes("fails it")),
      JSON.stringify(route.logs),
    );
  }
  assert.deepEqual(route.clientPublish({ channel: "object:x", data: {} }), { verdict: "failed" });
  assert.ok(route.logs.some(([, line]) => line.includes("JSON.stringify(value)")), JSON.stringify(route.logs));
  // The instance goes on.
  assert.deepEqual(route.subscribe({ channel: "ok:x" }), { verdict: "allow" });
});

test("a handler without the hooks answers as Rust's defaults: allow and pass", async () => {
  const route = await TestRoute.load(fixture("../echo.js"), "/rt");
  assert.deepEqual(route.subscribe({ channel: "a" }), { verdict: "allow" });
  assert.deepEqual(route.clientPublish({ channel: "a", data: 1 }), { verdict: "pass" });
  assert.deepEqual(route.pusherConnect({ target: "/app/k" }), { verdict: "allow" });
  assert.deepEqual(route.pusherSubscribe({ channel: "private-a", auth: "k:s", signature: "failed" }), { verdict: "allow" });
  assert.deepEqual(route.pusherClientEvent({ channel: "private-a", event: "client-x", data: 1 }), { verdict: "pass" });
});

const JWT_KEY = "weir-pusher-gate-test-key";
function jwt(claims, key = JWT_KEY) {
  const b64 = (s) => Buffer.from(s).toString("base64url");
  const head = b64(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const body = b64(JSON.stringify(claims));
  const sig = createHmac("sha256", key).update(`${head}.${body}`).digest("base64url");
  return `${head}.${body}.${sig}`;
}

test("a Pusher guest authorises a presence channel from a JWT, with its member", async () => {
  const route = await TestRoute.load(fixture("pusher-gate.js"), "/app/{key}");
  const token = jwt({ sub: "ann", name: "Ann", channels: ["presence-room*"], iat: 1, exp: 2 });
  const sub = (channel, auth, signature) => route.pusherSubscribe({ channel, socketId: "1.2", auth, signature });
  const d = sub("presence-room-1", token, "failed");
  assert.equal(d.verdict, "authorise", JSON.stringify(d));
  assert.deepEqual(JSON.parse(d.channelData), { user_id: "ann", user_info: { name: "Ann" } });
  assert.deepEqual(sub("private-room-1", jwt({ channels: ["private-*"], iat: 1, exp: 2 }), "failed"), {
    verdict: "authorise",
    channelData: null,
  });
  assert.equal(sub("presence-other", token, "failed").code, 403);
  const forged = `${token.slice(0, -1)}${token.endsWith("A") ? "B" : "A"}`;
  assert.deepEqual(sub("presence-room-1", forged, "failed"), { verdict: "refuse", code: 401, message: "JWT signature mismatch" });
  assert.deepEqual(sub("presence-room-1", jwt({ channels: ["*"], iat: 2, exp: 2 }), "failed").message, "JWT without a valid iat/exp");
  assert.deepEqual(sub("private-banned-x", "", "passed"), { verdict: "refuse", code: 403, message: "this channel is closed" });
  assert.deepEqual(sub("private-x", "k:s", "passed"), { verdict: "allow" });
  assert.deepEqual(sub("public", "", "none"), { verdict: "allow" });
  assert.deepEqual(sub("private-trap-1", "", "none"), { verdict: "failed" });
});

test("a Pusher guest refuses a suspended tenant and tags, drops and traps client events", async () => {
  const route = await TestRoute.load(fixture("pusher-gate.js"), "/app/{key}");
  assert.deepEqual(route.pusherConnect({ target: "/app/k?protocol=7", headers: "host: x" }), { verdict: "allow" });
  assert.deepEqual(route.pusherConnect({ target: "/suspended/app/k?protocol=7" }), {
    verdict: "refuse",
    code: 4003,
    message: "this tenant is suspended",
  });
  const event = (data, name = "client-msg") => route.pusherClientEvent({ channel: "private-x", event: name, data });
  assert.deepEqual(event("buy spam"), { verdict: "drop", code: 0 });
  assert.deepEqual(event("!loud"), { verdict: "drop", code: 4301 });
  assert.deepEqual(event("  hi  "), { verdict: "replace", text: '{"checked":true,"text":"hi"}' });
  assert.deepEqual(event({ n: 1 }), { verdict: "replace", text: '{"checked":true,"n":1}' });
  assert.deepEqual(event(new Uint8Array([0x7b])), { verdict: "pass" }, "data that is not JSON passes");
  assert.deepEqual(event(1, "client-trap"), { verdict: "failed" });
});

test("check-state: JSON the SDK wrote passes, checkState refuses what it cannot serve", async () => {
  const route = await TestRoute.load(fixture("state-check.js"), "/s");
  const got = route.checkState([{ v: 2, nick: "a", count: 3 }, 7, { v: 1 }, new Uint8Array([1, 0, 0x7b, 0x7d])]);
  assert.equal(got[0], null);
  assert.equal(got[1], "state 7 is not version 2");
  assert.equal(got[2], 'state {"v":1} is not version 2');
  assert.match(got[3], /not JSON/);
  // Without checkState, any JSON passes (the counter's bare number too).
  const counter = await TestRoute.load(fixture("../counter.js"), "/c");
  assert.deepEqual(counter.checkState([7, { any: true }]), [null, null]);
  assert.match(counter.checkState([new Uint8Array([0xff])])[0], /not UTF-8/);
  // The state a connection saved is what a check reads.
  const c = route.connect("/s?nick=ann");
  route.sendText(c, "x");
  assert.deepEqual(route.texts(c), ['js {"v":2,"nick":"ann","count":1}']);
  assert.deepEqual(route.checkState([route.state(c)]), [null]);
});
