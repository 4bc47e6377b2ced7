// weir-guest for JavaScript: write a weir WebSocket handler as a plain
// object (or class) with hooks; this module turns it into the component's
// `weir:gateway/handler` export.
//
//   export default {
//     onOpen(conn) { conn.subscribe(conn.param("room") ?? "lobby"); },
//     onMessage(conn, msg) { conn.publish(conn.param("room") ?? "lobby", msg); },
//   };
//
// `node guest-sdk/js/build.mjs chat.js -o chat.wasm` wraps the module with
// createHandler() and builds the component (QuickJS, componentize-qjs).
// Hooks, all optional but onMessage:
//
// - onUpgrade(req): decide on the HTTP upgrade, before the connection
//   exists. Return nothing (or true) to accept, a status (400–599, or false
//   for 403) to refuse, or `{ state, protocol }` to accept with a first
//   connection state and/or a subprotocol the client offered.
// - onOpen(conn), onMessage(conn, msg), onClose(conn, code, reason): `msg`
//   is a string for a text message and a Uint8Array for a binary one.
// - onTimer(conn, tag): a timer set with conn.setTimer (or route.setTimer,
//   then `conn` is `route`) without a callback, or whose callback this
//   instance no longer has (it replaced the one that set it).
// - onKvError(route, key, reason): a kv.set or kv.delete the gateway refused.
// - onProxyMessage(conn, direction, msg): a proxy route's filter (`filter =
//   "x.wasm"` on a `native = "proxy"` route; then onMessage is never
//   called, and a filter may have none): `msg` on its way through `conn`,
//   `direction` "to-upstream" or "to-client". Return nothing (or
//   Verdict.PASS) to pass it on, a string or bytes (or
//   Verdict.replace(msg)) to pass that on in its place, Verdict.DROP, or
//   Verdict.close(code, reason) to close the client (and the upstream).
//   Synchronous: messages of one direction go on in the order they came.
// - onSubscribe(req), onClientPublish(req): a real-time namespace's guest
//   (`guest = "x.wasm"` on a `[[namespaces]]` table of a centrifugo route;
//   it needs no onMessage). A client asks to subscribe to `req.channel`
//   (`req.client`, `req.user`, `req.info` the token's info claim): return
//   nothing (or true) to allow, false to refuse with 103 (permission
//   denied), or an error code (or Verdict.refuse(code)). A client publishes
//   `req.data` (a value; `req.text` its JSON): return nothing to publish it,
//   a string or bytes (JSON; or Verdict.replace(x)) to publish that
//   instead, Verdict.DROP (the client gets 103) or Verdict.drop(code).
// - onPusherConnect(req), onPusherSubscribe(req), onPusherClientEvent(req):
//   a Pusher app's guest (`guest = "x.wasm"` on a pusher route's
//   `[[route.apps]]`). A connection opens (`req.target`, `req.path`,
//   `req.query(name)`, `req.header(name)`, `req.socketId`): nothing to
//   allow, Verdict.refuse(code, message) to refuse (4000–4099 as given,
//   anything else 4009). A client subscribes (`req.channel`, `req.auth`,
//   `req.signature` "none"/"passed"/"failed" from weir's HMAC check,
//   `req.channelData`, `req.user`): nothing to leave it to weir's own
//   check, Verdict.authorise(member) to subscribe whatever the signature
//   (member: the presence channel data, `{ user_id, user_info }`, or none
//   for the client's own), Verdict.refuse(status, message). A client event
//   (`req.event`, `req.data`): as onClientPublish (Verdict.DROP drops it
//   silently, Verdict.drop(code) tells the sender).
//   These five decide at once, as Rust's do: a hook that throws or returns
//   a promise answers nothing, and the gateway fails the question (as for
//   a Rust guest's trap: error 100, `GuestError`) while the instance goes on.
// - checkState(state): optional, run by a deploy or rollback before this
//   version serves (the `weir:gateway/state` export): `state` is a live
//   connection's saved conn.state; throw (or return false or a message)
//   when this version cannot work with it, and the deploy is refused with
//   the count (unless the operator resets state). Without it the check is
//   that the attachment is JSON, what every version of this SDK writes.
//
// On a route with `realtime = true`, `await conn.history(channel, { limit,
// newest })`, `await conn.presence(channel)` (and route.history,
// route.presence) read the real-time core's channels: the answer comes in
// a later batch, as a fetch's does.
//
// Any hook may be `async` (weir:gateway 0.4.0): `await fetch(...)`, a
// Promise around setTimeout, `conn.setTimer`. What follows an await runs
// when the event it waits for arrives, in a later batch: the SDK's
// microtasks (src/promise.js) run after each event of a batch, inside the
// gateway's call. src/io.js has fetch, timers and kv.
//
// `conn.state` is the connection's state: any JSON value. After each hook
// the SDK compares its JSON with what it saved last and, when it changed,
// stores it in the connection's host-held attachment, so it survives the
// instance being replaced (recycle_after, a fault, a deploy); mutating an
// object in place (`conn.state.n++`) counts as a change.
//
// A hook that throws closes only its connection with 1011 (the error is
// logged with its stack); the instance and the batch's other connections
// go on; so does an async hook whose promise rejects. Out of memory and
// the route's deadline end the whole batch instead (its connections get
// 1011, a fresh instance takes over), as for a Rust guest. `this` in a
// hook is the handler object, one per instance: keep nothing there that
// must be shared or durable.

import {
  EVENT_HEADER_BYTES,
  EventKind,
  CommandWriter,
  decodeUtf8,
  decodeUtf8Fast,
  byteString,
  isAsciiByteString,
  decodeByteString,
  encodeUtf8,
  parseConnInfo,
  AbiError,
  LITTLE_ENDIAN,
  readU64,
  splitHttpResponse,
  splitHttpError,
  splitHistory,
  splitPresence,
  splitRtRequest,
  DIRECTIONS,
  toBytes,
} from "./abi.js";
import * as questions from "./questions.js";
import {
  WeirPromise,
  runAsync,
  drainMicrotasks,
  hasMicrotasks,
  takeUnhandled,
  swapContext,
  queueMicrotask,
  setReportError,
  outcome,
  context,
  microtasks,
} from "./promise.js";
import * as io from "./io.js";

