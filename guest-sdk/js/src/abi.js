// The weir:gateway batch ABI in plain JavaScript: header layouts, the
// connection-info layout, UTF-8 (QuickJS has no TextEncoder/TextDecoder),
// the answer writer, and validating readers for both directions.
//
// The layout is written down once, in the crate doc of abi/src/lib.rs; the
// byte-exact test vectors in abi/vectors/ are the contract this file is
// tested against (test/vectors.mjs), as the Rust and Python codecs are.
// Numbers: connection ids are u64 on the wire and JS numbers here; the
// gateway's ids (worker << 40 | sequence) stay below 2^53.

/** Bytes of one packed event header (host to guest). */
export const EVENT_HEADER_BYTES = 20;
/** Bytes of one packed command header (guest to host). */
export const COMMAND_HEADER_BYTES = 28;
/** Longest close reason the host sends on (RFC 6455 §5.5). */
export const MAX_CLOSE_REASON_BYTES = 123;
/** The close code that replaces one an endpoint may not send. */
export const FALLBACK_CLOSE_CODE = 1011;

/**
 * Event kinds: the case indices of the WIT enum `event-kind` (0.4.0's I/O
 * answers 4–6), and those that travel in the packed layout only: a proxy
 * filter's proxy-text 7 and proxy-binary 8 (byte 9: the direction),
 * kv-error 9, a realtime route's history 10 and presence 11, a real-time
 * namespace guest's rt-subscribe 12 and rt-publish 13, and a Pusher app
 * guest's pusher-connect 14, pusher-subscribe 15 and pusher-client-event
 * 16 (their bytes: an rt request, abi/src/realtime.rs and abi/src/pusher.rs).
 */
export const EventKind = Object.freeze({
  OPEN: 0,
  TEXT: 1,
  BINARY: 2,
  CLOSE: 3,
  HTTP_RESPONSE: 4,
  HTTP_ERROR: 5,
  TIMER: 6,
  PROXY_TEXT: 7,
  PROXY_BINARY: 8,
  KV_ERROR: 9,
  HISTORY: 10,
  PRESENCE: 11,
  RT_SUBSCRIBE: 12,
  RT_PUBLISH: 13,
  PUSHER_CONNECT: 14,
  PUSHER_SUBSCRIBE: 15,
  PUSHER_CLIENT_EVENT: 16,
});

/** Command kinds: the case indices of the WIT enum `command-kind`. */
export const CommandKind = Object.freeze({
  SEND_TEXT: 0,
  SEND_BINARY: 1,
  CLOSE: 2,
  PUBLISH_TEXT: 3,
  PUBLISH_BINARY: 4,
  SUBSCRIBE: 5,
  UNSUBSCRIBE: 6,
  SET_ATTACHMENT: 7,
  HTTP_REQUEST: 8,
  SET_TIMER: 9,
  CANCEL_TIMER: 10,
  KV_SET: 11,
  KV_DELETE: 12,
  // Packed layout only: a proxy filter's forwards (byte 9: the direction)
  // and a realtime route's reads.
  FORWARD_TEXT: 13,
  FORWARD_BINARY: 14,
  HISTORY_READ: 15,
  PRESENCE_READ: 16,
  // A namespace or Pusher app guest's verdicts: the call id as the 8-byte
  // meta; byte 9 the decision (RT_ALLOW/RT_AUTHORISE, RT_PASS/RT_REPLACE/RT_DROP).
  RT_SUBSCRIBE_VERDICT: 17,
  RT_PUBLISH_VERDICT: 18,
});

/** Byte 9 of an rt-subscribe-verdict (abi/src/pusher.rs): allow (weir's own checks decide), or authorise (a Pusher subscribe the guest answered itself). */
export const RT_ALLOW = 0;
export const RT_AUTHORISE = 1;
/** Byte 9 of an rt-publish-verdict (abi/src/realtime.rs): publish it, publish the payload instead, publish nothing. */
export const RT_PASS = 0;
export const RT_REPLACE = 1;
export const RT_DROP = 2;
/** Byte 0 of a pusher-subscribe's rest: what weir's HMAC check made of the client's `auth`. */
export const SIGNATURE_CHECKS = Object.freeze(["none", "passed", "failed"]);
/** The publish verdicts by byte 9, as the vectors name them. */
const PUBLISH_VERDICTS = Object.freeze(["pass", "replace", "drop"]);

/** Byte 9 of a proxy event and of a forward command (abi/src/header.rs Direction). */
export const DIRECTIONS = Object.freeze(["to-upstream", "to-client"]);

/** The code of an http-error event, as one word (abi/src/io.rs HttpErrorReason). */
export const HTTP_ERROR_REASONS = Object.freeze({
  1: "refused",
  2: "timeout",
  3: "connect",
  4: "too-large",
  5: "busy",
  6: "invalid",
});

/** The code of a kv-error event, as one word (abi/src/io.rs KvErrorReason). */
export const KV_ERROR_REASONS = Object.freeze({
  1: "max-bytes",
  2: "max-keys",
  3: "queue-full",
  4: "too-large",
  5: "no-store",
});

/** The code of a history or presence event, as one word (abi/src/io.rs ReadErrorReason). */
export const READ_ERROR_REASONS = Object.freeze({
  1: "bad-channel",
  2: "history-off",
  3: "presence-off",
  4: "unavailable",
  5: "busy",
  6: "not-realtime",
});

const TWO_32 = 4294967296;

/**
 * Largest batch data buffer copied whole into an answer that sends one of
 * its messages back (CommandWriter.sourceOffset): past it, the copy of the
 * unsent rest would cost more than copying each sent message.
 */
const SOURCE_COPY_MAX_BYTES = 64 << 10;

/**
 * Whether this machine is little-endian (WebAssembly always is): then a
 * Uint32Array over a header buffer reads and writes the ABI's fields
 * directly, one typed-array access per field (headers are 20 and 28 bytes,
 * so every u32 field of every header is 4-aligned).
 */
export const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/**
 * One way a buffer breaks the ABI. `variant` is the name of weir-abi's
 * `AbiError` variant (the vectors' `error`), `index` the offending header
 * (null for HeadersNotWhole).
 */
export class AbiError extends Error {
  constructor(variant, index, detail) {
    super(`${variant}${index === null ? "" : ` at header ${index}`}${detail ? `: ${detail}` : ""}`);
    this.name = "AbiError";
    this.variant = variant;
    this.index = index;
  }
}

// ---------------------------------------------------------------- numbers

/** The little-endian u16 at `at` of `b`. */
export function readU16(b, at) {
  return u16(b, at);
}

/** The little-endian u32 at `at` of `b`. */
export function readU32(b, at) {
  return u32(b, at);
}

/** The little-endian u64 at `at` of `b`, as a number (exact below 2^53). */
export function readU64(b, at) {
  return u64(b, at);
}

