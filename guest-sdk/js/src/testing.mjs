// Test a JavaScript handler natively, under node's own test runner: no
// gateway, no wasm. Node only (not part of a component).
//
// `TestRoute` stands in for one gateway route serving a handler module, as
// the Rust SDK's `weir_guest::testing::TestRoute` does. It loads the module
// through the same rewrite build.mjs applies (src/loader.mjs), turns what
// clients do (upgrade, send, close) into the event batches the gateway
// sends, one event per batch, runs them through the SDK's runtime (the
// code the component runs), reads the answer with the ABI's validating
// reader and applies it as the gateway would: messages land in each
// client's inbox, publishes reach the route's subscribers, closes are
// recorded (and, as a client answers a close, followed by the
// connection's onClose), state is saved under `attachment_max`.
//
//   import { test } from "node:test";
//   import assert from "node:assert/strict";
//   import { TestRoute } from "weir-guest/testing"; // or its path
//
//   test("echo", async () => {
//     const route = await TestRoute.load(new URL("./echo.js", import.meta.url), "/echo");
//     const c = route.connect("/echo");
//     route.sendText(c, "hi");
//     assert.deepEqual(route.texts(c), ["hi"]);
//   });
//
// I/O is played by the test: requests wait in `requests()` until the test
// answers them (`respond`, `fail`); timers wait in `timers()` until the
// test fires them (`fire`, or `advance(ms)` on the route's clock); the
// key-value store is a Map the handler reads with kv.get and writes after
// each batch (`kv`, `kvGet`, `kvSet`, `kvError`, `kvMaxKeys`). A deferred
// upgrade is answered by `upgradeAnswering`. History and presence reads
// wait in `reads()` until the test answers them (`answerHistory`,
// `answerPresence`, `failRead`). A proxy route's filter is driven with
// `proxyMessage(id, direction, msg)`; what it passed on is in
// `forwarded(id)`. A real-time namespace's guest is asked with
// `subscribe(req)` and `clientPublish(req)`, a Pusher app's guest with
// `pusherConnect(req)`, `pusherSubscribe(req)` and `pusherClientEvent(req)`:
// each returns the verdict as the gateway reads it from the answer
// (`{ verdict: "allow" | "refuse" | "authorise" | "pass" | "replace" |
// "drop" | "failed", ... }`). `checkState(states)` runs the `check-state`
// export over saved conn.state values. `replaceInstance()` starts a
// fresh instance (module state reset, connections and their saved state
// kept), as the gateway does after a fault, a recycle or a deploy.
//
// Scope: one route, one instance, batches of one event; topics are the
// route's own.

import * as nodeModule from "node:module";
import { pathToFileURL } from "node:url";
import * as abi from "./abi.js";
import { createHandler } from "./index.js";

/** The gateway's default `attachment_max` (64 KiB). */
export const DEFAULT_ATTACHMENT_MAX = 64 * 1024;

let hooked = false;

function hook() {
  if (!hooked) {
    if (typeof nodeModule.register !== "function") {
      throw new Error(`the weir harness needs Node.js 20.6 or later (module.register); this is ${process.version}`);
    }
    nodeModule.register(new URL("./loader.mjs", import.meta.url));
    hooked = true;
  }
}

let instances = 0;

/** `[name, value]` pairs of `path` matched against `pattern`, or null. */
export function matchRoute(pattern, path) {
  const params = [];
  const want = pattern.split("/");
  const got = path.split("/");
  for (let i = 0; ; i++) {
    const w = want[i];
    const g = got[i];
    if (w === undefined && g === undefined) return params;
    if (w === undefined || g === undefined) return null;
    if (w.startsWith("{*") && w.endsWith("}")) {
      params.push([w.slice(2, -1), got.slice(i).join("/")]);
      return params;
    }
    if (w.startsWith("{") && w.endsWith("}")) {
      if (g === "") return null;
      params.push([w.slice(1, -1), g]);
    } else if (w !== g) {
      return null;
    }
  }
}

