// The questions a guest attached to a real-time namespace or a Pusher app
// is asked, and its answers (the Rust SDK's hook.rs and pusher.rs): a
// namespace's client subscribes (rt-subscribe, onSubscribe) and publishes
// (rt-publish, onClientPublish); a Pusher app's connection opens
// (pusher-connect, onPusherConnect), a client subscribes
// (pusher-subscribe, onPusherSubscribe) or sends a client event
// (pusher-client-event, onPusherClientEvent). Layouts: abi/src/realtime.rs
// and abi/src/pusher.rs.
//
// A hook decides at once, as a Rust one does: the verdict goes in the
// answer of the batch that asked. A hook that throws, or returns a
// promise, answers nothing; the gateway takes a question its batch left
// unanswered as failed (a centrifugo client gets error 100, a Pusher one
// `GuestError` or a reconnect), as it takes a Rust guest's trap, but the
// instance and the batch's other events go on.

import { EventKind, RT_DROP, RT_PASS, RT_REPLACE, decodeUtf8, splitSubscribeRest, toBytes } from "./abi.js";

/** Centrifugo's "permission denied": what a refusal without a code becomes. */
export const PERMISSION_DENIED = 103;
/** Pusher's "unauthorized" close code: what a refused connection without a code gets. */
export const PUSHER_UNAUTHORIZED = 4009;
/** The status of a refused Pusher subscribe without one. */
export const PUSHER_FORBIDDEN = 403;