function u16(b, at) {
  return b[at] | (b[at + 1] << 8);
}

function u32(b, at) {
  return (b[at] | (b[at + 1] << 8) | (b[at + 2] << 16)) + b[at + 3] * 0x1000000;
}

function u64(b, at) {
  return u32(b, at) + u32(b, at + 4) * TWO_32;
}

function putU16(b, at, v) {
  b[at] = v & 0xff;
  b[at + 1] = (v >>> 8) & 0xff;
}

function putU32(b, at, v) {
  b[at] = v & 0xff;
  b[at + 1] = (v >>> 8) & 0xff;
  b[at + 2] = (v >>> 16) & 0xff;
  b[at + 3] = (v >>> 24) & 0xff;
}

function putU64(b, at, v) {
  const lo = v % TWO_32;
  putU32(b, at, lo);
  putU32(b, at + 4, (v - lo) / TWO_32);
}

// ---------------------------------------------------------------- UTF-8

/** Bytes `s` takes in UTF-8 at most (3 per UTF-16 unit). */
export function maxUtf8Bytes(s) {
  return s.length * 3;
}

/**
 * Write `s` as UTF-8 into `out` at `at` (room for maxUtf8Bytes(s) must be
 * there); returns the end. A lone surrogate becomes U+FFFD, as
 * TextEncoder does.
 */
export function encodeUtf8Into(s, out, at) {
  const n = s.length;
  for (let i = 0; i < n; i++) {
    let c = s.charCodeAt(i);
    if (c < 0x80) {
      out[at++] = c;
    } else if (c < 0x800) {
      out[at++] = 0xc0 | (c >> 6);
      out[at++] = 0x80 | (c & 0x3f);
    } else {
      if (c >= 0xd800 && c <= 0xdfff) {
        const d = i + 1 < n ? s.charCodeAt(i + 1) : 0;
        if (c <= 0xdbff && d >= 0xdc00 && d <= 0xdfff) {
          c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
          i++;
          out[at++] = 0xf0 | (c >> 18);
          out[at++] = 0x80 | ((c >> 12) & 0x3f);
          out[at++] = 0x80 | ((c >> 6) & 0x3f);
          out[at++] = 0x80 | (c & 0x3f);
          continue;
        }
        c = 0xfffd;
      }
      out[at++] = 0xe0 | (c >> 12);
      out[at++] = 0x80 | ((c >> 6) & 0x3f);
      out[at++] = 0x80 | (c & 0x3f);
    }
  }
  return at;
}

/** `s` as a new UTF-8 byte array. */
export function encodeUtf8(s) {
  const buf = new Uint8Array(maxUtf8Bytes(s));
  return buf.slice(0, encodeUtf8Into(s, buf, 0));
}

const CHUNK = 4096;
const units = [];

/** String.fromCharCode over `codes[0..n]`, in chunks (argument limits). */
function fromCodes(codes, n) {
  if (n <= CHUNK) {
    return String.fromCharCode.apply(null, n === codes.length ? codes : codes.slice(0, n));
  }
  let s = "";
  for (let i = 0; i < n; i += CHUNK) {
    s += String.fromCharCode.apply(null, codes.slice(i, Math.min(n, i + CHUNK)));
  }
  return s;
}

/**
 * `b[start..end]` decoded as UTF-8, or null when it is not valid UTF-8
 * (overlong forms, surrogates and code points past U+10FFFF included).
 */
export function decodeUtf8(b, start = 0, end = b.length) {
  let i = start;
  while (i < end && b[i] < 0x80) i++;
  if (i === end) {
    // All ASCII: the common case, one call per chunk, no unit array.
    return end - start <= CHUNK
      ? String.fromCharCode.apply(null, b.subarray(start, end))
      : fromCodes(b.subarray(start, end), end - start);
  }
  let n = 0;
  for (let k = start; k < i; k++) units[n++] = b[k];
  while (i < end) {
    const c = b[i];
    if (c < 0x80) {
      units[n++] = c;
      i += 1;
      continue;
    }
    let cp;
    let need;
    let min;
    if (c >= 0xc2 && c <= 0xdf) {
      cp = c & 0x1f;
      need = 1;
      min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
      cp = c & 0x0f;
      need = 2;
      min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
      cp = c & 0x07;
      need = 3;
      min = 0x10000;
    } else {
      units.length = 0;
      return null;
    }
    if (i + need >= end) {
      units.length = 0;
      return null;
    }
    for (let k = 1; k <= need; k++) {
      const cc = b[i + k];
      if ((cc & 0xc0) !== 0x80) {
        units.length = 0;
        return null;
      }
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      units.length = 0;
      return null;
    }
    if (cp >= 0x10000) {
      cp -= 0x10000;
      units[n++] = 0xd800 + (cp >> 10);
      units[n++] = 0xdc00 + (cp & 0x3ff);
    } else {
      units[n++] = cp;
    }
    i += need + 1;
  }
  const s = fromCodes(units, n);
  units.length = 0;
  return s;
}

// QuickJS has no TextDecoder, but its C builtins do the work of the loop
// above several times faster than interpreted code (measured in the guest:
// benches/micro guest_langs). Bytes become a byte string through base64
// (quickjs-ng has Uint8Array.prototype.toBase64 and atob; elsewhere one
// String.fromCharCode call), a regular expression tells ASCII (the byte
// string is then the text), and decodeURIComponent(escape(...)) decodes
// UTF-8, throwing on malformed input (overlong forms and surrogates
// included, as ECMA-262 requires of decodeURIComponent).
const NON_ASCII = /[\x80-\xff]/;
const hasEscape = typeof escape === "function";
const hasBase64 = typeof atob === "function" && typeof Uint8Array.prototype.toBase64 === "function";

/**
 * `b` as a byte string (one UTF-16 unit per byte) through native builtins,
 * or null where they are missing: what a batch's text messages are sliced from.
 */
export function byteString(b) {
  return hasBase64 && hasEscape ? atob(b.toBase64()) : null;
}

/** Whether a byte string holds only ASCII (then it is its own UTF-8 text). */
export function isAsciiByteString(bin) {
  return !NON_ASCII.test(bin);
}

/** A byte string's bytes decoded as UTF-8, or null when they are not UTF-8. */
export function decodeByteString(bin) {
  if (!NON_ASCII.test(bin)) return bin;
  try {
    return decodeURIComponent(escape(bin));
  } catch {
    return null;
  }
}

/**
 * `b[start..end]` decoded as UTF-8, or null when it is not valid UTF-8:
 * the same answer as decodeUtf8, through native builtins where it can.
 */
export function decodeUtf8Fast(b, start, end) {
  if (!hasEscape) return decodeUtf8(b, start, end);
  let bin;
  if (hasBase64) {
    bin = atob(b.subarray(start, end).toBase64());
  } else if (end - start <= CHUNK) {
    bin = String.fromCharCode.apply(null, b.subarray(start, end));
  } else {
    return decodeUtf8(b, start, end);
  }
  if (!NON_ASCII.test(bin)) return bin;
  try {
    return decodeURIComponent(escape(bin));
  } catch {
    return null;
  }
}