const te = (s) => abi.encodeUtf8(s);
const td = (b) => abi.decodeUtf8(b);
/** The connection and call ids the harness's real-time questions carry (the guest echoes them). */
const RT_CONN = Number.MAX_SAFE_INTEGER;
const RT_CALL = 0x5eed;
/** A value as JSON text (a string is taken as JSON text already). */
const jsonText = (v) => (typeof v === "string" ? v : v === undefined || v === null ? "" : JSON.stringify(v));
/** A publication's bytes: bytes as they are (raw JSON text), any other value as its JSON (a string too, as a client sends one). */
const dataBytes = (v) => (v instanceof Uint8Array ? v : te(JSON.stringify(v)));

function keyString(key) {
  return typeof key === "string" ? key : td(abi.toBytes(key)) ?? Buffer.from(key).toString("latin1");
}

/** A route serving one handler module, driven by the test. */
export class TestRoute {
  /**
   * Load the handler module at `url` (a file URL or path) for a route at
   * `pattern` (`/chat/{room}`). Options: `attachmentMax` (bytes),
   * `kvMaxKeys`.
   */
  static async load(url, pattern, options = {}) {
    hook();
    const href = url instanceof URL ? url.href : String(url).startsWith("file:") ? String(url) : pathToFileURL(String(url)).href;
    const route = new TestRoute(href, pattern, options);
    await route.replaceInstance();
    return route;
  }

  constructor(href, pattern, options) {
    this.href = href;
    this.pattern = pattern;
    this.attachmentMax = options.attachmentMax ?? DEFAULT_ATTACHMENT_MAX;
    this.kvMaxKeys = options.kvMaxKeys ?? null;
    this.handler = null;
    this.nextId = 1;
    this.clients = new Map();
    this.closing = [];
    this.pendingRequests = [];
    /** History and presence reads not answered yet: { conn, tag, kind, channel, limit, newest }. */
    this.pendingReads = [];
    /** tag → { conn, tag, delayMs, due } */
    this.pendingTimers = new Map();
    /** The route's clock (ms), moved by advance(). */
    this.now = 0;
    /** key (string of its bytes, latin1) → { key, value, expires } */
    this.store = new Map();
    this.kvRefused = [];
    /** Log lines the handler wrote: [level, message]. */
    this.logs = [];
    /** The verdicts of the real-time question being asked. */
    this.verdicts = [];
  }

  /**
   * Drop the instance and start a fresh one from the module (its top-level
   * state starts over), as the gateway does after a fault or every
   * `recycle_after` batches: connections stay open; the new instance knows
   * them only by what the gateway holds (target, parameters, saved state).
   */
  async replaceInstance() {
    instances++;
    const mod = await import(`${this.href}${this.href.includes("?") ? "&" : "?"}weir-instance=${instances}`);
    if (mod.default === undefined) throw new TypeError(`${this.href} has no default export (the handler)`);
    const host = {
      log: (level, msg) => this.logs.push([level, msg]),
      connection: (id) => {
        const c = this.clients.get(id);
        if (!c || c.gone) return null;
        const info = new Uint8Array(c.info.length + c.attachment.length);
        info.set(c.info, 0);
        info.set(c.attachment, c.info.length);
        return info;
      },
    };
    const kv = { get: (key) => this.kvRead(key) };
    this.handler = createHandler(mod.default, host, kv);
  }

  // ------------------------------------------------------------ clients

  /** Upgrade `target` (path and query) without headers and open it; its id. Throws if refused. */
  connect(target, headers = []) {
    const r = this.upgrade({ target, headers });
    if (r.status !== undefined) throw new Error(`upgrade of ${target} refused with ${r.status}`);
    return r.id;
  }

  /**
   * Ask the handler to upgrade `{ target, headers, remoteAddr }`; `{ id }`
   * if it accepts (the connection is open), `{ status }` (the HTTP status
   * the gateway would answer) if not. A deferred upgrade needs
   * upgradeAnswering.
   */
  upgrade(req) {
    return this.upgradeAnswering(req, null);
  }

