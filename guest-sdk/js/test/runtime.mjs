// The JS runtime natively, under node: batches packed with the codec go
// through createHandler() with a host whose `connection` answers from a map
// (as the gateway's does), and the answers are read back with the codec's
// validating reader. Run: node guest-sdk/js/test/runtime.mjs

import { deepStrictEqual, strictEqual, throws } from "node:assert";
import * as abi from "../src/abi.js";
import { createHandler } from "../src/index.js";

const lines = [];
const known = new Map();
const host = {
  log: (level, msg) => lines.push([level, msg]),
  connection: (id) => known.get(id) ?? null,
};

/** A batch from [conn, kind, code, bytes] events. */
function batch(events) {
  const headers = new Uint8Array(events.length * abi.EVENT_HEADER_BYTES);
  const parts = [];
  let offset = 0;
  events.forEach(([conn, kind, code, bytes], i) => {
    const b = typeof bytes === "string" ? abi.encodeUtf8(bytes) : bytes;
    abi.writeEventHeader(headers, i * abi.EVENT_HEADER_BYTES, { conn, kind, code, offset, len: b.length });
    parts.push(b);
    offset += b.length;
  });
  const data = new Uint8Array(offset);
  offset = 0;
  for (const p of parts) {
    data.set(p, offset);
    offset += p.length;
  }
  return { events: headers, data };
}

const run = (h, events) => {
  const out = h.handle(batch(events));
  return abi.decodeCommands(out.commands, out.data).map((c) =>
    c.attachment ? { ...c, attachment: abi.decodeUtf8(c.attachment) } : c,
  );
};
const open = (target, params = [], attachment = "") =>
  abi.encodeConnInfo(target, params, abi.encodeUtf8(attachment));

// Chat-like handler: params, publish, state saved only when it changes.
const h = createHandler(
  {
    onOpen(conn) {
      conn.subscribe(conn.param("room") ?? "lobby");
    },
    onMessage(conn, msg) {
      if (msg === "count") {
        conn.state = { n: (conn.state?.n ?? 0) + 1 };
        conn.send(String(conn.state.n));
      } else if (msg === "boom") {
        throw new Error("boom");
      } else if (msg === "same") {
        conn.state = { ...conn.state };
      } else {
        conn.publish(conn.param("room"), msg);
      }
    },
  },
  host,
);

deepStrictEqual(
  run(h, [
    [1, abi.EventKind.OPEN, 0, open("/chat/red?x=1", [["room", "red"]])],
    [1, abi.EventKind.TEXT, 0, "count"],
    [1, abi.EventKind.BINARY, 0, new Uint8Array([9])],
    [1, abi.EventKind.TEXT, 0, "same"],
  ]),
  [
    { kind: "subscribe", conn: 1, topic: "red" },
    { kind: "send-text", conn: 1, text: "1" },
    { kind: "set-attachment", conn: 1, attachment: '{"n":1}' },
    { kind: "publish-binary", topic: "red", payload: new Uint8Array([9]), exclude: 1 },
  ],
  "open, message, state saved once, unchanged state not saved again",
);

// Non-ASCII text, alone and beside ASCII and binary messages in one batch,
// arrives as the same string whichever decoding path the batch takes.
deepStrictEqual(
  run(h, [
    [1, abi.EventKind.TEXT, 0, "héllo wörld 😀"],
    [1, abi.EventKind.TEXT, 0, "plain"],
    [1, abi.EventKind.BINARY, 0, new Uint8Array([0xff, 0x80])],
  ]),
  [
    { kind: "publish-text", topic: "red", text: "héllo wörld 😀", exclude: 1 },
    { kind: "publish-text", topic: "red", text: "plain", exclude: 1 },
    { kind: "publish-binary", topic: "red", payload: new Uint8Array([0xff, 0x80]), exclude: 1 },
  ],
  "utf-8 in a batch",
);

// A connection this instance never saw (it replaced one that did): its
// params and state come from host.connection.
known.set(7, open("/chat/blue", [["room", "blue"]], '{"n":41}'));
deepStrictEqual(
  run(h, [[7, abi.EventKind.TEXT, 0, "count"], [7, abi.EventKind.TEXT, 0, "hi"]]),
  [
    { kind: "send-text", conn: 7, text: "42" },
    { kind: "set-attachment", conn: 7, attachment: '{"n":42}' },
    { kind: "publish-text", topic: "blue", text: "hi", exclude: 7 },
  ],
  "restored from the host",
);