/** Whether `b[start..end]` is valid UTF-8. */
export function isUtf8(b, start = 0, end = b.length) {
  for (let i = start; i < end; i++) {
    if (b[i] >= 0x80) return decodeUtf8(b, i, end) !== null;
  }
  return true;
}

// ---------------------------------------------------------------- headers

/** The fields of the event header at `at` of `b`. */
export function readEventHeader(b, at = 0) {
  return {
    conn: u64(b, at),
    kind: b[at + 8],
    reserved: b[at + 9],
    code: u16(b, at + 10),
    offset: u32(b, at + 12),
    len: u32(b, at + 16),
  };
}

/** Write an event header's fields into `b` at `at`. */
export function writeEventHeader(b, at, h) {
  putU64(b, at, h.conn);
  b[at + 8] = h.kind;
  b[at + 9] = h.reserved || 0;
  putU16(b, at + 10, h.code || 0);
  putU32(b, at + 12, h.offset);
  putU32(b, at + 16, h.len);
}

/** The fields of the command header at `at` of `b`. */
export function readCommandHeader(b, at = 0) {
  return {
    conn: u64(b, at),
    kind: b[at + 8],
    reserved: b[at + 9],
    code: u16(b, at + 10),
    topic_offset: u32(b, at + 12),
    topic_len: u32(b, at + 16),
    offset: u32(b, at + 20),
    len: u32(b, at + 24),
  };
}

/** Write a command header's fields (snake_case, as the vectors) into `b`. */
export function writeCommandHeader(b, at, h) {
  putU64(b, at, h.conn);
  b[at + 8] = h.kind;
  b[at + 9] = h.reserved || 0;
  putU16(b, at + 10, h.code || 0);
  putU32(b, at + 12, h.topic_offset || 0);
  putU32(b, at + 16, h.topic_len || 0);
  putU32(b, at + 20, h.offset);
  putU32(b, at + 24, h.len);
}

// ---------------------------------------------------------------- conn info

/**
 * Parse connection-info bytes (abi/src/conn_info.rs): `{ target, params:
 * [[name, value], ...], attachment: Uint8Array }`, or null when malformed.
 * `attachment` is a view into `b`.
 */
export function parseConnInfo(b, start = 0, end = b.length) {
  let at = start;
  const field = () => {
    if (at + 4 > end) return null;
    const len = u32(b, at);
    if (len > end - at - 4) return null;
    const s = decodeUtf8(b, at + 4, at + 4 + len);
    at += 4 + len;
    return s;
  };
  const target = field();
  if (target === null || at + 4 > end) return null;
  const count = u32(b, at);
  at += 4;
  const params = [];
  for (let i = 0; i < count; i++) {
    const name = field();
    if (name === null) return null;
    const value = field();
    if (value === null) return null;
    params.push([name, value]);
  }
  return { target, params, attachment: b.subarray(at, end) };
}

/** Connection-info bytes for `target`, `params` and `attachment`. */
export function encodeConnInfo(target, params, attachment = new Uint8Array(0)) {
  const parts = [];
  const put = (s) => {
    const bytes = encodeUtf8(s);
    const len = new Uint8Array(4);
    putU32(len, 0, bytes.length);
    parts.push(len, bytes);
  };
  put(target);
  const count = new Uint8Array(4);
  putU32(count, 0, params.length);
  parts.push(count);
  for (const [name, value] of params) {
    put(name);
    put(value);
  }
  parts.push(attachment);
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  n = 0;
  for (const p of parts) {
    out.set(p, n);
    n += p.length;
  }
  return out;
}

// ---------------------------------------------------------------- I/O

// weir:gateway 0.4.0's I/O layouts (abi/src/io.rs). A command keeps its
// fixed fields in the header's topic range ("meta"); an event's bytes
// start with the tag (u64) it answers.

/** An http-response event's bytes: { tag, head, body } or null when malformed. */
export function splitHttpResponse(b, start = 0, end = b.length) {
  if (end - start < 12) return null;
  const tag = u64(b, start);
  const len = u32(b, start + 8);
  if (len > end - start - 12) return null;
  const head = decodeUtf8(b, start + 12, start + 12 + len);
  if (head === null) return null;
  return { tag, head, body: b.subarray(start + 12 + len, end) };
}

/** An http-error event's bytes: { tag, message } or null when malformed. */
export function splitHttpError(b, start = 0, end = b.length) {
  if (end - start < 8) return null;
  const message = decodeUtf8(b, start + 8, end);
  return message === null ? null : { tag: u64(b, start), message };
}

/** A head's `name: value` lines as [name, value] pairs (abi/src/io.rs HeaderLines). */
export function headerLines(head) {
  const out = [];
  for (const line of head.split("\n")) {
    if (line === "") continue;
    const colon = line.indexOf(":");
    out.push(colon < 0 ? [line.trim(), ""] : [line.slice(0, colon).trim(), line.slice(colon + 1).trim()]);
  }
  return out;
}

/** A request head's method, URL and headers, or null without `METHOD URL`. */
export function splitRequestHead(head) {
  const nl = head.indexOf("\n");
  const first = nl < 0 ? head : head.slice(0, nl);
  const sp = first.indexOf(" ");
  if (sp <= 0 || sp === first.length - 1) return null;
  return { method: first.slice(0, sp), url: first.slice(sp + 1), headers: headerLines(nl < 0 ? "" : head.slice(nl + 1)) };
}

/** An http-response event's bytes for `tag`, header pairs and `body` (what the gateway sends). */
export function encodeHttpResponse(tag, headers, body) {
  const head = encodeUtf8(headers.map(([n, v]) => `${n}: ${v}`).join("\n"));
  const b = toBytes(body);
  const out = new Uint8Array(12 + head.length + b.length);
  putU64(out, 0, tag);
  putU32(out, 8, head.length);
  out.set(head, 12);
  out.set(b, 12 + head.length);
  return out;
}

/** An http-error event's bytes: `tag`, then `message`. */
export function encodeHttpError(tag, message) {
  const m = encodeUtf8(message);
  const out = new Uint8Array(8 + m.length);
  putU64(out, 0, tag);
  out.set(m, 8);
  return out;
}

/** A timer event's bytes: its tag. */
export function encodeTag(tag) {
  const out = new Uint8Array(8);
  putU64(out, 0, tag);
  return out;
}

// The realtime reads (abi/src/io/reads.rs): history-read and presence-read
// commands, answered by history and presence events whose code is 0 or a
// read-error reason.