  /**
   * As upgrade; if the handler defers the upgrade on a request, `answer`
   * plays the remote service: given the request ({ method, url, headers,
   * body, text }), it returns `{ status, headers, body }` or `{ error }`
   * (`refused`, `timeout`, `connect`, `too-large`, `busy`, `invalid`).
   */
  upgradeAnswering(req, answer) {
    const target = req.target ?? req.path ?? "/";
    const q = target.indexOf("?");
    const path = q < 0 ? target : target.slice(0, q);
    const query = q < 0 ? "" : target.slice(q + 1);
    const params = matchRoute(this.pattern, path);
    if (params === null) throw new Error(`${path} does not match route ${this.pattern}`);
    const raw = {
      path,
      query,
      headers: (req.headers ?? []).map(([n, v]) => [n.toLowerCase(), v]),
      remoteAddr: req.remoteAddr ?? "127.0.0.1:50000",
      params,
    };
    let decision = this.handler.upgrade(raw);
    if (decision.tag === "defer") {
      if (answer === null) throw new Error("the handler deferred the upgrade on a request; use upgradeAnswering");
      const r = decision.val.request;
      const sent = { conn: 0, tag: decision.val.tag, method: r.method, url: r.url, headers: r.headers, body: r.body, text: td(r.body) };
      const a = answer(sent);
      const codes = { refused: 1, timeout: 2, connect: 3, "too-large": 4, busy: 5, invalid: 6 };
      const outcome =
        a.error !== undefined
          ? { tag: "error", val: [codes[a.error] ?? 6, a.message ?? a.error] }
          : {
              tag: "response",
              val: {
                status: a.status ?? 200,
                headers: (a.headers ?? []).map(([n, v]) => [n.toLowerCase(), v]),
                body: abi.toBytes(a.body ?? ""),
              },
            };
      decision = this.handler.resumeUpgrade(decision.val.tag, raw, outcome);
      if (decision.tag === "defer") return { status: 500 };
    }
    if (decision.tag === "reject") {
      const s = decision.val;
      return { status: s >= 400 && s <= 599 ? s : 403 };
    }
    const { protocol, attachment } = decision.val;
    if (protocol !== null && protocol !== undefined) {
      const offered = raw.headers
        .filter(([n]) => n === "sec-websocket-protocol")
        .flatMap(([, v]) => v.split(","))
        .map((p) => p.trim());
      if (!offered.includes(protocol)) return { status: 500 };
    }
    if (attachment.length > this.attachmentMax) return { status: 500 };
    const id = this.nextId++;
    const info = abi.encodeConnInfo(target, params);
    this.clients.set(id, {
      info,
      attachment: Uint8Array.from(attachment),
      topics: new Set(),
      inbox: [],
      forwarded: [],
      closedByHandler: null,
      gone: false,
      protocol: protocol ?? null,
    });
    const open = new Uint8Array(info.length + attachment.length);
    open.set(info, 0);
    open.set(attachment, info.length);
    this.run(id, abi.EventKind.OPEN, 0, open);
    return { id, protocol: protocol ?? null };
  }

  /** The client sends `msg`: a string as text, bytes as binary. */
  send(conn, msg) {
    if (typeof msg === "string") this.sendText(conn, msg);
    else this.sendBinary(conn, msg);
  }

  /** The client sends a text message. */
  sendText(conn, text) {
    this.live(conn);
    this.run(conn, abi.EventKind.TEXT, 0, te(text));
  }

  /** The client sends a binary message. */
  sendBinary(conn, bytes) {
    this.live(conn);
    this.run(conn, abi.EventKind.BINARY, 0, abi.toBytes(bytes));
  }

  /** The client closes (1005: no code, 1006: dropped); onClose runs. */
  close(conn, code = 1000, reason = "") {
    this.live(conn);
    this.gone(conn);
    this.run(conn, abi.EventKind.CLOSE, code, te(reason));
  }