/** JSON text as a value: null for "", undefined when it is not JSON. */
function parsed(text) {
  if (text === "" || text === null) return null;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** JSON text as a value, undefined when it is not JSON (or null: not UTF-8). */
function jsonValue(text) {
  if (text === null) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** `name: value` lines joined by "\n": the first value of `name` (case-insensitive). */
function headerOf(lines, name) {
  const want = String(name).toLowerCase();
  for (const line of lines.split("\n")) {
    const colon = line.indexOf(":");
    if (colon > 0 && line.slice(0, colon).trim().toLowerCase() === want) return line.slice(colon + 1).trim();
  }
  return undefined;
}

/**
 * A client of a real-time namespace asks to subscribe to `channel` (the
 * namespace's own checks passed): onSubscribe's argument.
 */
export class SubscribeRequest {
  constructor(r) {
    this.channel = r.channel;
    /** The Centrifugo client id (one per connection). */
    this.client = r.client;
    /** The connection token's `sub` ("" for an anonymous user). */
    this.user = r.user;
    /** The connection token's `info` claim as JSON text ("" when none). */
    this.infoText = decodeUtf8(r.info) ?? "";
  }

  /** The `info` claim as a value (null when none). */
  get info() {
    return parsed(this.infoText) ?? null;
  }
}

/** A client publishes into a channel of the namespace: onClientPublish's argument. */
export class PublishRequest extends SubscribeRequest {
  constructor(r) {
    super(r);
    /** The publication's bytes. */
    this.bytes = r.rest;
    /** The publication as text (JSON), or null when it is not UTF-8. */
    this.text = decodeUtf8(r.rest);
  }

  /** The publication as a value (undefined when it is not JSON). */
  get data() {
    return jsonValue(this.text);
  }
}

/** A connection of a Pusher app opens (before `pusher:connection_established`): onPusherConnect's argument. */
export class ConnectRequest {
  constructor(r) {
    /** The request target: path and query (`/app/key?protocol=7&…`). */
    this.target = r.channel;
    this.socketId = r.client;
    /** The upgrade's headers, `name: value` lines joined by "\n". */
    this.headers = decodeUtf8(r.info) ?? "";
  }

  /** The first value of header `name` (case-insensitive), or undefined. */
  header(name) {
    return headerOf(this.headers, name);
  }

  /** The path, without the query. */
  get path() {
    const q = this.target.indexOf("?");
    return q < 0 ? this.target : this.target.slice(0, q);
  }

  /** The first value of query parameter `name`, as sent (not percent-decoded), or undefined. */
  query(name) {
    const q = this.target.indexOf("?");
    if (q < 0) return undefined;
    for (const pair of this.target.slice(q + 1).split("&")) {
      const eq = pair.indexOf("=");
      if ((eq < 0 ? pair : pair.slice(0, eq)) === name) return eq < 0 ? "" : pair.slice(eq + 1);
    }
    return undefined;
  }
}

/**
 * A client of a Pusher app subscribes (weir's limits passed, its
 * signature checked): onPusherSubscribe's argument.
 */
export class ChannelRequest {
  constructor(r, sub) {
    this.channel = r.channel;
    this.socketId = r.client;
    /** The user signed in on the connection (`pusher:signin`), or "". */
    this.user = r.user;
    /** The `channel_data` the client sent (JSON text), or "". */
    this.channelData = decodeUtf8(r.info) ?? "";
    /** The `auth` the client sent (what its authoriser returned), or "". */
    this.auth = sub.auth;
    /** What weir's HMAC check made of `auth`: "none", "passed" or "failed". */
    this.signature = sub.signature;
  }
}

/**
 * A client of a Pusher app sends a client event (the app allows them, the
 * sender is subscribed, within its rate): onPusherClientEvent's argument.
 */
export class ClientEventRequest {
  constructor(r) {
    this.channel = r.channel;
    this.socketId = r.client;
    /** The sender's presence `user_id` on a presence channel, else the signed-in user, or "". */
    this.user = r.user;
    /** The event's name (`client-…`). */
    this.event = decodeUtf8(r.info) ?? "";
    /** The event's `data`: bytes, text (JSON), and as a value. */
    this.bytes = r.rest;
    this.text = decodeUtf8(r.rest);
  }

  /** The event's `data` as a value (undefined when it is not JSON). */
  get data() {
    return jsonValue(this.text);
  }
}

/** The hook each question kind calls (12–16). */
const HOOKS = Object.freeze(["onSubscribe", "onClientPublish", "onPusherConnect", "onPusherSubscribe", "onPusherClientEvent"]);

/** Whether `app` has any of the real-time guest hooks. */
export function hasQuestionHooks(app) {
  return HOOKS.some((h) => typeof app[h] === "function");
}

/** A verdict object (Verdict.*) of kind `name`. */
function isVerdict(v, name) {
  return v !== null && typeof v === "object" && v.verdict === name;
}

function isBytes(v) {
  return v instanceof Uint8Array || v instanceof ArrayBuffer || ArrayBuffer.isView(v);
}

/** What a TypeError for a hook's return says. */
function wrong(hook, v, wants) {
  let shown;
  try {
    shown = JSON.stringify(v);
  } catch {
    shown = String(v);
  }
  return new TypeError(`${hook} returned ${shown}, not ${wants}`);
}

/**
 * Write the verdict for a subscribe-like answer `v` (onSubscribe,
 * onPusherConnect, onPusherSubscribe) of question `call`; throws a
 * TypeError for an answer that is not one. `refuseCode`: what `false` refuses with.
 */
function subscribeVerdict(w, hook, conn, call, v, refuseCode, pusher, authorise) {
  if (v === undefined || v === null || v === true || isVerdict(v, "allow")) {
    w.subscribeVerdict(conn, call, 0);
  } else if (v === false) {
    w.subscribeVerdict(conn, call, refuseCode);
  } else if (typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= 0xffff) {
    // Refuse(0) is not an allow: Rust's SubDecision::Refuse(0) is 103, a
    // Pusher refusal's code at least 1.
    w.subscribeVerdict(conn, call, v === 0 ? (pusher ? 1 : PERMISSION_DENIED) : v);
  } else if (isVerdict(v, "refuse")) {
    const code = v.code === 0 ? (pusher ? 1 : PERMISSION_DENIED) : v.code;
    w.subscribeVerdict(conn, call, code, false, pusher ? v.message : "");
  } else if (authorise && isVerdict(v, "authorise")) {
    w.subscribeVerdict(conn, call, 0, true, v.channelData);
  } else {
    const wants = authorise
      ? "true/undefined (allow), Verdict.authorise(member), false, a status or Verdict.refuse(status, message)"
      : pusher
        ? "true/undefined (allow), false, a close code or Verdict.refuse(code, message)"
        : "true/undefined (allow), false, an error code or Verdict.refuse(code)";
    throw wrong(hook, v, wants);
  }
}

/** Write the verdict for a publish-like answer `v` (onClientPublish, onPusherClientEvent). */
function publishVerdict(w, hook, conn, call, v) {
  if (v === undefined || v === null || isVerdict(v, "pass")) {
    w.publishVerdict(conn, call, RT_PASS);
  } else if (typeof v === "string" || isBytes(v)) {
    w.publishVerdict(conn, call, RT_REPLACE, 0, typeof v === "string" ? v : toBytes(v));
  } else if (isVerdict(v, "replace")) {
    w.publishVerdict(conn, call, RT_REPLACE, 0, v.message);
  } else if (isVerdict(v, "drop")) {
    w.publishVerdict(conn, call, RT_DROP, v.code ?? 0);
  } else {
    throw wrong(
      hook,
      v,
      "undefined (pass), a string or bytes (publish that instead), Verdict.replace(x), Verdict.DROP or Verdict.drop(code)" +
        (typeof v === "object" ? "; a value to publish goes as JSON.stringify(value)" : ""),
    );
  }
}

/**
 * Ask `app` question `kind` (an rt event, split as `r`) of connection
 * `conn` and write its verdict to `w`; a missing hook answers as Rust's
 * default (allow, pass). Returns null, or [hook, error] when the hook threw
 * or answered with something that is not a verdict (then nothing is
 * written: the gateway fails the question).
 */
export function answer(app, w, kind, conn, r) {
  const hook = HOOKS[kind - EventKind.RT_SUBSCRIBE];
  let req;
  switch (kind) {
    case EventKind.RT_SUBSCRIBE:
      req = new SubscribeRequest(r);
      break;
    case EventKind.RT_PUBLISH:
      req = new PublishRequest(r);
      break;
    case EventKind.PUSHER_CONNECT:
      req = new ConnectRequest(r);
      break;
    case EventKind.PUSHER_SUBSCRIBE: {
      const sub = splitSubscribeRest(r.rest);
      if (sub === null) return [hook, new TypeError("pusher-subscribe without a signature check")];
      req = new ChannelRequest(r, sub);
      break;
    }
    default:
      req = new ClientEventRequest(r);
  }
  let v;
  try {
    v = typeof app[hook] === "function" ? app[hook](req) : undefined;
    if (v !== null && typeof v === "object" && typeof v.then === "function") {
      v.then(undefined, () => {});
      throw new TypeError(`${hook} returned a promise: it decides at once (the question waits on this batch's answer)`);
    }
    const publish = kind === EventKind.RT_PUBLISH || kind === EventKind.PUSHER_CLIENT_EVENT;
    if (publish) publishVerdict(w, hook, conn, r.call, v);
    else if (kind === EventKind.RT_SUBSCRIBE) subscribeVerdict(w, hook, conn, r.call, v, PERMISSION_DENIED, false, false);
    else if (kind === EventKind.PUSHER_CONNECT) subscribeVerdict(w, hook, conn, r.call, v, PUSHER_UNAUTHORIZED, true, false);
    else subscribeVerdict(w, hook, conn, r.call, v, PUSHER_FORBIDDEN, true, true);
  } catch (e) {
    return [hook, e];
  }
  return null;
}