/** A u32 length and that many bytes at `at`, UTF-8: [text, end] or null. */
function sizedText(b, at, end) {
  if (end - at < 4) return null;
  const len = u32(b, at);
  if (len > end - at - 4) return null;
  const text = decodeUtf8(b, at + 4, at + 4 + len);
  return text === null ? null : [text, at + 4 + len];
}

/**
 * A history event's bytes: `{ tag, error }` (error: the code, 0 when the
 * read succeeded) and, for code 0, `offset`, `epoch` and `publications`
 * ([offset, data as JSON text] pairs); null when malformed.
 */
export function splitHistory(code, b, start = 0, end = b.length) {
  if (end - start < 8) return null;
  const tag = u64(b, start);
  if (code !== 0) return { tag, error: code };
  if (end - start < 16) return null;
  const offset = u64(b, start + 8);
  const epoch = sizedText(b, start + 16, end);
  if (epoch === null) return null;
  const publications = [];
  let at = epoch[1];
  while (at < end) {
    if (end - at < 8) return null;
    const o = u64(b, at);
    const data = sizedText(b, at + 8, end);
    if (data === null) return null;
    publications.push([o, data[0]]);
    at = data[1];
  }
  return { tag, error: 0, offset, epoch: epoch[0], publications };
}

/**
 * A presence event's bytes: `{ tag, error }` and, for code 0, `members`
 * (`{ client, user, conn_info }`, conn_info JSON text or ""); null when
 * malformed.
 */
export function splitPresence(code, b, start = 0, end = b.length) {
  if (end - start < 8) return null;
  const tag = u64(b, start);
  if (code !== 0) return { tag, error: code };
  const members = [];
  let at = start + 8;
  while (at < end) {
    const client = sizedText(b, at, end);
    if (client === null) return null;
    const user = sizedText(b, client[1], end);
    if (user === null) return null;
    const info = sizedText(b, user[1], end);
    if (info === null) return null;
    members.push({ client: client[0], user: user[0], conn_info: info[0] });
    at = info[1];
  }
  return { tag, error: 0, members };
}

/** Concatenate byte arrays. */
function concat(parts) {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  n = 0;
  for (const p of parts) {
    out.set(p, n);
    n += p.length;
  }
  return out;
}

function sized(bytes) {
  const out = new Uint8Array(4 + bytes.length);
  putU32(out, 0, bytes.length);
  out.set(bytes, 4);
  return out;
}

/** A successful history event's bytes (what the gateway sends): `tag`, the position, each [offset, JSON text]. */
export function encodeHistory(tag, offset, epoch, publications) {
  const head = new Uint8Array(16);
  putU64(head, 0, tag);
  putU64(head, 8, offset);
  const parts = [head, sized(encodeUtf8(epoch))];
  for (const [o, data] of publications) {
    const at = new Uint8Array(8);
    putU64(at, 0, o);
    parts.push(at, sized(toBytes(data)));
  }
  return concat(parts);
}

/** A successful presence event's bytes: `tag`, then each member's client, user and conn info (JSON text or ""). */
export function encodePresence(tag, members) {
  const parts = [encodeTag(tag)];
  for (const m of members) {
    parts.push(sized(encodeUtf8(m.client)), sized(encodeUtf8(m.user ?? "")), sized(toBytes(m.conn_info ?? "")));
  }
  return concat(parts);
}

/** A history-read's meta: { tag, limit, reverse, channel }, or null when malformed. */
export function splitHistoryRead(b, start, end) {
  if (end - start < 14) return null;
  const reverse = b[start + 12];
  if (reverse > 1) return null;
  const channel = decodeUtf8(b, start + 13, end);
  if (channel === null) return null;
  return { tag: u64(b, start), limit: u32(b, start + 8), reverse: reverse === 1, channel };
}

/** A presence-read's meta: { tag, channel }, or null when malformed. */
export function splitPresenceRead(b, start, end) {
  if (end - start < 9) return null;
  const channel = decodeUtf8(b, start + 8, end);
  if (channel === null) return null;
  return { tag: u64(b, start), channel };
}

// A namespace or Pusher app guest's questions (abi/src/realtime.rs): the
// call id, four sized fields (channel, client, user UTF-8; info bytes),
// then the rest.

/** A u32 length and that many bytes at `at`: [start, end] of the bytes, or null. */
function sizedRange(b, at, end) {
  if (end - at < 4) return null;
  const len = u32(b, at);
  if (len > end - at - 4) return null;
  return [at + 4, at + 4 + len];
}

/**
 * An rt event's bytes: `{ call, channel, client, user, info, rest }`
 * (`info` and `rest` Uint8Array views), or null when they do not follow
 * the layout.
 */
export function splitRtRequest(b, start = 0, end = b.length) {
  if (end - start < 8) return null;
  const call = u64(b, start);
  const channel = sizedText(b, start + 8, end);
  if (channel === null) return null;
  const client = sizedText(b, channel[1], end);
  if (client === null) return null;
  const user = sizedText(b, client[1], end);
  if (user === null) return null;
  const info = sizedRange(b, user[1], end);
  if (info === null) return null;
  return {
    call,
    channel: channel[0],
    client: client[0],
    user: user[0],
    info: b.subarray(info[0], info[1]),
    rest: b.subarray(info[1], end),
  };
}

/** A pusher-subscribe's rest: `{ signature, auth }`, or null when malformed (abi/src/pusher.rs). */
export function splitSubscribeRest(rest) {
  if (rest.length < 1 || rest[0] >= SIGNATURE_CHECKS.length) return null;
  const auth = decodeUtf8(rest, 1, rest.length);
  return auth === null ? null : { signature: SIGNATURE_CHECKS[rest[0]], auth };
}

/**
 * An rt event's bytes (what the gateway sends): `req` is `{ call, channel,
 * client, user, info }` (info a string or bytes), then `rest` (bytes or a
 * string): the publication, or a pusher-subscribe's check and auth.
 */
export function encodeRtRequest(req, rest = EMPTY_BYTES) {
  const head = new Uint8Array(8);
  putU64(head, 0, req.call);
  return concat([
    head,
    sized(encodeUtf8(req.channel)),
    sized(encodeUtf8(req.client)),
    sized(encodeUtf8(req.user ?? "")),
    sized(toBytes(req.info ?? "")),
    toBytes(rest),
  ]);
}

/** A pusher-subscribe's rest: the signature check ("none", "passed", "failed") and the client's auth. */
export function encodeSubscribeRest(signature, auth) {
  const check = SIGNATURE_CHECKS.indexOf(signature);
  if (check < 0) throw new TypeError(`a signature check is none, passed or failed, not ${signature}`);
  return concat([Uint8Array.of(check), encodeUtf8(auth ?? "")]);
}

const EMPTY_BYTES = new Uint8Array(0);

// ---------------------------------------------------------------- events

/**
 * Check the structure of an event batch: whole headers, every range inside
 * `data`. What the runtime does before any hook runs (the payload's UTF-8
 * is checked as it is decoded).
 */