  /**
   * A message on its way through proxied connection `conn`, `direction`
   * "to-upstream" (the client sent it) or "to-client" (the upstream did):
   * the handler is a proxy route's filter (onProxyMessage); what it passed
   * on is in forwarded(conn).
   */
  proxyMessage(conn, direction, msg) {
    this.live(conn);
    const dir = abi.DIRECTIONS.indexOf(direction);
    if (dir < 0) throw new Error(`no direction ${direction}: "to-upstream" or "to-client"`);
    const text = typeof msg === "string";
    this.run(conn, text ? abi.EventKind.PROXY_TEXT : abi.EventKind.PROXY_BINARY, 0, text ? te(msg) : abi.toBytes(msg), dir);
  }

  // ------------------------------------------------------------ real-time guests

  /**
   * Ask the handler, as a real-time namespace's guest, whether a client
   * may subscribe (onSubscribe): `{ channel, client, user, info }` (info:
   * the token's info claim, a value or its JSON). `{ verdict: "allow" }`,
   * `{ verdict: "refuse", code }`, or `{ verdict: "failed" }` when the
   * handler answered nothing (it threw: the gateway fails the question).
   */
  subscribe({ channel, client = "client-1", user = "", info = "" }) {
    const v = this.ask(abi.EventKind.RT_SUBSCRIBE, { channel, client, user, info: jsonText(info) });
    if (v.kind === "failed") return { verdict: "failed" };
    return v.code === 0 ? { verdict: "allow" } : { verdict: "refuse", code: v.code };
  }

  /**
   * Give the handler, as a real-time namespace's guest, a client's
   * publication (onClientPublish): `{ channel, client, user, info, data }`
   * (info: JSON text, or a value; data: a value, sent as its JSON, or raw
   * bytes). `{ verdict: "pass" }`,
   * `{ verdict: "replace", text }`, `{ verdict: "drop", code }` or
   * `{ verdict: "failed" }`.
   */
  clientPublish({ channel, client = "client-1", user = "", info = "", data }) {
    return this.publishAnswer(
      this.ask(abi.EventKind.RT_PUBLISH, { channel, client, user, info: jsonText(info) }, dataBytes(data)),
    );
  }

  /**
   * Ask the handler, as a Pusher app's guest, about a connection
   * (onPusherConnect): `{ target, socketId, headers }` (headers: `[name,
   * value]` pairs or `name: value` lines). `{ verdict: "allow" }`, `{
   * verdict: "refuse", code, message }` or `{ verdict: "failed" }`.
   */
  pusherConnect({ target, socketId = "1.1", headers = [] }) {
    const lines = typeof headers === "string" ? headers : headers.map(([n, v]) => `${n}: ${v}`).join("\n");
    const v = this.ask(abi.EventKind.PUSHER_CONNECT, { channel: target, client: socketId, user: "", info: lines });
    if (v.kind === "failed") return { verdict: "failed" };
    return v.code === 0 ? { verdict: "allow" } : { verdict: "refuse", code: v.code, message: v.payload ?? "" };
  }

  /**
   * Ask the handler, as a Pusher app's guest, about a subscribe
   * (onPusherSubscribe): `{ channel, socketId, user, channelData, auth,
   * signature }` (signature: what weir's HMAC check made of `auth`, "none",
   * "passed" or "failed"). `{ verdict: "allow" }`, `{ verdict: "authorise",
   * channelData }` (null: the client's own), `{ verdict: "refuse", code,
   * message }` or `{ verdict: "failed" }`.
   */
  pusherSubscribe({ channel, socketId = "1.1", user = "", channelData = "", auth = "", signature = "none" }) {
    const rest = abi.encodeSubscribeRest(signature, auth);
    const req = { channel, client: socketId, user, info: jsonText(channelData) };
    const v = this.ask(abi.EventKind.PUSHER_SUBSCRIBE, req, rest);
    if (v.kind === "failed") return { verdict: "failed" };
    if (v.code !== 0) return { verdict: "refuse", code: v.code, message: v.payload ?? "" };
    if (v.authorise) return { verdict: "authorise", channelData: v.payload === "" ? null : v.payload };
    return { verdict: "allow" };
  }