export { CommandWriter } from "./abi.js";
export { WeirPromise } from "./promise.js";
export {
  fetch,
  setTimeout,
  clearTimeout,
  setInterval,
  clearInterval,
  kv,
  Headers,
  Response,
  FetchError,
  ReadError,
  MAX_PENDING_REQUESTS,
  MAX_PENDING_TIMERS,
  MAX_PENDING_READS,
} from "./io.js";
export { queueMicrotask } from "./promise.js";

/** `bytes` (a binary message) decoded as UTF-8, or null when it is not UTF-8. */
export function utf8(bytes) {
  return decodeUtf8(bytes);
}

/** `text` encoded as UTF-8 bytes. */
export function bytes(text) {
  return encodeUtf8(text);
}

/** Log levels, as the WIT `level` enum spells them. */
export const Level = Object.freeze({
  ERROR: "error",
  WARN: "warn",
  INFO: "info",
  DEBUG: "debug",
  TRACE: "trace",
});

/** Which way a proxied message travels (onProxyMessage's `direction`). */
export const Direction = Object.freeze({
  TO_UPSTREAM: "to-upstream",
  TO_CLIENT: "to-client",
});

/**
 * What a proxy filter does with one message (onProxyMessage's return):
 * PASS it on, pass a replacement on instead (`replace(msg)`: a string as
 * text, bytes as binary), DROP it, or `close(code, reason)` the client
 * (the upstream gets a close of its own) and pass nothing on.
 */
export const Verdict = Object.freeze({
  PASS: Object.freeze({ verdict: "pass" }),
  DROP: Object.freeze({ verdict: "drop" }),
  replace(msg) {
    if (typeof msg !== "string") msg = toBytes(msg);
    return Object.freeze({ verdict: "replace", message: msg });
  },
  close(code = 1000, reason = "") {
    return Object.freeze({ verdict: "close", code, reason: String(reason) });
  },
  // The real-time guests' answers (onSubscribe, onClientPublish and the
  // Pusher hooks); PASS, DROP and replace serve them too.
  /** Allow a subscribe or connection (what returning nothing does). */
  ALLOW: Object.freeze({ verdict: "allow" }),
  /**
   * Refuse a subscribe or connection with `code` (a Centrifugo error code;
   * a Pusher close code or subscription status) and, for Pusher, `message`.
   */
  refuse(code, message = "") {
    return Object.freeze({ verdict: "refuse", code: codeOf(code), message: String(message) });
  },
  /**
   * A Pusher subscribe the guest authorised itself (whatever weir's
   * signature check said); for a presence channel `member` is the member's
   * channel data (`{ user_id, user_info }`, or its JSON), none for the
   * client's own.
   */
  authorise(member) {
    const channelData = member === undefined || member === null ? "" : typeof member === "string" ? member : JSON.stringify(member);
    return Object.freeze({ verdict: "authorise", channelData });
  },
  /** Publish nothing; the publisher gets `code` (0: Centrifugo's 103; a Pusher event is dropped silently). */
  drop(code = 0) {
    return Object.freeze({ verdict: "drop", code: codeOf(code) });
  },
});

function codeOf(code) {
  const n = Number(code);
  if (!Number.isInteger(n) || n < 0 || n > 0xffff) throw new RangeError(`weir: a code is 0–65535, not ${String(code)}`);
  return n;
}

export { SubscribeRequest, PublishRequest, ConnectRequest, ChannelRequest, ClientEventRequest } from "./questions.js";

let hostImport = null;

/** Write a line to the gateway log (prefixed there with the route). */
export function log(level, msg) {
  if (hostImport) hostImport.log(level, String(msg));
}

/**
 * The globals a handler's code names: `__weir*` are what src/transform.mjs
 * rewrites `Promise`, `fetch`, `setTimeout`... into (so the same code runs
 * under node's test runner); the plain names too where the engine has none
 * (QuickJS has no fetch or timers), for code the rewrite did not see.
 */
const GLOBALS = {
  Promise: WeirPromise,
  fetch: io.fetch,
  setTimeout: io.setTimeout,
  clearTimeout: io.clearTimeout,
  setInterval: io.setInterval,
  clearInterval: io.clearInterval,
  queueMicrotask,
  Response: io.Response,
  Headers: io.Headers,
};

/** The name src/transform.mjs gives global `name`. */
export function weirGlobal(name) {
  return `__weir${name[0].toUpperCase()}${name.slice(1)}`;
}

function installGlobals() {
  globalThis.__weirAsync = runAsync;
  for (const [name, value] of Object.entries(GLOBALS)) {
    globalThis[weirGlobal(name)] = value;
    if (name !== "Promise" && typeof globalThis[name] === "undefined") globalThis[name] = value;
  }
}

/** console.log/info/debug/warn/error for guests (QuickJS has none). */
function installConsole() {
  if (typeof globalThis.console !== "undefined") return;
  const line = (level) => (...args) =>
    log(level, args.map((a) => (typeof a === "string" ? a : safeJson(a))).join(" "));
  globalThis.console = {
    log: line(Level.INFO),
    info: line(Level.INFO),
    debug: line(Level.DEBUG),
    warn: line(Level.WARN),
    error: line(Level.ERROR),
  };
}

function safeJson(v) {
  try {
    return v instanceof Error ? String(v) : JSON.stringify(v);
  } catch {
    return String(v);
  }
}

/** The first query parameter `name` of a query string, raw; "" without `=`. */
function queryParam(query, name) {
  if (!query) return undefined;
  for (const pair of query.split("&")) {
    const eq = pair.indexOf("=");
    const key = eq < 0 ? pair : pair.slice(0, eq);
    if (key === name) return eq < 0 ? "" : pair.slice(eq + 1);
  }
  return undefined;
}

/** The HTTP request asking to open a WebSocket on this route. */
export class Request {
  constructor(raw) {
    /** Request path, e.g. `/chat/lobby` (not percent-decoded). */
    this.path = raw.path;
    /** Query string without `?`, "" when there is none. */
    this.query = raw.query;
    /** Headers in arrival order, `[name, value]`, names lower-case. */
    this.headers = raw.headers;
    /** The peer's `ip:port`. */
    this.remoteAddr = raw.remoteAddr;
    /** The route's path parameters, `[name, value]`, in the route's order. */
    this.params = raw.params;
  }