export function checkEventRanges(headers, data) {
  if (headers.length % EVENT_HEADER_BYTES !== 0) {
    throw new AbiError("HeadersNotWhole", null, `${headers.length} bytes`);
  }
  const n = headers.length / EVENT_HEADER_BYTES;
  for (let i = 0; i < n; i++) {
    const at = i * EVENT_HEADER_BYTES;
    const offset = u32(headers, at + 12);
    const len = u32(headers, at + 16);
    if (offset + len > data.length) {
      throw new AbiError("RangeOutOfBounds", i, `payload ${offset}+${len} of ${data.length}`);
    }
  }
  return n;
}

/**
 * Read a whole event batch, validated as weir-abi's `parse_events` does:
 * a list of `{kind, conn, ...}` objects (kind names as in the WIT, fields
 * as in abi/vectors/README.md, binary payloads as Uint8Array views). Kinds
 * this codec does not know are skipped. Throws AbiError.
 */
export function decodeEvents(headers, data) {
  const n = checkEventRanges(headers, data);
  const out = [];
  for (let i = 0; i < n; i++) {
    const h = readEventHeader(headers, i * EVENT_HEADER_BYTES);
    const end = h.offset + h.len;
    switch (h.kind) {
      case EventKind.OPEN: {
        const info = parseConnInfo(data, h.offset, end);
        if (info === null) throw new AbiError("ConnInfoMalformed", i);
        out.push({ kind: "open", conn: h.conn, ...info });
        break;
      }
      case EventKind.TEXT: {
        const text = decodeUtf8(data, h.offset, end);
        if (text === null) throw new AbiError("TextNotUtf8", i);
        out.push({ kind: "text", conn: h.conn, text });
        break;
      }
      case EventKind.BINARY:
        out.push({ kind: "binary", conn: h.conn, payload: data.subarray(h.offset, end) });
        break;
      case EventKind.CLOSE: {
        const reason = decodeUtf8(data, h.offset, end);
        if (reason === null) throw new AbiError("ReasonNotUtf8", i);
        out.push({ kind: "close", conn: h.conn, code: h.code, reason });
        break;
      }
      case EventKind.HTTP_RESPONSE: {
        const r = splitHttpResponse(data, h.offset, end);
        if (r === null) throw new AbiError("IoEventMalformed", i);
        out.push({ kind: "http-response", conn: h.conn, tag: r.tag, status: h.code, head: r.head, body: r.body });
        break;
      }
      case EventKind.HTTP_ERROR: {
        const r = splitHttpError(data, h.offset, end);
        if (r === null) throw new AbiError("IoEventMalformed", i);
        out.push({ kind: "http-error", conn: h.conn, tag: r.tag, reason: h.code, message: r.message });
        break;
      }
      case EventKind.TIMER:
        if (h.len !== 8) throw new AbiError("IoEventMalformed", i);
        out.push({ kind: "timer", conn: h.conn, tag: u64(data, h.offset) });
        break;
      case EventKind.KV_ERROR:
        out.push({ kind: "kv-error", conn: h.conn, reason: h.code, key: data.subarray(h.offset, end) });
        break;
      case EventKind.PROXY_TEXT:
      case EventKind.PROXY_BINARY: {
        if (h.reserved > 1) throw new AbiError("ReservedByteSet", i, `value ${h.reserved}`);
        if (h.kind === EventKind.PROXY_BINARY) {
          out.push({ kind: "proxy-binary", conn: h.conn, direction: h.reserved, payload: data.subarray(h.offset, end) });
          break;
        }
        const text = decodeUtf8(data, h.offset, end);
        if (text === null) throw new AbiError("TextNotUtf8", i);
        out.push({ kind: "proxy-text", conn: h.conn, direction: h.reserved, text });
        break;
      }
      case EventKind.HISTORY: {
        const r = splitHistory(h.code, data, h.offset, end);
        if (r === null) throw new AbiError("IoEventMalformed", i);
        if (r.error !== 0) out.push({ kind: "history", conn: h.conn, tag: r.tag, error: r.error });
        else out.push({ kind: "history", conn: h.conn, tag: r.tag, offset: r.offset, epoch: r.epoch, publications: r.publications });
        break;
      }
      case EventKind.PRESENCE: {
        const r = splitPresence(h.code, data, h.offset, end);
        if (r === null) throw new AbiError("IoEventMalformed", i);
        if (r.error !== 0) out.push({ kind: "presence", conn: h.conn, tag: r.tag, error: r.error });
        else out.push({ kind: "presence", conn: h.conn, tag: r.tag, members: r.members });
        break;
      }
      case EventKind.RT_SUBSCRIBE:
      case EventKind.RT_PUBLISH:
      case EventKind.PUSHER_CONNECT:
      case EventKind.PUSHER_SUBSCRIBE:
      case EventKind.PUSHER_CLIENT_EVENT: {
        const r = splitRtRequest(data, h.offset, end);
        if (r === null) throw new AbiError("IoEventMalformed", i);
        const e = { kind: RT_EVENT_NAMES[h.kind - EventKind.RT_SUBSCRIBE], conn: h.conn, call: r.call };
        Object.assign(e, { channel: r.channel, client: r.client, user: r.user, info: r.info });
        if (h.kind === EventKind.PUSHER_SUBSCRIBE) {
          const sub = splitSubscribeRest(r.rest);
          if (sub === null) throw new AbiError("IoEventMalformed", i);
          Object.assign(e, sub);
        } else if (h.kind === EventKind.RT_PUBLISH || h.kind === EventKind.PUSHER_CLIENT_EVENT) {
          e.data = r.rest;
        }
        out.push(e);
        break;
      }
      default:
        break;
    }
  }
  return out;
}

/** The rt event kinds 12–16 by name, as the WIT comments and the vectors name them. */
const RT_EVENT_NAMES = Object.freeze(["rt-subscribe", "rt-publish", "pusher-connect", "pusher-subscribe", "pusher-client-event"]);

// ---------------------------------------------------------------- commands

/** Whether an endpoint may send close code `code` (RFC 6455 §7.4). */
export function sendableCloseCode(code) {
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
}

/**
 * A batch's answer being written: packed command headers and one shared
 * data buffer, both grown by doubling and reused from batch to batch, so a
 * command costs no allocation once they have grown. Headers are written
 * through a DataView (one native call per field: in QuickJS that is much
 * cheaper than byte-by-byte stores).
 */
export class CommandWriter {
  constructor(commandBytes = 28 * 64, dataBytes = 4096) {
    this.commands = new Uint8Array(commandBytes);
    this.words = LITTLE_ENDIAN ? new Uint32Array(this.commands.buffer) : null;
    this.view = new DataView(this.commands.buffer);
    this.data = new Uint8Array(dataBytes);
    this.clen = 0;
    this.dlen = 0;
    this.lastOffset = 0;
    // The batch being answered, set by the runtime: its data buffer, and
    // the text message being handled as decoded with its range there.
    // Sending that same string back (echo, publish) refers to its bytes
    // instead of encoding them again: the batch's data is copied into the
    // answer once, by the first such send (one native copy per batch, at
    // srcBase), and each later one costs a header only.
    this.srcText = null;
    this.srcBytes = null;
    this.srcStart = 0;
    this.srcEnd = 0;
    this.srcBase = -1;
  }

