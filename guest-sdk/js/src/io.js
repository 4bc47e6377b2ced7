// Outbound HTTP, timers and the key-value store for JavaScript handlers
// (weir:gateway 0.4.0), in the shapes of the web platform: `fetch` with a
// Response, `setTimeout`/`setInterval`, and `kv`.
//
// Nothing here blocks. A request or a timer is a command in the batch's
// answer, its outcome an event in a later batch; the promise or callback
// waiting for it is kept here under the command's tag and settled when the
// event arrives (src/index.js), then microtasks run (src/promise.js). Each
// request and timer belongs to the context that made it: the connection
// whose hook (or whose awaiting continuation) called fetch or setTimeout,
// else the route. A connection's ones end with it (the gateway drops their
// answers; here they are forgotten, so what awaited them never resumes).
//
// Bounded: at most MAX_PENDING_REQUESTS requests and MAX_PENDING_TIMERS
// timers wait per instance; past them fetch rejects ("busy") and
// setTimeout throws, so no backlog grows without bound. The gateway bounds
// them again per route (outbound_max_concurrent, its timer cap).

import {
  encodeUtf8,
  decodeUtf8,
  toBytes,
  headerLines,
  HTTP_ERROR_REASONS,
  KV_ERROR_REASONS,
  READ_ERROR_REASONS,
} from "./abi.js";
import { WeirPromise, currentContext } from "./promise.js";

/**
 * Requests one instance may have waiting: the gateway's default
 * `outbound_max_concurrent` is 64 per route, so past this many the
 * instance has lost track and further ones are refused at once.
 */
export const MAX_PENDING_REQUESTS = 1024;

/** Timers one instance may have waiting (the gateway's cap per route, MAX_TIMERS_PER_ROUTE). */
export const MAX_PENDING_TIMERS = 100_000;

/**
 * History and presence reads one instance may have waiting: the gateway's
 * cap per route (MAX_READS_PENDING_PER_ROUTE), past which it answers
 * `busy` itself; past it here a read rejects with `busy` at once.
 */
export const MAX_PENDING_READS = 256;

/** The runtime whose batch is being answered (set by src/index.js). */
let rt = null;

/** Make `runtime` the one I/O calls write to (null: none, outside a call). */
export function bindRuntime(runtime) {
  rt = runtime;
}

function active(what) {
  if (rt === null || !rt.inCall) {
    throw new Error(`weir: ${what} is only possible while a hook runs (not at module top level)`);
  }
  if (rt.upgrading && what !== "fetch") {
    throw new Error(`weir: ${what} is not possible in onUpgrade (the connection does not exist yet)`);
  }
  return rt;
}

let counter = 0;
let salt = -1;

/** 2026-01-01T00:00:00Z in Unix milliseconds: tags count from there. */
const TAG_EPOCH_MS = 1767225600000;

/**
 * Note the worker a connection id names (the gateway's ids are
 * worker << 40 | sequence), so instances of one route on different
 * workers issue different tags even in the same millisecond, where
 * Math.random cannot tell them apart (every instance starts from the same
 * build-time snapshot of QuickJS, its generator included).
 */
export function saltTags(connId) {
  if (salt < 0 && connId > 0) salt = Math.floor(connId / 2 ** 40) % 64;
}

/**
 * A tag for a request or timer, unique in the route while the gateway
 * runs: (counter × 64 + worker), the counter seeded from the clock at 64
 * per millisecond since 2026 (below 2^53 until 2095), so a fresh instance
 * starts past its predecessor's tags unless that one issued more than 64 a
 * millisecond, and two workers' instances never meet (up to 64 workers; a
 * route timer is the gateway's by (route, tag)).
 */
export function newTag() {
  if (counter === 0) {
    const now = typeof Date === "function" ? Date.now() : TAG_EPOCH_MS;
    counter = Math.max(1, (Math.floor(now) - TAG_EPOCH_MS) * 64);
    if (salt < 0) salt = Math.floor(Math.random() * 64);
  }
  return counter++ * 64 + salt;
}

// ---------------------------------------------------------------- HTTP

/** Response and request headers (lower-case names, in order), as the web's Headers. */
export class Headers {
  constructor(init) {
    this._list = [];
    if (init === undefined || init === null) return;
    if (init instanceof Headers) {
      this._list = init._list.map(([n, v]) => [n, v]);
    } else if (Array.isArray(init) || typeof init[Symbol.iterator] === "function") {
      for (const [n, v] of init) this.append(n, v);
    } else {
      for (const n of Object.keys(init)) this.append(n, init[n]);
    }
  }

  append(name, value) {
    this._list.push([checkHeader(name, "name").toLowerCase(), checkHeader(value, "value")]);
  }