// A throw closes only its connection with 1011; the other one goes on.
deepStrictEqual(
  run(h, [
    [1, abi.EventKind.TEXT, 0, "boom"],
    [1, abi.EventKind.TEXT, 0, "count"],
    [7, abi.EventKind.TEXT, 0, "count"],
    [1, abi.EventKind.CLOSE, 1000, "bye"],
  ]),
  [
    { kind: "close", conn: 1, code: 1011, reason: "handler error" },
    { kind: "send-text", conn: 7, text: "43" },
    { kind: "set-attachment", conn: 7, attachment: '{"n":43}' },
  ],
  "throw",
);
strictEqual(lines.length, 1);
strictEqual(lines[0][0], "error");
strictEqual(lines[0][1].startsWith("handler threw in onMessage (connection 1): Error: boom"), true);

// Upgrade answers.
const up = createHandler(
  {
    onUpgrade(req) {
      if (req.queryParam("deny") !== undefined) return 401;
      if (req.header("X-Nope")) return false;
      return { state: { user: req.queryParam("user") }, protocol: req.protocols()[0] ?? null };
    },
    onMessage() {},
  },
  host,
);
const req = (query, headers = []) => ({ path: "/p", query, headers, remoteAddr: "127.0.0.1:1", params: [] });
deepStrictEqual(up.upgrade(req("deny")), { tag: "reject", val: 401 });
deepStrictEqual(up.upgrade(req("", [["x-nope", "1"]])), { tag: "reject", val: 403 });
const accepted = up.upgrade(req("user=ann", [["sec-websocket-protocol", "chat, v2"]]));
strictEqual(accepted.tag, "accept");
strictEqual(accepted.val.protocol, "chat");
strictEqual(abi.decodeUtf8(accepted.val.attachment), '{"user":"ann"}');
deepStrictEqual(
  createHandler({ onMessage() {} }, host).upgrade(req("")),
  { tag: "accept", val: { protocol: null, attachment: new Uint8Array(0) } },
);

// An async onUpgrade is refused, not taken for an accept; a state that is
// not JSON fails only its connection.
const asyncUp = createHandler({ async onUpgrade() { return 401; }, onMessage() {} }, host);
deepStrictEqual(asyncUp.upgrade(req("")), { tag: "reject", val: 500 });
deepStrictEqual(
  createHandler({ onUpgrade: () => ({ state: 1n }), onMessage() {} }, host).upgrade(req("")),
  { tag: "reject", val: 500 },
);
const bad = createHandler(
  {
    onMessage(conn, msg) {
      if (msg === "big") conn.state = { n: 1n };
      else conn.send(msg);
    },
  },
  host,
);
deepStrictEqual(
  run(bad, [
    [9, abi.EventKind.OPEN, 0, open("/b")],
    [9, abi.EventKind.TEXT, 0, "big"],
    [9, abi.EventKind.TEXT, 0, "after"],
    [10, abi.EventKind.OPEN, 0, open("/b")],
    [10, abi.EventKind.TEXT, 0, "fine"],
  ]),
  [
    { kind: "close", conn: 9, code: 1011, reason: "handler error" },
    { kind: "send-text", conn: 10, text: "fine" },
  ],
  "state that is not JSON",
);

// An echo refers to the batch's bytes (copied into the answer once): each
// reply is its own message, whatever was written before or between them,
// in a small batch and in one past the whole-copy limit.
const echo = createHandler(
  {
    onMessage(conn, msg) {
      if (msg === "x") conn.sendText("before é😀 \ud800");
      conn.send(msg);
    },
  },
  host,
);
for (const msgs of [
  ["one", "x", "två 😀", "three"],
  ["one", "b".repeat(70000), "x", "two"],
]) {
  deepStrictEqual(
    run(echo, msgs.map((m) => [20, abi.EventKind.TEXT, 0, m])),
    msgs.flatMap((m) => [
      // A lone surrogate is sent as U+FFFD, as TextEncoder does.
      ...(m === "x" ? [{ kind: "send-text", conn: 20, text: "before é😀 \ufffd" }] : []),
      { kind: "send-text", conn: 20, text: m },
    ]),
    `echo of ${msgs.length} messages`,
  );
}

// Text that is not UTF-8 breaks the ABI (the host never sends it): the
// batch fails (the throw traps the instance), it is not handed on mangled.
throws(
  () => h.handle(batch([[1, abi.EventKind.TEXT, 0, new Uint8Array([0x61, 0xff])]])),
  (e) => e.variant === "TextNotUtf8" && e.index === 0,
);

console.log("runtime (js): hooks, state, restore, throw, upgrade and misuse ok");