  /** Start a new answer (the buffers are kept). */
  reset() {
    this.clen = 0;
    this.dlen = 0;
    this.srcBase = -1;
  }

  /**
   * Where the bytes of the message being handled (srcStart..srcEnd of
   * srcBytes) are in the answer's data, copying the batch's data there
   * on first use; a batch past SOURCE_COPY_MAX_BYTES copies the message only.
   */
  sourceOffset() {
    let base = this.srcBase;
    if (base < 0) {
      const src = this.srcBytes;
      base = this.dlen;
      if (src.length > SOURCE_COPY_MAX_BYTES) {
        const n = this.srcEnd - this.srcStart;
        this.reserveData(n);
        this.data.set(src.subarray(this.srcStart, this.srcEnd), base);
        this.dlen = base + n;
        return base;
      }
      this.reserveData(src.length);
      this.data.set(src, base);
      this.dlen = base + src.length;
      this.srcBase = base;
    }
    return base + this.srcStart;
  }

  /** The answer so far, as views of the buffers. */
  finish() {
    return { commands: this.commands.subarray(0, this.clen), data: this.data.subarray(0, this.dlen) };
  }

  reserveData(extra) {
    if (this.dlen + extra <= this.data.length) return;
    let size = this.data.length * 2;
    while (size < this.dlen + extra) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.data.subarray(0, this.dlen));
    this.data = grown;
  }

  /** Append `msg` (string: UTF-8; bytes: as is) to the data; its length (start: lastOffset). */
  putData(msg) {
    const offset = this.dlen;
    this.lastOffset = offset;
    if (typeof msg === "string") {
      if (msg === this.srcText && msg !== null) {
        this.lastOffset = this.sourceOffset();
        return this.srcEnd - this.srcStart;
      }
      this.reserveData(maxUtf8Bytes(msg));
      this.dlen = encodeUtf8Into(msg, this.data, offset);
    } else {
      this.reserveData(msg.length);
      this.data.set(msg, offset);
      this.dlen += msg.length;
    }
    return this.dlen - offset;
  }

  push(conn, kind, code, topicOffset, topicLen, offset, len) {
    if (this.clen + COMMAND_HEADER_BYTES > this.commands.length) {
      const grown = new Uint8Array(this.commands.length * 2);
      grown.set(this.commands.subarray(0, this.clen));
      this.commands = grown;
      this.words = LITTLE_ENDIAN ? new Uint32Array(grown.buffer) : null;
      this.view = new DataView(grown.buffer);
    }
    const at = this.clen;
    const lo = conn % TWO_32;
    const hi = (conn - lo) / TWO_32;
    // kind, reserved (0) and code share one little-endian u32.
    const kindCode = kind | (code << 16);
    const w = this.words;
    if (w !== null) {
      const k = at >> 2;
      w[k] = lo;
      w[k + 1] = hi;
      w[k + 2] = kindCode;
      w[k + 3] = topicOffset;
      w[k + 4] = topicLen;
      w[k + 5] = offset;
      w[k + 6] = len;
    } else {
      const v = this.view;
      v.setUint32(at, lo, true);
      v.setUint32(at + 4, hi, true);
      v.setUint32(at + 8, kindCode, true);
      v.setUint32(at + 12, topicOffset, true);
      v.setUint32(at + 16, topicLen, true);
      v.setUint32(at + 20, offset, true);
      v.setUint32(at + 24, len, true);
    }
    this.clen = at + COMMAND_HEADER_BYTES;
  }

  /** Send `text` (a string) to `conn` as a text message. */
  sendText(conn, text) {
    const len = this.putData(typeof text === "string" ? text : String(text));
    this.push(conn, CommandKind.SEND_TEXT, 0, 0, 0, this.lastOffset, len);
  }

  /** Send `bytes` (a Uint8Array) to `conn` as a binary message. */
  sendBinary(conn, bytes) {
    const len = this.putData(toBytes(bytes));
    this.push(conn, CommandKind.SEND_BINARY, 0, 0, 0, this.lastOffset, len);
  }

  /** Send `msg` to `conn`: a string as text, bytes as binary. */
  send(conn, msg) {
    if (msg === this.srcText && msg !== null) {
      // Echo of the message being handled, the hot case: a header that
      // points at its bytes, with no call that is not needed (calls are
      // what an interpreter pays most for).
      const base = this.srcBase;
      const start = this.srcStart;
      const offset = base < 0 ? this.sourceOffset() : base + start;
      this.push(conn, CommandKind.SEND_TEXT, 0, 0, 0, offset, this.srcEnd - start);
    } else if (typeof msg === "string") {
      const len = this.putData(msg);
      this.push(conn, CommandKind.SEND_TEXT, 0, 0, 0, this.lastOffset, len);
    } else {
      this.sendBinary(conn, msg);
    }
  }

  /** Close `conn` with `code` and a short UTF-8 `reason`. */
  close(conn, code = 1000, reason = "") {
    const len = this.putData(String(reason));
    this.push(conn, CommandKind.CLOSE, code, 0, 0, this.lastOffset, len);
  }

  /**
   * Deliver `msg` to every subscriber of `topic`, leaving out `except` (a
   * connection id, or 0/null for none).
   */
  publish(topic, msg, except = 0) {
    const text = typeof msg === "string";
    const topicLen = this.putData(String(topic));
    const topicOffset = this.lastOffset;
    const len = this.putData(text ? msg : toBytes(msg));
    const kind = text ? CommandKind.PUBLISH_TEXT : CommandKind.PUBLISH_BINARY;
    this.push(except || 0, kind, 0, topicOffset, topicLen, this.lastOffset, len);
  }

  /** Subscribe `conn` to `topic`. */
  subscribe(conn, topic) {
    const len = this.putData(String(topic));
    this.push(conn, CommandKind.SUBSCRIBE, 0, this.lastOffset, len, 0, 0);
  }

  /** Unsubscribe `conn` from `topic`. */
  unsubscribe(conn, topic) {
    const len = this.putData(String(topic));
    this.push(conn, CommandKind.UNSUBSCRIBE, 0, this.lastOffset, len, 0, 0);
  }

  /** Append a little-endian u64 to the data. */
  putU64(v) {
    this.reserveData(8);
    putU64(this.data, this.dlen, v);
    this.dlen += 8;
  }

  /**
   * Send an HTTP request for `conn` (0: the route): meta = `tag`, then the
   * head (`METHOD URL`, then `name: value` lines); payload = `body`.
   * Header names and values must not hold line breaks (checked by fetch).
   */
  httpRequest(conn, tag, method, url, headers, body) {
    const start = this.dlen;
    this.putU64(tag);
    let head = `${method} ${url}`;
    for (const [n, v] of headers) head += `\n${n}: ${v}`;
    this.putData(head);
    const metaLen = this.dlen - start;
    const len = this.putData(toBytes(body));
    this.push(conn, CommandKind.HTTP_REQUEST, 0, start, metaLen, this.lastOffset, len);
  }

  /** Start timer `tag` for `conn` (0: the route), due in `ms` milliseconds. */
  setTimer(conn, tag, ms) {
    const start = this.dlen;
    this.putU64(tag);
    this.putU64(ms);
    this.push(conn, CommandKind.SET_TIMER, 0, start, 16, 0, 0);
  }

  /** Cancel timer `tag` of `conn` (0: the route). */
  cancelTimer(conn, tag) {
    const start = this.dlen;
    this.putU64(tag);
    this.push(conn, CommandKind.CANCEL_TIMER, 0, start, 8, 0, 0);
  }

  /** Store `value` under `key` (bytes or strings) for `ttlMs` (0: none). */
  kvSet(key, value, ttlMs = 0) {
    const k = toBytes(key);
    if (k.length === 0) throw new TypeError("a key-value key cannot be empty");
    const start = this.dlen;
    this.putU64(ttlMs);
    this.putData(k);
    const metaLen = this.dlen - start;
    const len = this.putData(toBytes(value));
    this.push(0, CommandKind.KV_SET, 0, start, metaLen, this.lastOffset, len);
  }

  /** Remove `key` from the route's store. */
  kvDelete(key) {
    const k = toBytes(key);
    if (k.length === 0) throw new TypeError("a key-value key cannot be empty");
    const len = this.putData(k);
    this.push(0, CommandKind.KV_DELETE, 0, this.lastOffset, len, 0, 0);
  }

  /**
   * Pass `msg` on through proxied connection `conn` in `direction` (0: to
   * the upstream, 1: to the client): a string as text, bytes as binary.
   */
  forward(conn, direction, msg) {
    const text = typeof msg === "string";
    const len = this.putData(text ? msg : toBytes(msg));
    this.push(conn, text ? CommandKind.FORWARD_TEXT : CommandKind.FORWARD_BINARY, 0, 0, 0, this.lastOffset, len);
    // Byte 9, the direction (push writes it 0).
    this.commands[this.clen - COMMAND_HEADER_BYTES + 9] = direction;
  }

  /** Read up to `limit` publications of `channel` for `conn` (0: the route), newest first when `reverse`. */
  historyRead(conn, tag, limit, reverse, channel) {
    const start = this.dlen;
    this.putU64(tag);
    this.reserveData(5);
    putU32(this.data, this.dlen, limit);
    this.data[this.dlen + 4] = reverse ? 1 : 0;
    this.dlen += 5;
    this.putData(String(channel));
    this.push(conn, CommandKind.HISTORY_READ, 0, start, this.dlen - start, 0, 0);
  }

  /** Read `channel`'s presence for `conn` (0: the route). */
  presenceRead(conn, tag, channel) {
    const start = this.dlen;
    this.putU64(tag);
    this.putData(String(channel));
    this.push(conn, CommandKind.PRESENCE_READ, 0, start, this.dlen - start, 0, 0);
  }

  /**
   * Answer rt question `call` of `conn` (an rt-subscribe, pusher-connect or
   * pusher-subscribe): code 0 allows (`authorise`: a Pusher subscribe the
   * guest answered itself), any other refuses with that code; `message`
   * (UTF-8) is the refusal's message or an authorisation's channel data.
   */
  subscribeVerdict(conn, call, code, authorise = false, message = "") {
    const meta = this.dlen;
    this.putU64(call);
    const len = this.putData(String(message));
    this.push(conn, CommandKind.RT_SUBSCRIBE_VERDICT, code, meta, 8, this.lastOffset, len);
    this.commands[this.clen - COMMAND_HEADER_BYTES + 9] = authorise ? RT_AUTHORISE : RT_ALLOW;
  }

  /**
   * Answer rt question `call` of `conn` (an rt-publish or pusher-client-event):
   * `decision` RT_PASS, RT_REPLACE (with `data`, a string or bytes) or
   * RT_DROP (with `code`, the publisher's error; 0 the host's default).
   */
  publishVerdict(conn, call, decision, code = 0, data = EMPTY_BYTES) {
    const meta = this.dlen;
    this.putU64(call);
    let offset = 0;
    let len = 0;
    if (decision === RT_REPLACE) {
      len = this.putData(data);
      offset = this.lastOffset;
    }
    this.push(conn, CommandKind.RT_PUBLISH_VERDICT, code, meta, 8, offset, len);
    this.commands[this.clen - COMMAND_HEADER_BYTES + 9] = decision;
  }

  /** Store `bytes` (or a string, as UTF-8) as `conn`'s attachment (empty clears it). */
  setAttachment(conn, bytes) {
    const len = this.putData(typeof bytes === "string" ? bytes : toBytes(bytes));
    this.push(conn, CommandKind.SET_ATTACHMENT, 0, 0, 0, this.lastOffset, len);
  }
}