  /** The first header `name` (case-insensitive), or undefined. */
  header(name) {
    const want = name.toLowerCase();
    const h = this.headers.find(([n]) => n === want);
    return h ? h[1] : undefined;
  }

  /** The route parameter `name`, not percent-decoded, or undefined. */
  param(name) {
    const p = this.params.find(([n]) => n === name);
    return p ? p[1] : undefined;
  }

  /** The first query parameter `name`, raw; "" for one without `=`. */
  queryParam(name) {
    return queryParam(this.query, name);
  }

  /** The subprotocols the client offered, in its order of preference. */
  protocols() {
    return this.headers
      .filter(([n]) => n === "sec-websocket-protocol")
      .flatMap(([, v]) => v.split(","))
      .map((p) => p.trim())
      .filter((p) => p);
  }
}

/**
 * One connection as a hook sees it: its id, request target and route
 * parameters, its state, and everything a handler can do to it. One object
 * per connection for its whole life in an instance.
 */
export class Conn {
  constructor(id, info, runtime) {
    /** Unique within the gateway process, never 0. */
    this.id = id;
    /** The request target it was opened with: `path` or `path?query`. */
    this.target = info.target;
    /** The route parameters, `[name, value]`, in the route's order. */
    this.params = info.params;
    /** The connection's state: any JSON value, saved when it changes. */
    this.state = undefined;
    this._saved = "";
    this._rt = runtime;
    this._w = runtime.writer;
    this._failed = false;
    if (info.attachment.length > 0) {
      const text = decodeUtf8(info.attachment);
      try {
        this.state = JSON.parse(text);
        this._saved = JSON.stringify(this.state);
      } catch (e) {
        log(Level.WARN, `connection state does not decode (${e}); starting from undefined`);
        this._saved = text === null ? "\u0000" : text;
      }
    }
  }

  /** The route parameter `name` (`/chat/{room}` opened as `/chat/lobby`: "lobby"), or undefined. */
  param(name) {
    for (const [n, v] of this.params) if (n === name) return v;
    return undefined;
  }

  /** The request path, without the query. */
  get path() {
    const q = this.target.indexOf("?");
    return q < 0 ? this.target : this.target.slice(0, q);
  }

  /** The query parameter `name` of the target, raw, or undefined. */
  queryParam(name) {
    const q = this.target.indexOf("?");
    return q < 0 ? undefined : queryParam(this.target.slice(q + 1), name);
  }

  /** The batch's answer, to address other connections by id (`conn.ctx.sendText(id, "hi")`). */
  get ctx() {
    return this._w;
  }

  /** Send `msg` to this connection: a string as text, bytes as binary. */
  send(msg) {
    this._w.send(this.id, msg);
  }

  /** Send a text message. */
  sendText(text) {
    this._w.sendText(this.id, text);
  }

  /** Send a binary message (Uint8Array or ArrayBuffer). */
  sendBinary(bytes) {
    this._w.sendBinary(this.id, bytes);
  }

  /** Close with `code` (1000–4999) and a short reason; onClose follows. */
  close(code = 1000, reason = "") {
    this._w.close(this.id, code, reason);
  }

  /** Subscribe to `topic` (topics belong to the route). */
  subscribe(topic) {
    this._w.subscribe(this.id, topic);
  }

  /** Unsubscribe from `topic`. */
  unsubscribe(topic) {
    this._w.unsubscribe(this.id, topic);
  }

  /** Deliver `msg` to every *other* subscriber of `topic`, on every worker. */
  publish(topic, msg) {
    this._w.publish(topic, msg, this.id);
  }

  /** Deliver `msg` to every subscriber of `topic`, this connection included. */
  broadcast(topic, msg) {
    this._w.publish(topic, msg, 0);
  }

  /** `fetch(url, init)` for this connection (what fetch does inside its hooks). */
  fetch(url, init) {
    const saved = swapContext(this);
    try {
      return io.fetch(url, init);
    } finally {
      swapContext(saved);
    }
  }

  /**
   * A timer of this connection, due in `ms`: `callback(conn, tag)` runs
   * then, or, without one (or in an instance that replaced this one), the
   * handler's `onTimer(conn, tag)`. Ends with the connection. Returns its tag.
   */
  setTimer(ms, callback) {
    return this._rt.timer(this, ms, callback ?? null, null, 0);
  }

  /** Cancel this connection's timer `tag`. */
  cancelTimer(tag) {
    this._rt.cancel(tag);
  }

  /**
   * Read up to `limit` (default 0: the position alone; the gateway caps
   * it) publications of real-time channel `channel`, oldest first or, with
   * `newest`, newest first (a `realtime = true` route). A promise of `{
   * position: { offset, epoch }, publications: [{ offset, data, text }] }`,
   * rejected with a ReadError; for this connection (it ends with it).
   */
  history(channel, options = {}) {
    return live("conn.history").read(this, true, channel, options);
  }

  /** Read `channel`'s presence: a promise of `[{ client, user, info, connInfo }]`, or a ReadError. */
  presence(channel) {
    return live("conn.presence").read(this, false, channel, null);
  }

  /**
   * Pass a message of the filter's own through this proxied connection,
   * `direction` "to-upstream" or "to-client" (a proxy route's filter; any
   * other route ignores it).
   */
  forward(direction, msg) {
    this._w.forward(this.id, directionByte(direction), msg);
  }
}

function directionByte(direction) {
  const d = DIRECTIONS.indexOf(direction);
  if (d < 0) throw new TypeError(`weir: a direction is "to-upstream" or "to-client", not ${String(direction)}`);
  return d;
}

/**
 * The route: what a hook may do that is about no one connection. Its
 * requests and timers outlive every connection (a route timer outlives the
 * instance too: a fresh one gets it through `onTimer(route, tag)`).
 */