  /**
   * Give the handler, as a Pusher app's guest, a client event
   * (onPusherClientEvent): `{ channel, socketId, user, event, data }`. The
   * verdict as clientPublish's (a drop with code 0 is silent).
   */
  pusherClientEvent({ channel, socketId = "1.1", user = "", event, data }) {
    const req = { channel, client: socketId, user, info: event };
    return this.publishAnswer(this.ask(abi.EventKind.PUSHER_CLIENT_EVENT, req, dataBytes(data)));
  }

  /**
   * The `check-state` export over `states` (conn.state values as a live
   * connection would have saved them; a Uint8Array goes as raw attachment
   * bytes): for each, null when this version accepts it, else why not.
   */
  checkState(states) {
    const attachments = states.map((s) => (s instanceof Uint8Array ? s : te(JSON.stringify(s))));
    return this.handler.checkState(attachments);
  }

  publishAnswer(v) {
    if (v.kind === "failed") return { verdict: "failed" };
    if (v.verdict === "replace") return { verdict: "replace", text: td(v.data) };
    if (v.verdict === "drop") return { verdict: "drop", code: v.code };
    return { verdict: "pass" };
  }

  /** One real-time question in a batch of its own (call id RT_CALL); its one verdict, or { kind: "failed" }. */
  ask(kind, req, rest = new Uint8Array(0)) {
    this.verdicts = [];
    this.run(RT_CONN, kind, 0, abi.encodeRtRequest({ call: RT_CALL, ...req }, rest));
    const got = this.verdicts;
    this.verdicts = [];
    if (got.length === 0) return { kind: "failed" };
    if (got.length !== 1) throw new Error(`one verdict per question, got ${JSON.stringify(got)}`);
    const v = got[0];
    if (v.call !== RT_CALL || v.conn !== RT_CONN) throw new Error(`the verdict names call ${v.call} of ${v.conn}, not the question's`);
    const want = kind === abi.EventKind.RT_PUBLISH || kind === abi.EventKind.PUSHER_CLIENT_EVENT ? "rt-publish-verdict" : "rt-subscribe-verdict";
    if (v.kind !== want) throw new Error(`a ${want} was due, got ${v.kind}`);
    return v;
  }

  // ------------------------------------------------------------ what clients saw

  /**
   * What the filter passed on through `conn` since the last call, in
   * order: [direction, message] (a string for text, a Uint8Array for binary).
   */
  forwarded(conn) {
    const c = this.client(conn);
    const out = c.forwarded;
    c.forwarded = [];
    return out;
  }

  /** Everything `conn` received since the last call, oldest first: strings and Uint8Arrays. */
  received(conn) {
    const c = this.client(conn);
    const out = c.inbox;
    c.inbox = [];
    return out;
  }

  /** What `conn` received since the last call, all text (throws on a binary one). */
  texts(conn) {
    return this.received(conn).map((m) => {
      if (typeof m !== "string") throw new Error(`connection ${conn} received a binary message`);
      return m;
    });
  }

  /** What `conn` received since the last call, each text parsed as JSON. */
  json(conn) {
    return this.texts(conn).map((t) => JSON.parse(t));
  }

  /** `{ code, reason }` the handler closed `conn` with, or null. */
  closedWith(conn) {
    return this.client(conn).closedByHandler;
  }

  /** Whether `conn` is open (neither side closed it). */
  isOpen(conn) {
    const c = this.clients.get(conn);
    return c !== undefined && !c.gone && c.closedByHandler === null;
  }

  /** The topics `conn` is subscribed to, sorted. */
  topics(conn) {
    return [...this.client(conn).topics].sort();
  }

  /** The attachment the gateway holds for `conn` (its saved state), as text. */
  attachment(conn) {
    return td(this.client(conn).attachment);
  }

  /** `conn.state` as the gateway holds it (undefined when none was saved). */
  state(conn) {
    const a = this.attachment(conn);
    return a === "" || a === null ? undefined : JSON.parse(a);
  }

  // ------------------------------------------------------------ HTTP

  /** The requests the handler sent that are not answered yet: { conn, tag, method, url, headers, body, text }. */
  requests() {
    return this.pendingRequests.slice();
  }