/** A Uint8Array view of `b` (Uint8Array, ArrayBuffer, typed array, or string as UTF-8). */
export function toBytes(b) {
  if (b instanceof Uint8Array) return b;
  if (b instanceof ArrayBuffer) return new Uint8Array(b);
  if (ArrayBuffer.isView(b)) return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  if (typeof b === "string") return encodeUtf8(b);
  throw new TypeError("expected a string, a Uint8Array or an ArrayBuffer");
}

const TOPIC_KINDS = new Set([
  CommandKind.PUBLISH_TEXT,
  CommandKind.PUBLISH_BINARY,
  CommandKind.SUBSCRIBE,
  CommandKind.UNSUBSCRIBE,
]);

/** The longest prefix of `reason` within MAX_CLOSE_REASON_BYTES, on a character boundary. */
function shortReason(data, start, len) {
  let end = start + Math.min(len, MAX_CLOSE_REASON_BYTES);
  if (len > MAX_CLOSE_REASON_BYTES) {
    while (end > start && (data[end] & 0xc0) === 0x80) end--;
  }
  return decodeUtf8(data, start, end);
}

/**
 * Read a guest's answer as the host does (weir-abi's `parse_commands`):
 * every rule checked in the documented order, close codes and reasons
 * repaired. A list of `{kind, ...}` objects shaped as the vectors'
 * `commands`; throws AbiError.
 */