export const route = Object.freeze({
  /** True: `onTimer` and `onKvError` get this as their first argument. */
  isRoute: true,
  /** Deliver `msg` to every subscriber of `topic`. */
  publish(topic, msg) {
    live("route.publish").writer.publish(topic, msg, 0);
  },
  /** Send `msg` to connection `id` (a string as text, bytes as binary). */
  send(id, msg) {
    live("route.send").writer.send(id, msg);
  },
  /** Close connection `id`. */
  close(id, code = 1000, reason = "") {
    live("route.close").writer.close(id, code, reason);
  },
  /** A route timer (see Conn.setTimer); returns its tag. */
  setTimer(ms, callback) {
    return live("route.setTimer").timer(null, ms, callback ?? null, null, 0);
  },
  cancelTimer(tag) {
    live("route.cancelTimer").cancel(tag);
  },
  /** `fetch` for the route: its answer comes whatever connection closes. */
  fetch(url, init) {
    const saved = swapContext(null);
    try {
      return io.fetch(url, init);
    } finally {
      swapContext(saved);
    }
  },
  kv: io.kv,
  /** Conn.history for the route: its answer comes whatever connection closes. */
  history(channel, options = {}) {
    return live("route.history").read(null, true, channel, options);
  },
  /** Conn.presence for the route. */
  presence(channel) {
    return live("route.presence").read(null, false, channel, null);
  },
});

let liveRuntime = null;

function live(what) {
  const rt = liveRuntime;
  if (rt === null || !rt.inCall || rt.upgrading) {
    throw new Error(`weir: ${what} is only possible while a hook runs (not in onUpgrade or at top level)`);
  }
  return rt;
}

const EMPTY = new Uint8Array(0);

/** Largest batch data buffer decoded as one byte string (see handle). */
const BATCH_STRING_MAX_BYTES = 1 << 20;
const NO_INFO = { target: "", params: [], attachment: EMPTY };

/** An out-of-memory error: the instance cannot go on, let it be replaced. */
function fatal(e) {
  return e instanceof Error && /out of memory/i.test(String(e.message));
}

/** What an http-request entry, a timer entry and a history or presence read are, in Runtime.pending. */
const FETCH = 1;
const TIMER = 2;
const HISTORY = 3;
const PRESENCE = 4;

/** The handler behind a component instance: its hooks and its connections. */
class Runtime {
  constructor(app, host, kv) {
    this.app = typeof app === "function" ? new app() : app;
    this.host = host;
    this.kvImport = kv || null;
    this.conns = new Map();
    this.writer = new CommandWriter();
    /** Inside a guest call (a batch or an upgrade): I/O may be asked for. */
    this.inCall = false;
    /** Inside onUpgrade: only one fetch, no commands. */
    this.upgrading = false;
    /** The fetch an upgrade made, waiting to become its `defer`. */
    this.upgradeFetch = null;
    /** Deferred upgrades by tag: the hook's promise and its fetch's settlers. */
    this.deferred = new Map();
    /** Requests and timers waiting, by tag. */
    this.pending = new Map();
    this.requests = 0;
    this.timers = 0;
    this.reads = 0;
    /** Some microtask ran in this batch: settle every connection it had. */
    this.asyncRan = false;
    this.batchConns = [];
    this.warnedNative = false;
  }

  kvGet(key) {
    return this.kvImport ? this.kvImport.get(key) : null;
  }

  // ------------------------------------------------------------ I/O

  /** Send `req` for `ctx` (a Conn, or null for the route); a WeirPromise of its Response. */
  request(ctx, req) {
    if (this.upgrading) {
      if (this.upgradeFetch !== null) {
        return WeirPromise.reject(new io.FetchError("busy", "onUpgrade may make one request (the upgrade's defer)"));
      }
      const { promise, resolve, reject } = WeirPromise.withResolvers();
      this.upgradeFetch = { tag: io.newTag(), req, resolve, reject };
      return promise;
    }
    if (this.requests >= io.MAX_PENDING_REQUESTS) {
      return WeirPromise.reject(new io.FetchError("busy", `${io.MAX_PENDING_REQUESTS} requests already waiting`));
    }
    const tag = io.newTag();
    this.writer.httpRequest(ctx === null ? 0 : ctx.id, tag, req.method, req.url, req.headers, req.body);
    const { promise, resolve, reject } = WeirPromise.withResolvers();
    this.pending.set(tag, { kind: FETCH, ctx, resolve, reject, url: req.url });
    this.requests++;
    if (ctx !== null) (ctx._io || (ctx._io = new Set())).add(tag);
    return promise;
  }

  /**
   * Start a timer for `ctx` due in `ms`: `fn` runs then (with `args`, or
   * with (conn, tag) when `args` is null); `every` > 0 re-arms it. Returns its tag.
   */
  timer(ctx, ms, fn, args, every) {
    if (this.timers >= io.MAX_PENDING_TIMERS) {
      throw new RangeError(`weir: ${io.MAX_PENDING_TIMERS} timers already waiting in this instance`);
    }
    const n = Number(ms);
    const delay = Number.isFinite(n) && n > 0 ? Math.floor(n) : 0;
    const tag = io.newTag();
    this.writer.setTimer(ctx === null ? 0 : ctx.id, tag, delay);
    this.pending.set(tag, { kind: TIMER, ctx, fn, args, every });
    this.timers++;
    if (ctx !== null) (ctx._io || (ctx._io = new Set())).add(tag);
    return tag;
  }

  /**
   * A history (`history` true) or presence read of `channel` for `ctx` (a
   * Conn, or null for the route); a WeirPromise of its answer.
   */
  read(ctx, history, channel, options) {
    const name = typeof channel === "string" ? channel : "";
    if (name === "") {
      return WeirPromise.reject(new io.ReadError("bad-channel", "a channel is a non-empty string"));
    }
    if (this.reads >= io.MAX_PENDING_READS) {
      return WeirPromise.reject(new io.ReadError("busy", `${io.MAX_PENDING_READS} reads already waiting`));
    }
    const tag = io.newTag();
    const id = ctx === null ? 0 : ctx.id;
    if (history) {
      const n = Number(options?.limit ?? 0);
      const limit = Number.isFinite(n) && n > 0 ? Math.min(Math.floor(n), 0xffffffff) : 0;
      this.writer.historyRead(id, tag, limit, Boolean(options?.newest), name);
    } else {
      this.writer.presenceRead(id, tag, name);
    }
    const { promise, resolve, reject } = WeirPromise.withResolvers();
    this.pending.set(tag, { kind: history ? HISTORY : PRESENCE, ctx, resolve, reject });
    this.reads++;
    if (ctx !== null) (ctx._io || (ctx._io = new Set())).add(tag);
    return promise;
  }