  /** Answer pending request `tag` with `status`, `headers` ([name, value]) and `body`. */
  respond(tag, status = 200, headers = [], body = "") {
    const r = this.takeRequest(tag);
    const lower = headers.map(([n, v]) => [n.toLowerCase(), v]);
    this.run(r.conn, abi.EventKind.HTTP_RESPONSE, status, abi.encodeHttpResponse(tag, lower, abi.toBytes(body)));
  }

  /** Fail pending request `tag` with `reason` (refused, timeout, connect, too-large, busy, invalid). */
  fail(tag, reason = "timeout", message = "") {
    const r = this.takeRequest(tag);
    const codes = { refused: 1, timeout: 2, connect: 3, "too-large": 4, busy: 5, invalid: 6 };
    if (!(reason in codes)) throw new Error(`no http-error reason ${reason}`);
    this.run(r.conn, abi.EventKind.HTTP_ERROR, codes[reason], abi.encodeHttpError(tag, message || reason));
  }

  takeRequest(tag) {
    const at = this.pendingRequests.findIndex((r) => r.tag === tag);
    if (at < 0) throw new Error(`no request with tag ${tag} is pending`);
    return this.pendingRequests.splice(at, 1)[0];
  }

  // ------------------------------------------------------------ realtime reads

  /** History and presence reads not answered yet: { conn (0: the route's), tag, kind ("history" or "presence"), channel, limit, newest }. */
  reads() {
    return this.pendingReads.slice();
  }

  /**
   * Answer pending history read `tag`: the channel is at `offset` in
   * `epoch` and holds `publications`, [offset, data] pairs (data: JSON
   * text, or a value made JSON here).
   */
  answerHistory(tag, { offset = 0, epoch = "", publications = [] } = {}) {
    const r = this.takeRead(tag, "history");
    const pubs = publications.map(([o, d]) => [o, typeof d === "string" ? d : JSON.stringify(d)]);
    this.run(r.conn, abi.EventKind.HISTORY, 0, abi.encodeHistory(tag, offset, epoch, pubs));
  }

  /** Answer pending presence read `tag` with `members`: { client, user, info } (info: JSON text or a value, none when absent). */
  answerPresence(tag, members = []) {
    const r = this.takeRead(tag, "presence");
    const ms = members.map((m) => ({
      client: m.client,
      user: m.user ?? "",
      conn_info: m.info === undefined || m.info === null ? "" : typeof m.info === "string" ? m.info : JSON.stringify(m.info),
    }));
    this.run(r.conn, abi.EventKind.PRESENCE, 0, abi.encodePresence(tag, ms));
  }

  /** Fail pending read `tag` with `reason` (bad-channel, history-off, presence-off, unavailable, busy, not-realtime). */
  failRead(tag, reason) {
    const codes = Object.fromEntries(Object.entries(abi.READ_ERROR_REASONS).map(([k, v]) => [v, Number(k)]));
    if (!(reason in codes)) throw new Error(`no read-error reason ${reason}`);
    const r = this.takeRead(tag, null);
    const kind = r.kind === "history" ? abi.EventKind.HISTORY : abi.EventKind.PRESENCE;
    this.run(r.conn, kind, codes[reason], abi.encodeTag(tag));
  }

  takeRead(tag, kind) {
    const at = this.pendingReads.findIndex((r) => r.tag === tag && (kind === null || r.kind === kind));
    if (at < 0) throw new Error(`no ${kind === null ? "" : `${kind} `}read with tag ${tag} is pending`);
    return this.pendingReads.splice(at, 1)[0];
  }

  // ------------------------------------------------------------ timers

  /** Pending timers, soonest first: { conn (0: the route's), tag, delayMs, due }. */
  timers() {
    return [...this.pendingTimers.values()].sort((a, b) => a.due - b.due || a.tag - b.tag);
  }

  /** Fire pending timer `tag` now (its callback or onTimer runs). */
  fire(tag) {
    const t = this.pendingTimers.get(tag);
    if (t === undefined) throw new Error(`no timer with tag ${tag} is pending`);
    this.pendingTimers.delete(tag);
    if (t.due > this.now) this.now = t.due;
    this.run(t.conn, abi.EventKind.TIMER, 0, abi.encodeTag(tag));
  }