export function decodeCommands(headers, data) {
  if (headers.length % COMMAND_HEADER_BYTES !== 0) {
    throw new AbiError("HeadersNotWhole", null, `${headers.length} bytes`);
  }
  const n = headers.length / COMMAND_HEADER_BYTES;
  const out = [];
  for (let i = 0; i < n; i++) {
    const c = readCommandHeader(headers, i * COMMAND_HEADER_BYTES);
    const forward = c.kind === CommandKind.FORWARD_TEXT || c.kind === CommandKind.FORWARD_BINARY;
    const verdictMax =
      c.kind === CommandKind.RT_PUBLISH_VERDICT ? RT_DROP : c.kind === CommandKind.RT_SUBSCRIBE_VERDICT ? RT_AUTHORISE : 0;
    if (c.reserved !== 0 && !(forward && c.reserved === 1) && !(c.reserved <= verdictMax)) {
      throw new AbiError("ReservedByteSet", i, `value ${c.reserved}`);
    }
    if (c.offset + c.len > data.length) throw new AbiError("RangeOutOfBounds", i, "payload");
    if (c.topic_offset + c.topic_len > data.length) throw new AbiError("RangeOutOfBounds", i, "topic");
    if (c.kind > CommandKind.RT_PUBLISH_VERDICT) throw new AbiError("UnknownKind", i, `kind ${c.kind}`);
    const pEnd = c.offset + c.len;
    const text =
      c.kind === CommandKind.SEND_TEXT ||
      c.kind === CommandKind.PUBLISH_TEXT ||
      c.kind === CommandKind.FORWARD_TEXT ||
      c.kind === CommandKind.RT_SUBSCRIBE_VERDICT;
    let payloadText = null;
    if (text || c.kind === CommandKind.CLOSE) {
      payloadText = decodeUtf8(data, c.offset, pEnd);
      if (payloadText === null) throw new AbiError(text ? "TextNotUtf8" : "ReasonNotUtf8", i);
    }
    const mStart = c.topic_offset;
    const mLen = c.topic_len;
    let metaOk = true;
    if (c.kind === CommandKind.HTTP_REQUEST) metaOk = mLen >= 8 && isUtf8(data, mStart + 8, mStart + mLen);
    else if (c.kind === CommandKind.SET_TIMER) metaOk = mLen === 16;
    else if (c.kind === CommandKind.CANCEL_TIMER) metaOk = mLen === 8;
    else if (c.kind === CommandKind.KV_SET) metaOk = mLen > 8;
    else if (c.kind === CommandKind.KV_DELETE) metaOk = mLen > 0;
    else if (c.kind === CommandKind.HISTORY_READ) metaOk = splitHistoryRead(data, mStart, mStart + mLen) !== null;
    else if (c.kind === CommandKind.PRESENCE_READ) metaOk = splitPresenceRead(data, mStart, mStart + mLen) !== null;
    else if (c.kind >= CommandKind.RT_SUBSCRIBE_VERDICT) metaOk = mLen === 8;
    if (!metaOk) throw new AbiError("MetaMalformed", i);
    let topic = null;
    if (TOPIC_KINDS.has(c.kind)) {
      if (c.topic_len === 0) throw new AbiError("EmptyTopic", i);
      topic = decodeUtf8(data, c.topic_offset, c.topic_offset + c.topic_len);
      if (topic === null) throw new AbiError("TopicNotUtf8", i);
    }
    const payload = data.subarray(c.offset, pEnd);
    switch (c.kind) {
      case CommandKind.SEND_TEXT:
        out.push({ kind: "send-text", conn: c.conn, text: payloadText });
        break;
      case CommandKind.SEND_BINARY:
        out.push({ kind: "send-binary", conn: c.conn, payload });
        break;
      case CommandKind.CLOSE:
        out.push({
          kind: "close",
          conn: c.conn,
          code: sendableCloseCode(c.code) ? c.code : FALLBACK_CLOSE_CODE,
          reason: shortReason(data, c.offset, c.len),
        });
        break;
      case CommandKind.PUBLISH_TEXT:
        out.push({ kind: "publish-text", topic, text: payloadText, exclude: c.conn || null });
        break;
      case CommandKind.PUBLISH_BINARY:
        out.push({ kind: "publish-binary", topic, payload, exclude: c.conn || null });
        break;
      case CommandKind.SUBSCRIBE:
        out.push({ kind: "subscribe", conn: c.conn, topic });
        break;
      case CommandKind.UNSUBSCRIBE:
        out.push({ kind: "unsubscribe", conn: c.conn, topic });
        break;
      case CommandKind.SET_ATTACHMENT:
        out.push({ kind: "set-attachment", conn: c.conn, attachment: payload });
        break;
      case CommandKind.HTTP_REQUEST:
        out.push({
          kind: "http-request",
          conn: c.conn,
          tag: u64(data, mStart),
          head: decodeUtf8(data, mStart + 8, mStart + mLen),
          body: payload,
        });
        break;
      case CommandKind.SET_TIMER:
        out.push({ kind: "set-timer", conn: c.conn, tag: u64(data, mStart), delay_ms: u64(data, mStart + 8) });
        break;
      case CommandKind.CANCEL_TIMER:
        out.push({ kind: "cancel-timer", conn: c.conn, tag: u64(data, mStart) });
        break;
      case CommandKind.KV_SET:
        out.push({ kind: "kv-set", key: data.subarray(mStart + 8, mStart + mLen), value: payload, ttl_ms: u64(data, mStart) });
        break;
      case CommandKind.KV_DELETE:
        out.push({ kind: "kv-delete", key: data.subarray(mStart, mStart + mLen) });
        break;
      case CommandKind.FORWARD_TEXT:
        out.push({ kind: "forward-text", conn: c.conn, direction: c.reserved, text: payloadText });
        break;
      case CommandKind.FORWARD_BINARY:
        out.push({ kind: "forward-binary", conn: c.conn, direction: c.reserved, payload });
        break;
      case CommandKind.HISTORY_READ:
        out.push({ kind: "history-read", conn: c.conn, ...splitHistoryRead(data, mStart, mStart + mLen) });
        break;
      case CommandKind.RT_SUBSCRIBE_VERDICT: {
        const v = { kind: "rt-subscribe-verdict", conn: c.conn, call: u64(data, mStart), code: c.code };
        if (c.reserved === RT_AUTHORISE || payloadText !== "") {
          v.authorise = c.reserved === RT_AUTHORISE;
          v.payload = payloadText;
        }
        out.push(v);
        break;
      }
      case CommandKind.RT_PUBLISH_VERDICT: {
        const v = { kind: "rt-publish-verdict", conn: c.conn, call: u64(data, mStart), verdict: PUBLISH_VERDICTS[c.reserved] };
        if (c.reserved === RT_REPLACE) v.data = payload;
        else if (c.reserved === RT_DROP) v.code = c.code;
        out.push(v);
        break;
      }
      default:
        out.push({ kind: "presence-read", conn: c.conn, ...splitPresenceRead(data, mStart, mStart + mLen) });
        break;
    }
  }
  return out;
}