  /** Cancel timer `tag` (an unknown or fired one is ignored). */
  cancel(tag) {
    const entry = this.pending.get(tag);
    if (entry === undefined || entry.kind !== TIMER) return;
    this.writer.cancelTimer(entry.ctx === null ? 0 : entry.ctx.id, tag);
    this.forget(tag, entry);
  }

  forget(tag, entry) {
    this.pending.delete(tag);
    this.uncount(entry);
    if (entry.ctx !== null && entry.ctx._io) entry.ctx._io.delete(tag);
  }

  /** `conn` closed: forget its requests and timers (the gateway drops their answers). */
  dropIo(conn) {
    if (!conn._io) return;
    for (const tag of conn._io) {
      const entry = this.pending.get(tag);
      if (entry !== undefined) {
        this.pending.delete(tag);
        this.uncount(entry);
      }
    }
    conn._io = null;
  }

  uncount(entry) {
    if (entry.kind === FETCH) this.requests--;
    else if (entry.kind === TIMER) this.timers--;
    else this.reads--;
  }

  /** An http-response, http-error, history or presence event: settle what waits for it. */
  answered(id, tag, settleWith, kind = FETCH) {
    const entry = this.pending.get(tag);
    if (entry === undefined || entry.kind !== kind) {
      const what = kind === FETCH ? "request" : "read";
      log(Level.DEBUG, `answer to ${what} ${tag}, which this instance did not send (it replaced the one that did); dropped`);
      return;
    }
    this.forget(tag, entry);
    const saved = swapContext(entry.ctx);
    try {
      settleWith(entry);
    } finally {
      swapContext(saved);
    }
  }

  /** A timer event: run its callback, or onTimer. */
  fired(id, tag) {
    const entry = this.pending.get(tag);
    const target = id === 0 ? route : this.known(id);
    if (target !== route && target._failed) return;
    if (entry !== undefined && entry.kind === TIMER && entry.every > 0) {
      this.writer.setTimer(id, tag, entry.every);
    } else if (entry !== undefined) {
      this.forget(tag, entry);
    }
    const saved = swapContext(id === 0 ? null : target);
    try {
      if (entry !== undefined && entry.kind === TIMER && entry.fn !== null) {
        if (entry.args === null) entry.fn(target, tag);
        else entry.fn(...entry.args);
      } else if (this.app.onTimer) {
        this.watch(target, "onTimer", this.app.onTimer(target, tag));
      }
    } catch (e) {
      if (target === route) this.routeFailed("a timer", e);
      else this.failed(target, "a timer", e);
    } finally {
      swapContext(saved);
    }
  }

  // ------------------------------------------------------------ hooks

  /**
   * A hook returned `r`: if it is a promise, a rejection fails `conn` (or
   * is logged for the route) when it comes.
   */
  watch(conn, hook, r) {
    if (r === undefined || r === null || typeof r.then !== "function") return;
    if (r instanceof WeirPromise) {
      this.asyncRan = true;
      r.then(undefined, (e) => {
        if (conn === route || conn === null) this.routeFailed(hook, e);
        else this.failed(conn, hook, e);
      });
    } else if (!this.warnedNative) {
      this.warnedNative = true;
      log(
        Level.WARN,
        `${hook} returned a native Promise: what follows its first await never runs in the gateway ` +
          "(build with guest-sdk/js/build.mjs, which makes async hooks run)",
      );
    }
  }

  routeFailed(what, e) {
    if (fatal(e)) throw e;
    log(Level.ERROR, `handler threw in ${what} (route): ${describe(e)}`);
  }

  /** Run microtasks, then report rejections nobody handled. */
  drain() {
    if (hasMicrotasks()) {
      this.asyncRan = true;
      drainMicrotasks();
    }
    const lost = takeUnhandled();
    for (const e of lost) log(Level.ERROR, `unhandled promise rejection: ${describe(e)}`);
  }

  // ------------------------------------------------------------ upgrade

  upgrade(raw) {
    this.inCall = true;
    this.upgrading = true;
    this.upgradeFetch = null;
    try {
      const app = this.app;
      let answer;
      try {
        answer = app.onUpgrade ? app.onUpgrade(new Request(raw)) : undefined;
      } catch (e) {
        if (fatal(e)) throw e;
        log(Level.ERROR, `handler threw in onUpgrade: ${describe(e)}`);
        return { tag: "reject", val: 500 };
      }
      if (answer instanceof WeirPromise) {
        this.drain();
        const o = outcome(answer);
        if (o === undefined) return this.defer(answer);
        if (!o.ok) {
          if (fatal(o.value)) throw o.value;
          log(Level.ERROR, `handler threw in onUpgrade: ${describe(o.value)}`);
          return { tag: "reject", val: 500 };
        }
        answer = o.value;
      } else if (answer !== undefined && answer !== null && typeof answer.then === "function") {
        // A native async hook: its decision would come after the answer is
        // due, and accepting a Promise would let an auth check through.
        log(Level.ERROR, "onUpgrade returned a native Promise (not built by build.mjs); refused with 500");
        return { tag: "reject", val: 500 };
      }
      return this.decide(answer);
    } finally {
      this.inCall = false;
      this.upgrading = false;
      this.upgradeFetch = null;
    }
  }

  /** onUpgrade awaits: its one fetch becomes the upgrade's `defer`. */
  defer(promise) {
    const f = this.upgradeFetch;
    if (f === null) {
      log(Level.ERROR, "onUpgrade awaited something other than one fetch (a timer?); refused with 500");
      return { tag: "reject", val: 500 };
    }
    promise.then(undefined, () => {}); // settled and read in resumeUpgrade
    if (this.deferred.size >= io.MAX_PENDING_REQUESTS) {
      // The gateway gave up on the oldest (handshake_timeout): forget it.
      this.deferred.delete(this.deferred.keys().next().value);
    }
    this.deferred.set(f.tag, { promise, resolve: f.resolve, reject: f.reject, url: f.req.url });
    const { method, url, headers, body } = f.req;
    return { tag: "defer", val: { tag: f.tag, request: { method, url, headers, body } } };
  }