  set(name, value) {
    this.delete(name);
    this.append(name, value);
  }

  delete(name) {
    const n = String(name).toLowerCase();
    this._list = this._list.filter(([k]) => k !== n);
  }

  /** The values of `name` joined with ", ", or null. */
  get(name) {
    const n = String(name).toLowerCase();
    const vs = this._list.filter(([k]) => k === n).map(([, v]) => v);
    return vs.length === 0 ? null : vs.join(", ");
  }

  has(name) {
    const n = String(name).toLowerCase();
    return this._list.some(([k]) => k === n);
  }

  forEach(fn, self) {
    for (const [n, v] of this._list) fn.call(self, v, n, this);
  }

  *entries() {
    for (const [n, v] of this._list) yield [n, v];
  }

  *keys() {
    for (const [n] of this._list) yield n;
  }

  *values() {
    for (const [, v] of this._list) yield v;
  }

  [Symbol.iterator]() {
    return this.entries();
  }
}

function checkHeader(s, what) {
  const t = String(s);
  if (/[\r\n]/.test(t)) throw new TypeError(`fetch: a header ${what} cannot hold a line break`);
  return t;
}

/** An HTTP response: status, headers and the whole body (the gateway buffers it). */
export class Response {
  constructor(body, init = {}) {
    this._body = body === undefined || body === null ? new Uint8Array(0) : toBytes(body);
    this.status = init.status ?? 200;
    this.statusText = init.statusText ?? "";
    this.headers = init.headers instanceof Headers ? init.headers : new Headers(init.headers);
    this.url = init.url ?? "";
    this.bodyUsed = false;
  }

  /** Whether the status is 2xx. */
  get ok() {
    return this.status >= 200 && this.status <= 299;
  }

  _take() {
    if (this.bodyUsed) return WeirPromise.reject(new TypeError("Response body already used"));
    this.bodyUsed = true;
    return WeirPromise.resolve(this._body);
  }

  /** The body as bytes. */
  bytes() {
    return this._take();
  }