  /** Move the route's clock on by `ms`, firing every timer that comes due, in order. */
  advance(ms) {
    const until = this.now + ms;
    for (;;) {
      const next = this.timers()[0];
      if (next === undefined || next.due > until) break;
      this.fire(next.tag);
    }
    this.now = until;
  }

  // ------------------------------------------------------------ kv

  kvRead(key) {
    const e = this.store.get(Buffer.from(key).toString("latin1"));
    if (e === undefined) return null;
    if (e.expires !== 0 && e.expires <= this.now) return null;
    return Uint8Array.from(e.value);
  }

  /** The value under `key` as text (null when absent or expired). */
  kvGet(key) {
    const v = this.kvRead(abi.toBytes(key));
    return v === null ? null : td(v);
  }

  /** Put `value` under `key` directly (as if an earlier version wrote it). */
  kvSet(key, value, ttlMs = 0) {
    const k = abi.toBytes(key);
    this.store.set(Buffer.from(k).toString("latin1"), {
      key: Uint8Array.from(k),
      value: Uint8Array.from(abi.toBytes(value)),
      expires: ttlMs ? this.now + ttlMs : 0,
    });
  }

  /** The live store as { key: value } text, with each key's ttl left in `expiresIn` when it has one. */
  kv() {
    const out = {};
    for (const e of this.store.values()) {
      if (e.expires !== 0 && e.expires <= this.now) continue;
      out[keyString(e.key)] = td(e.value) ?? e.value;
    }
    return out;
  }

  /** When `key` expires on the route's clock (ms), 0 for never, null when absent. */
  kvExpires(key) {
    const e = this.store.get(Buffer.from(abi.toBytes(key)).toString("latin1"));
    return e === undefined ? null : e.expires;
  }

  /** Tell the handler that a write of `key` was refused for `reason` (onKvError runs). */
  kvError(key, reason = "max-bytes") {
    const codes = { "max-bytes": 1, "max-keys": 2, "queue-full": 3, "too-large": 4, "no-store": 5 };
    if (!(reason in codes)) throw new Error(`no kv-error reason ${reason}`);
    this.run(0, abi.EventKind.KV_ERROR, codes[reason], abi.toBytes(key));
  }

  // ------------------------------------------------------------ the gateway's side

  client(conn) {
    const c = this.clients.get(conn);
    if (c === undefined) throw new Error(`no connection ${conn}`);
    return c;
  }

  live(conn) {
    if (!this.isOpen(conn)) throw new Error(`connection ${conn} is not open`);
  }

  /** `conn` is gone: its timers and requests end with it (the gateway drops them). */
  gone(conn) {
    this.client(conn).gone = true;
    for (const [tag, t] of this.pendingTimers) if (t.conn === conn) this.pendingTimers.delete(tag);
    this.pendingRequests = this.pendingRequests.filter((r) => r.conn !== conn);
    this.pendingReads = this.pendingReads.filter((r) => r.conn !== conn);
  }

  /** One batch of one event, its answer applied; closes the handler sent are then answered. */
  run(conn, kind, code, bytes, reserved = 0) {
    const headers = new Uint8Array(abi.EVENT_HEADER_BYTES);
    abi.writeEventHeader(headers, 0, { conn, kind, reserved, code, offset: 0, len: bytes.length });
    const out = this.handler.handle({ events: headers, data: Uint8Array.from(bytes) });
    // Copies: the SDK reuses its buffers for the next answer.
    const commands = abi.decodeCommands(Uint8Array.from(out.commands), Uint8Array.from(out.data));
    for (const c of commands) this.apply(conn, c);
    this.afterBatch();
    while (this.closing.length > 0) {
      const [id, closeCode, reason] = this.closing.shift();
      const c = this.clients.get(id);
      if (c && !c.gone) {
        this.gone(id);
        this.run(id, abi.EventKind.CLOSE, closeCode, te(reason));
      }
    }
  }

  afterBatch() {
    const refused = this.kvRefused;
    this.kvRefused = [];
    for (const [key, reason] of refused) this.kvError(key, reason);
  }