  resumeUpgrade(tag, raw, result) {
    const t = Number(tag);
    const d = this.deferred.get(t);
    if (d === undefined) {
      log(Level.ERROR, `resume of upgrade ${t}, which this instance did not defer (it was replaced); refused with 500`);
      return { tag: "reject", val: 500 };
    }
    this.deferred.delete(t);
    this.inCall = true;
    this.upgrading = true;
    this.upgradeFetch = null;
    try {
      if (result.tag === "response") {
        const r = result.val;
        d.resolve(new io.Response(r.body, { status: r.status, headers: r.headers, url: d.url }));
      } else {
        const [code, message] = result.val;
        d.reject(io.fetchErrorOf(code, message));
      }
      this.drain();
      const o = outcome(d.promise);
      if (o === undefined) {
        log(Level.ERROR, "onUpgrade awaited again after its request (one request per upgrade); refused with 500");
        return { tag: "reject", val: 500 };
      }
      if (!o.ok) {
        if (fatal(o.value)) throw o.value;
        log(Level.ERROR, `handler threw in onUpgrade: ${describe(o.value)}`);
        return { tag: "reject", val: 500 };
      }
      return this.decide(o.value);
    } finally {
      this.inCall = false;
      this.upgrading = false;
      this.upgradeFetch = null;
    }
  }

  /** onUpgrade's answer as the WIT's upgrade-response. */
  decide(answer) {
    if (answer === undefined || answer === null || answer === true) {
      return { tag: "accept", val: { protocol: null, attachment: EMPTY } };
    }
    if (answer === false) return { tag: "reject", val: 403 };
    if (typeof answer === "number") return { tag: "reject", val: answer };
    const state = answer.state;
    let attachment = EMPTY;
    if (state !== undefined) {
      try {
        attachment = encodeUtf8(JSON.stringify(state));
      } catch (e) {
        log(Level.ERROR, `onUpgrade's state is not JSON (${describe(e)}); refused with 500`);
        return { tag: "reject", val: 500 };
      }
    }
    return { tag: "accept", val: { protocol: answer.protocol ?? null, attachment } };
  }

  /** The Conn of `id`, restored from the host if this instance has not seen it. */
  known(id) {
    let conn = this.conns.get(id);
    if (conn === undefined) {
      const bytes = this.host.connection(id);
      const info = bytes ? parseConnInfo(bytes) : null;
      conn = new Conn(id, info || NO_INFO, this);
      this.conns.set(id, conn);
      io.saltTags(id);
    }
    return conn;
  }

  /**
   * Save `conn.state` if its JSON changed since it was last saved. A state
   * that is not JSON (a BigInt, a cycle) fails its connection like a throw.
   */
  settle(conn) {
    const state = conn.state;
    if (state === undefined && conn._saved === "") return;
    let json;
    try {
      json = state === undefined ? "" : JSON.stringify(state);
    } catch (e) {
      this.failed(conn, "saving conn.state", e);
      return;
    }
    if (json !== conn._saved) {
      this.writer.setAttachment(conn.id, json);
      conn._saved = json;
    }
  }

  /** A hook threw: log it, close its connection with 1011. */
  failed(conn, hook, e) {
    if (fatal(e)) throw e;
    if (conn._failed) return;
    conn._failed = true;
    log(Level.ERROR, `handler threw in ${hook} (connection ${conn.id}): ${describe(e)}`);
    this.writer.close(conn.id, 1011, "handler error");
  }

  handle(batch) {
    this.inCall = true;
    this.asyncRan = false;
    try {
      const out = this.run(batch);
      return out;
    } finally {
      this.inCall = false;
      this.batchConns.length = 0;
    }
  }