  arrayBuffer() {
    return this._take().then((b) => b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
  }

  /** The body as text (invalid UTF-8 becomes U+FFFD). */
  text() {
    return this._take().then(textOf);
  }

  json() {
    return this.text().then((t) => JSON.parse(t));
  }
}

function textOf(b) {
  const s = decodeUtf8(b);
  if (s !== null) return s;
  let out = "";
  for (const x of b) out += x < 0x80 ? String.fromCharCode(x) : "\ufffd";
  return out;
}

/** Why a fetch got no response: a TypeError, as the web's fetch fails, with `reason`. */
export class FetchError extends TypeError {
  constructor(reason, message) {
    super(`fetch failed: ${reason}${message ? `: ${message}` : ""}`);
    this.name = "TypeError";
    /** `refused` (allow_outbound), `timeout`, `connect`, `too-large`, `busy`, `invalid`, `closed`. */
    this.reason = reason;
  }
}

/** The request `fetch(input, init)` describes: { method, url, headers, body }. */
function describeRequest(input, init = {}) {
  const url = typeof input === "string" ? input : input && input.url ? String(input.url) : String(input);
  const method = String(init.method ?? (input && input.method) ?? "GET").toUpperCase();
  if (!/^[A-Z]+$/.test(method)) throw new TypeError(`fetch: invalid method ${method}`);
  if (/[\s]/.test(url)) throw new TypeError("fetch: a URL cannot hold white space");
  const headers = new Headers(init.headers ?? (input && input.headers));
  let body = init.body ?? (input && input.body) ?? null;
  if (body !== null && body !== undefined) {
    if (method === "GET" || method === "HEAD") throw new TypeError(`fetch: a ${method} request cannot have a body`);
    if (typeof body === "string") {
      if (!headers.has("content-type")) headers.set("content-type", "text/plain;charset=UTF-8");
      body = encodeUtf8(body);
    } else {
      body = toBytes(body);
    }
  } else {
    body = new Uint8Array(0);
  }
  return { method, url, headers: headers._list, body };
}

/**
 * `fetch(url, init)`: send an HTTP request through the gateway (the route's
 * `allow_outbound` must allow it); resolves to a Response in a later
 * batch, or rejects with a FetchError. For the connection whose work is
 * running (its answer is dropped if it closes first), else the route.
 */
export function fetch(input, init) {
  let req;
  try {
    req = describeRequest(input, init);
  } catch (e) {
    return WeirPromise.reject(e);
  }
  const runtime = active("fetch");
  return runtime.request(currentContext(), req);
}

/** A Response for an http-response event. */
export function responseOf(status, head, body, url) {
  return new Response(body, { status, headers: headerLines(head), url });
}

/** A FetchError for an http-error event. */
export function fetchErrorOf(code, message) {
  return new FetchError(HTTP_ERROR_REASONS[code] ?? "unknown", message);
}

// ---------------------------------------------------------------- realtime reads

/**
 * Why a history or presence read has no answer: `reason` is the gateway's
 * (`bad-channel`, `history-off`, `presence-off`, `unavailable`, `busy`,
 * `not-realtime`).
 */
export class ReadError extends Error {
  constructor(reason, message) {
    super(`read failed: ${reason}${message ? `: ${message}` : ""}`);
    this.name = "ReadError";
    this.reason = reason;
  }
}

/** A ReadError for a history or presence event's code. */
export function readErrorOf(code) {
  return new ReadError(READ_ERROR_REASONS[code] ?? "unknown");
}

function parsed(text) {
  if (text === "") return null;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * What a history read resolves to: the channel's position (`offset` of its
 * last publication, `epoch` of its stream) and `publications`, each
 * `{ offset, data, text }` (`data` the JSON value, `text` the JSON text).
 */
export function historyOf(r) {
  return {
    position: { offset: r.offset, epoch: r.epoch },
    publications: r.publications.map(([offset, text]) => ({ offset, data: parsed(text), text })),
  };
}

/**
 * What a presence read resolves to: the members, each `{ client, user,
 * info, connInfo }` (`info` the connection's info as a JSON value, null
 * when none; `connInfo` its JSON text, "" when none).
 */
export function membersOf(r) {
  return r.members.map((m) => ({ client: m.client, user: m.user, info: parsed(m.conn_info), connInfo: m.conn_info }));
}

// ---------------------------------------------------------------- timers

function delayOf(ms) {
  const n = Number(ms);
  return Number.isFinite(n) && n > 0 ? Math.floor(n) : 0;
}

/**
 * `setTimeout(fn, ms, ...args)`: run `fn` in a later batch, after `ms`
 * milliseconds (the gateway holds the timer). A connection's timer (set
 * while its hook runs) ends with it. Returns the timer's id (its tag).
 */
export function setTimeout(fn, ms, ...args) {
  if (typeof fn !== "function") throw new TypeError("setTimeout needs a function");
  return active("setTimeout").timer(currentContext(), delayOf(ms), fn, args, false);
}

/** `setInterval(fn, ms, ...args)`: as setTimeout, again every `ms` until cleared. */
export function setInterval(fn, ms, ...args) {
  if (typeof fn !== "function") throw new TypeError("setInterval needs a function");
  return active("setInterval").timer(currentContext(), Math.max(1, delayOf(ms)), fn, args, true);
}

/** Cancel a timer set with setTimeout or setInterval (an unknown id is ignored). */
export function clearTimeout(id) {
  if (rt !== null && rt.inCall && !rt.upgrading) rt.cancel(id);
}

export const clearInterval = clearTimeout;

// ---------------------------------------------------------------- kv

function keyOf(key) {
  const k = toBytes(key);
  if (k.length === 0) throw new TypeError("kv: a key cannot be empty");
  return k;
}

/**
 * The route's key-value store (`kv` in the routes file). Reads answer at
 * once; writes are applied after the batch (not visible to a read in the
 * same batch), and one the gateway refuses comes back to `onKvError`.
 */
export const kv = Object.freeze({
  /** The value under `key` (a string or bytes) as bytes, or null. */
  get(key) {
    if (rt === null) throw new Error("weir: kv is only available while a hook runs");
    const v = rt.kvGet(keyOf(key));
    return v === undefined || v === null ? null : v;
  },

  /** The value under `key` as text (UTF-8), or null. */
  getText(key) {
    const v = kv.get(key);
    return v === null ? null : textOf(v);
  },

  /** The value under `key` parsed as JSON, or null. */
  getJson(key) {
    const t = kv.getText(key);
    return t === null ? null : JSON.parse(t);
  },

  /**
   * Store `value` (a string, as UTF-8, or bytes) under `key`, for
   * `{ ttl }` milliseconds if given (else until deleted). Keys up to 1 KiB,
   * values up to 1 MiB.
   */
  set(key, value, options = {}) {
    const ttl = options.ttl === undefined || options.ttl === null ? 0 : Math.max(1, delayOf(options.ttl));
    active("kv.set").writer.kvSet(keyOf(key), typeof value === "string" ? value : toBytes(value), ttl);
  },

  /** Store `value` as JSON under `key` (options as set). */
  setJson(key, value, options) {
    kv.set(key, JSON.stringify(value), options);
  },

  /** Remove `key`. */
  delete(key) {
    active("kv.delete").writer.kvDelete(keyOf(key));
  },
});

/** The word for a kv-error event's code. */
export function kvReasonOf(code) {
  return KV_ERROR_REASONS[code] ?? "unknown";
}