  open(conn) {
    const c = this.clients.get(conn);
    return c !== undefined && !c.gone && c.closedByHandler === null ? c : null;
  }

  apply(batchConn, c) {
    switch (c.kind) {
      case "send-text":
      case "send-binary": {
        const to = this.open(c.conn);
        if (to) to.inbox.push(c.kind === "send-text" ? c.text : Uint8Array.from(c.payload));
        break;
      }
      case "close": {
        const to = this.open(c.conn);
        if (to) {
          to.closedByHandler = { code: c.code, reason: c.reason };
          this.closing.push([c.conn, c.code, c.reason]);
        }
        break;
      }
      case "publish-text":
      case "publish-binary":
        for (const [id, to] of this.clients) {
          if (!to.gone && to.closedByHandler === null && id !== c.exclude && to.topics.has(c.topic)) {
            to.inbox.push(c.kind === "publish-text" ? c.text : Uint8Array.from(c.payload));
          }
        }
        break;
      case "subscribe": {
        const to = this.open(c.conn);
        if (to) to.topics.add(c.topic);
        break;
      }
      case "unsubscribe": {
        const to = this.open(c.conn);
        if (to) to.topics.delete(c.topic);
        break;
      }
      case "set-attachment": {
        if (c.conn !== batchConn) {
          // The gateway ignores (and logs) an attachment outside its batch.
          this.logs.push(["warn", `attachment for ${c.conn} outside its batch ignored`]);
          break;
        }
        const to = this.clients.get(c.conn);
        if (!to || to.gone) break;
        if (c.attachment.length > this.attachmentMax) {
          if (to.closedByHandler === null) {
            to.closedByHandler = { code: 1011, reason: "" };
            this.closing.push([c.conn, 1011, ""]);
          }
          break;
        }
        to.attachment = Uint8Array.from(c.attachment);
        break;
      }
      case "http-request": {
        if (c.conn !== 0 && !this.open(c.conn)) break;
        const head = abi.splitRequestHead(c.head);
        if (head === null) throw new Error(`request head ${JSON.stringify(c.head)} has no METHOD URL`);
        const body = Uint8Array.from(c.body);
        this.pendingRequests.push({ conn: c.conn, tag: c.tag, ...head, body, text: td(body) });
        break;
      }
      case "set-timer":
        if (c.conn === 0 || this.open(c.conn)) {
          this.pendingTimers.set(c.tag, { conn: c.conn, tag: c.tag, delayMs: c.delay_ms, due: this.now + c.delay_ms });
        }
        break;
      case "cancel-timer": {
        const t = this.pendingTimers.get(c.tag);
        if (t && t.conn === c.conn) this.pendingTimers.delete(c.tag);
        break;
      }
      case "kv-set": {
        const k = Buffer.from(c.key).toString("latin1");
        const full = this.kvMaxKeys !== null && this.store.size >= this.kvMaxKeys && !this.store.has(k);
        if (full) this.kvRefused.push([Uint8Array.from(c.key), "max-keys"]);
        else this.kvSet(c.key, c.value, c.ttl_ms);
        break;
      }
      case "kv-delete":
        this.store.delete(Buffer.from(c.key).toString("latin1"));
        break;
      case "forward-text":
      case "forward-binary": {
        const to = this.open(c.conn);
        if (to) to.forwarded.push([abi.DIRECTIONS[c.direction], c.kind === "forward-text" ? c.text : Uint8Array.from(c.payload)]);
        break;
      }
      case "history-read":
      case "presence-read":
        if (c.conn === 0 || this.open(c.conn)) {
          const history = c.kind === "history-read";
          this.pendingReads.push({
            conn: c.conn,
            tag: c.tag,
            kind: history ? "history" : "presence",
            channel: c.channel,
            limit: history ? c.limit : null,
            newest: history ? c.reverse : false,
          });
        }
        break;
      case "rt-subscribe-verdict":
      case "rt-publish-verdict":
        this.verdicts.push(c);
        break;
      default:
        throw new Error(`the harness does not play ${c.kind}`);
    }
  }
}