  run(batch) {
    const headers = batch.events;
    const data = batch.data;
    const app = this.app;
    const w = this.writer;
    w.reset();
    // The host checked what it sends; a batch that still breaks the ABI is
    // a host bug, and failing the batch (1011 for its connections) is the
    // honest answer: an AbiError thrown here traps the instance. Each
    // range is checked as its event comes up, in this one pass.
    if (headers.length % EVENT_HEADER_BYTES !== 0) {
      throw new AbiError("HeadersNotWhole", null, `${headers.length} bytes`);
    }
    const n = headers.length / EVENT_HEADER_BYTES;
    const size = data.length;
    // One typed-array read per field where the buffer allows (see
    // LITTLE_ENDIAN), else a DataView.
    const words =
      LITTLE_ENDIAN && headers.byteOffset % 4 === 0
        ? new Uint32Array(headers.buffer, headers.byteOffset, headers.length >> 2)
        : null;
    const v = new DataView(headers.buffer, headers.byteOffset, headers.byteLength);
    w.srcBytes = data;
    // The whole data buffer as one byte string, made by two native calls
    // per batch instead of per message; a text message is then a slice of
    // it (itself when the batch is all ASCII, decoded otherwise). Not for
    // big batches: the string costs two bytes per byte.
    const bin = size <= BATCH_STRING_MAX_BYTES ? byteString(data) : null;
    const ascii = bin !== null && isAsciiByteString(bin);
    const touched = this.batchConns;
    for (let i = 0; i < n; i++) {
      const at = i * EVENT_HEADER_BYTES;
      let id;
      let offset;
      let end;
      if (words !== null) {
        const k = at >> 2;
        id = words[k] + words[k + 1] * 4294967296;
        offset = words[k + 3];
        end = offset + words[k + 4];
      } else {
        id = v.getUint32(at, true) + v.getUint32(at + 4, true) * 4294967296;
        offset = v.getUint32(at + 12, true);
        end = offset + v.getUint32(at + 16, true);
      }
      const kind = headers[at + 8];
      if (end > size) throw new AbiError("RangeOutOfBounds", i, "payload");
      if (kind === EventKind.TEXT || kind === EventKind.BINARY) {
        const conn = this.conns.get(id) || this.known(id);
        if (conn._failed) continue;
        let msg;
        if (kind === EventKind.TEXT) {
          if (ascii) msg = bin.slice(offset, end);
          else if (bin !== null) msg = decodeByteString(bin.slice(offset, end));
          else msg = decodeUtf8Fast(data, offset, end);
          if (msg === null) throw new AbiError("TextNotUtf8", i);
          w.srcText = msg;
          w.srcStart = offset;
          w.srcEnd = end;
        } else {
          msg = data.subarray(offset, end);
        }
        // The hot path: the context swapped and the queue checked without
        // a call (calls are what QuickJS pays most for).
        const saved = context.conn;
        context.conn = conn;
        try {
          const r = app.onMessage(conn, msg);
          if (r !== undefined) this.watch(conn, "onMessage", r);
        } catch (e) {
          context.conn = saved;
          this.failed(conn, "onMessage", e);
          continue;
        }
        context.conn = saved;
        if (microtasks.length !== 0) this.drain();
        if (conn.state !== undefined || conn._saved !== "") this.settle(conn);
        if (this.asyncRan) touched.push(conn);
      } else if (kind === EventKind.OPEN) {
        const info = parseConnInfo(data, offset, end);
        if (info === null) throw new AbiError("ConnInfoMalformed", i);
        const conn = new Conn(id, info, this);
        this.conns.set(id, conn);
        io.saltTags(id);
        if (app.onOpen) {
          const saved = swapContext(conn);
          try {
            this.watch(conn, "onOpen", app.onOpen(conn));
          } catch (e) {
            swapContext(saved);
            this.failed(conn, "onOpen", e);
            continue;
          }
          swapContext(saved);
          this.drain();
        }
        this.settle(conn);
        touched.push(conn);
      } else if (kind === EventKind.CLOSE) {
        const conn = this.known(id);
        const reason = decodeUtf8Fast(data, offset, end);
        if (reason === null) throw new AbiError("ReasonNotUtf8", i);
        if (app.onClose) {
          const saved = swapContext(conn);
          try {
            const r = app.onClose(conn, v.getUint16(at + 10, true), reason);
            if (r !== undefined && r !== null && typeof r.then === "function") {
              this.watch(route, "onClose", r);
            }
          } catch (e) {
            if (fatal(e)) throw e;
            log(Level.ERROR, `handler threw in onClose (connection ${id}): ${describe(e)}`);
          } finally {
            swapContext(saved);
          }
          this.drain();
        }
        this.dropIo(conn);
        conn._closed = true;
        this.conns.delete(id);
      } else if (kind === EventKind.PROXY_TEXT || kind === EventKind.PROXY_BINARY) {
        const dir = headers[at + 9];
        if (dir > 1) throw new AbiError("ReservedByteSet", i, `direction ${dir}`);
        const conn = this.conns.get(id) || this.known(id);
        if (conn._failed) continue;
        let msg;
        if (kind === EventKind.PROXY_TEXT) {
          msg = bin !== null ? decodeByteString(bin.slice(offset, end)) : decodeUtf8Fast(data, offset, end);
          if (msg === null) throw new AbiError("TextNotUtf8", i);
          w.srcText = msg;
          w.srcStart = offset;
          w.srcEnd = end;
        } else {
          msg = data.subarray(offset, end);
        }
        this.filter(conn, dir, msg);
        this.drain();
        if (!conn._failed) this.settle(conn);
        touched.push(conn);
      } else if (
        (kind >= EventKind.HTTP_RESPONSE && kind <= EventKind.TIMER) ||
        kind === EventKind.HISTORY ||
        kind === EventKind.PRESENCE
      ) {
        this.ioEvent(i, id, kind, v.getUint16(at + 10, true), data, offset, end);
        this.drain();
        if (id !== 0) {
          const conn = this.conns.get(id);
          if (conn !== undefined && !conn._closed) {
            this.settle(conn);
            touched.push(conn);
          }
        }
      } else if (kind >= EventKind.RT_SUBSCRIBE && kind <= EventKind.PUSHER_CLIENT_EVENT) {
        const r = splitRtRequest(data, offset, end);
        if (r === null) throw new AbiError("IoEventMalformed", i);
        const saved = swapContext(null);
        let failed;
        try {
          failed = questions.answer(app, w, kind, id, r);
        } finally {
          swapContext(saved);
        }
        if (failed !== null) {
          if (fatal(failed[1])) throw failed[1];
          log(Level.ERROR, `handler threw in ${failed[0]} (question ${r.call}; the gateway fails it): ${describe(failed[1])}`);
        }
        this.drain();
      } else if (kind === EventKind.KV_ERROR) {
        if (app.onKvError) {
          const key = data.slice(offset, end);
          const reason = io.kvReasonOf(v.getUint16(at + 10, true));
          const saved = swapContext(null);
          try {
            this.watch(route, "onKvError", app.onKvError(route, key, reason));
          } catch (e) {
            this.routeFailed("onKvError", e);
          } finally {
            swapContext(saved);
          }
          this.drain();
        }
      }
      // Kinds this SDK does not know (a newer host) are skipped.
    }
    // A continuation that ran for one connection may have changed
    // another's state: save every one this batch had (the gateway takes
    // an attachment only for a connection in the batch).
    if (this.asyncRan) {
      for (const conn of touched) if (!conn._closed && !conn._failed) this.settle(conn);
    }
    w.srcText = null;
    w.srcBytes = null;
    return w.finish();
  }

