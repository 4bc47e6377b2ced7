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
//
// `conn.state` is the connection's state: any JSON value. After each hook
// the SDK compares its JSON with what it saved last and, when it changed,
// stores it in the connection's host-held attachment, so it survives the
// instance being replaced (recycle_after, a fault, a deploy); mutating an
// object in place (`conn.state.n++`) counts as a change.
//
// A hook that throws closes only its connection with 1011 (the error is
// logged with its stack); the instance and the batch's other connections
// go on. Out of memory and the route's deadline end the whole batch
// instead (its connections get 1011, a fresh instance takes over), as for
// a Rust guest. `this` in a hook is the handler object, one per instance:
// keep nothing there that must be shared or durable.

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
} from "./abi.js";

export { CommandWriter } from "./abi.js";

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

let hostImport = null;

/** Write a line to the gateway log (prefixed there with the route). */
export function log(level, msg) {
  if (hostImport) hostImport.log(level, String(msg));
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
}

const EMPTY = new Uint8Array(0);

/** Largest batch data buffer decoded as one byte string (see handle). */
const BATCH_STRING_MAX_BYTES = 1 << 20;
const NO_INFO = { target: "", params: [], attachment: EMPTY };

/** An out-of-memory error: the instance cannot go on, let it be replaced. */
function fatal(e) {
  return e instanceof Error && /out of memory/i.test(String(e.message));
}

/** The handler behind a component instance: its hooks and its connections. */
class Runtime {
  constructor(app, host) {
    this.app = typeof app === "function" ? new app() : app;
    this.host = host;
    this.conns = new Map();
    this.writer = new CommandWriter();
    this.warnedAsync = false;
  }

  upgrade(raw) {
    const app = this.app;
    let answer;
    try {
      answer = app.onUpgrade ? app.onUpgrade(new Request(raw)) : undefined;
    } catch (e) {
      if (fatal(e)) throw e;
      log(Level.ERROR, `handler threw in onUpgrade: ${describe(e)}`);
      return { tag: "reject", val: 500 };
    }
    if (answer === undefined || answer === null || answer === true) {
      return { tag: "accept", val: { protocol: null, attachment: EMPTY } };
    }
    if (answer === false) return { tag: "reject", val: 403 };
    if (typeof answer === "number") return { tag: "reject", val: answer };
    if (typeof answer.then === "function") {
      // An async hook: its decision would come after the answer is due,
      // and accepting a Promise would let an auth check through.
      log(Level.ERROR, "onUpgrade returned a Promise: hooks run synchronously (no async/await); refused with 500");
      return { tag: "reject", val: 500 };
    }
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
    conn._failed = true;
    log(Level.ERROR, `handler threw in ${hook} (connection ${conn.id}): ${describe(e)}`);
    this.writer.close(conn.id, 1011, "handler error");
  }

  handle(batch) {
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
        try {
          const r = app.onMessage(conn, msg);
          if (r !== undefined && !this.warnedAsync && typeof r.then === "function") {
            this.warnedAsync = true;
            log(Level.WARN, "onMessage returned a Promise: hooks run synchronously, so what follows an await never runs");
          }
        } catch (e) {
          this.failed(conn, "onMessage", e);
          continue;
        }
        if (conn.state !== undefined || conn._saved !== "") this.settle(conn);
      } else if (kind === EventKind.OPEN) {
        const info = parseConnInfo(data, offset, end);
        if (info === null) throw new AbiError("ConnInfoMalformed", i);
        const conn = new Conn(id, info, this);
        this.conns.set(id, conn);
        if (app.onOpen) {
          try {
            app.onOpen(conn);
          } catch (e) {
            this.failed(conn, "onOpen", e);
            continue;
          }
        }
        this.settle(conn);
      } else if (kind === EventKind.CLOSE) {
        const conn = this.known(id);
        const reason = decodeUtf8Fast(data, offset, end);
        if (reason === null) throw new AbiError("ReasonNotUtf8", i);
        if (app.onClose) {
          try {
            app.onClose(conn, v.getUint16(at + 10, true), reason);
          } catch (e) {
            if (fatal(e)) throw e;
            log(Level.ERROR, `handler threw in onClose (connection ${id}): ${describe(e)}`);
          }
        }
        this.conns.delete(id);
      }
      // Kinds this SDK does not know (a newer host) are skipped.
    }
    w.srcText = null;
    w.srcBytes = null;
    return w.finish();
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
 * `weir:gateway/host` import; build.mjs generates the call.
 */
export function createHandler(app, host) {
  // Checked here, at build time (componentize-qjs runs the module then), so
  // a handler without hooks fails its build instead of every batch.
  const hooks = typeof app === "function" ? app.prototype : app;
  if (!hooks || typeof hooks.onMessage !== "function") {
    throw new TypeError(
      "weir: the handler module's default export needs an onMessage(conn, msg) hook: " +
        "export default { onMessage(conn, msg) { ... } }",
    );
  }
  hostImport = host;
  installConsole();
  let rt = null;
  const runtime = () => rt || (rt = new Runtime(app, host));
  return {
    upgrade: (req) => runtime().upgrade(req),
    handle: (batch) => runtime().handle(batch),
  };
}