  /**
   * A proxy event: the filter's verdict on `msg` (direction byte `dir`)
   * becomes a forward, a close or nothing. No onProxyMessage: pass it on.
   */
  filter(conn, dir, msg) {
    const w = this.writer;
    const app = this.app;
    if (!app.onProxyMessage) {
      w.forward(conn.id, dir, msg);
      return;
    }
    let verdict;
    const saved = swapContext(conn);
    try {
      verdict = app.onProxyMessage(conn, DIRECTIONS[dir], msg);
    } catch (e) {
      swapContext(saved);
      this.failed(conn, "onProxyMessage", e);
      return;
    }
    swapContext(saved);
    if (verdict === undefined || verdict === Verdict.PASS) {
      w.forward(conn.id, dir, msg);
    } else if (verdict === Verdict.DROP) {
      // Nothing goes on.
    } else if (typeof verdict === "string" || verdict instanceof Uint8Array || verdict instanceof ArrayBuffer) {
      w.forward(conn.id, dir, verdict);
    } else if (verdict !== null && verdict.verdict === "replace") {
      w.forward(conn.id, dir, verdict.message);
    } else if (verdict !== null && verdict.verdict === "close") {
      w.close(conn.id, verdict.code, verdict.reason);
    } else if (verdict !== null && typeof verdict.then === "function") {
      verdict.then(undefined, () => {});
      this.failed(
        conn,
        "onProxyMessage",
        new TypeError("onProxyMessage returned a promise: a filter decides at once (messages go on in order)"),
      );
    } else {
      this.failed(conn, "onProxyMessage", new TypeError(`onProxyMessage returned ${safeJson(verdict)}, not a verdict`));
    }
  }

  /** An http-response, http-error, timer, history or presence event. */
  ioEvent(i, id, kind, code, data, offset, end) {
    if (id !== 0) {
      const conn = this.conns.get(id) || this.known(id);
      if (conn._failed) return;
    }
    if (kind === EventKind.TIMER) {
      if (end - offset !== 8) throw new AbiError("IoEventMalformed", i);
      this.fired(id, readU64(data, offset));
    } else if (kind === EventKind.HISTORY || kind === EventKind.PRESENCE) {
      const history = kind === EventKind.HISTORY;
      const r = history ? splitHistory(code, data, offset, end) : splitPresence(code, data, offset, end);
      if (r === null) throw new AbiError("IoEventMalformed", i);
      this.answered(
        id,
        r.tag,
        (entry) => {
          if (r.error !== 0) entry.reject(io.readErrorOf(r.error));
          else entry.resolve(history ? io.historyOf(r) : io.membersOf(r));
        },
        history ? HISTORY : PRESENCE,
      );
    } else if (kind === EventKind.HTTP_RESPONSE) {
      const r = splitHttpResponse(data, offset, end);
      if (r === null) throw new AbiError("IoEventMalformed", i);
      this.answered(id, r.tag, (entry) => entry.resolve(io.responseOf(code, r.head, r.body.slice(), entry.url)));
    } else {
      const r = splitHttpError(data, offset, end);
      if (r === null) throw new AbiError("IoEventMalformed", i);
      this.answered(id, r.tag, (entry) => entry.reject(io.fetchErrorOf(code, r.message)));
    }
  }
}

function describe(e) {
  if (e instanceof Error) {
    const stack = e.stack ? ` ${String(e.stack).trim().split("\n").join(" | ")}` : "";
    return `${e.name}: ${e.message}${stack}`;
  }
  return safeJson(e);
}

/**
 * The `weir:gateway/handler` export for `app` (a handler object, or a
 * class to instantiate once per instance). `host` is the
 * `weir:gateway/host` import and `kv` the `weir:gateway/kv` one;
 * build.mjs generates the call, the test harness (src/testing.mjs) makes
 * its own.
 */
export function createHandler(app, host, kv) {
  // Checked here, at build time (componentize-qjs runs the module then), so
  // a handler without hooks fails its build instead of every batch.
  const hooks = typeof app === "function" ? app.prototype : app;
  if (
    !hooks ||
    (typeof hooks.onMessage !== "function" &&
      typeof hooks.onProxyMessage !== "function" &&
      !questions.hasQuestionHooks(hooks))
  ) {
    throw new TypeError(
      "weir: the handler module's default export needs an onMessage(conn, msg) hook " +
        "(or, for a proxy route's filter, onProxyMessage(conn, direction, msg); for a real-time " +
        "namespace's or Pusher app's guest, onSubscribe, onClientPublish or onPusher*): " +
        "export default { onMessage(conn, msg) { ... } }",
    );
  }
  hostImport = host;
  installConsole();
  installGlobals();
  setReportError((e) => log(Level.ERROR, `a microtask threw: ${describe(e)}`));
  let rt = null;
  // Bound at each call: one module serves every handler made in a process
  // (the test harness runs several).
  const runtime = () => {
    if (rt === null) rt = new Runtime(app, host, kv);
    liveRuntime = rt;
    hostImport = host;
    io.bindRuntime(rt);
    return rt;
  };
  return {
    upgrade: (req) => runtime().upgrade(req),
    resumeUpgrade: (tag, req, outcome) => runtime().resumeUpgrade(tag, req, outcome),
    handle: (batch) => runtime().handle(batch),
    // The `weir:gateway/state` export (build.mjs exports it as `state`).
    checkState: (attachments) => checkStates(runtime().app, attachments),
  };
}

/**
 * The `check-state` export: for each attachment, null when this version
 * can work with it (it is JSON, as this SDK writes conn.state, and the
 * handler's checkState(state), if any, accepts it), else why not. Nothing
 * is kept: the gateway calls it on a fresh instance, before a deploy or
 * rollback lets this version serve.
 */
function checkStates(app, attachments) {
  return Array.from(attachments, (bytes) => {
    if (bytes.length === 0) return null;
    const text = decodeUtf8(bytes);
    if (text === null) return "the attachment is not UTF-8 JSON (not a conn.state this SDK saved)";
    let state;
    try {
      state = JSON.parse(text);
    } catch (e) {
      return `the attachment is not JSON (${e.message}): not a conn.state this SDK saved`;
    }
    if (typeof app.checkState !== "function") return null;
    let v;
    try {
      v = app.checkState(state);
    } catch (e) {
      if (fatal(e)) throw e;
      return e instanceof Error ? e.message : safeJson(e);
    }
    if (v === undefined || v === null || v === true) return null;
    if (v === false) return "checkState refused it";
    if (typeof v === "string") return v;
    if (typeof v === "object" && typeof v.then === "function") {
      v.then(undefined, () => {});
      return "checkState returned a promise: it decides at once";
    }
    return `checkState returned ${safeJson(v)}: nothing (or true) accepts, false or a message refuses`;
  });
}
