"""The weir:gateway batch ABI in plain Python: header layouts, the
connection-info layout, the answer writer, and validating readers for both
directions.

The layout is written down once, in the crate doc of abi/src/lib.rs; the
byte-exact test vectors in abi/vectors/ are the contract this module is
tested against (tests/test_vectors.py), as the Rust and JS codecs are.
Only the standard library (struct): it runs in the guest and natively.
"""

import struct

EVENT_HEADER_BYTES = 20
"""Bytes of one packed event header (host to guest)."""
COMMAND_HEADER_BYTES = 28
"""Bytes of one packed command header (guest to host)."""
MAX_CLOSE_REASON_BYTES = 123
"""Longest close reason the host sends on (RFC 6455 §5.5)."""
FALLBACK_CLOSE_CODE = 1011
"""The close code that replaces one an endpoint may not send."""

# Event kinds: the case indices of the WIT enum `event-kind` (0.4.0's I/O
# answers 4-6 included), and those that travel in the packed layout only
# (abi/src/lib.rs): a proxy filter's proxy-text 7 and proxy-binary 8 (byte
# 9: the direction), kv-error 9, a realtime route's history 10 and presence
# 11, a real-time namespace guest's rt-subscribe 12 and rt-publish 13, a
# Pusher app guest's pusher-connect 14, pusher-subscribe 15 and
# pusher-client-event 16 (their bytes: an rt request, abi/src/realtime.rs
# and abi/src/pusher.rs).
OPEN, TEXT, BINARY, CLOSE = 0, 1, 2, 3
HTTP_RESPONSE, HTTP_ERROR, TIMER = 4, 5, 6
PROXY_TEXT, PROXY_BINARY = 7, 8
KV_ERROR = 9
HISTORY, PRESENCE = 10, 11
RT_SUBSCRIBE, RT_PUBLISH = 12, 13
PUSHER_CONNECT, PUSHER_SUBSCRIBE, PUSHER_CLIENT_EVENT = 14, 15, 16
RT_EVENT_NAMES = ("rt-subscribe", "rt-publish", "pusher-connect", "pusher-subscribe",
                  "pusher-client-event")
"""The rt event kinds 12-16 by name, as the WIT comments and the vectors name them."""

# Command kinds: the case indices of the WIT enum `command-kind`.
SEND_TEXT = 0
SEND_BINARY = 1
CLOSE_CONN = 2
PUBLISH_TEXT = 3
PUBLISH_BINARY = 4
SUBSCRIBE = 5
UNSUBSCRIBE = 6
SET_ATTACHMENT = 7
HTTP_REQUEST = 8
SET_TIMER = 9
CANCEL_TIMER = 10
KV_SET = 11
KV_DELETE = 12
# Packed layout only: a proxy filter's forwards (byte 9: the direction) and
# a realtime route's reads.
FORWARD_TEXT = 13
FORWARD_BINARY = 14
HISTORY_READ = 15
PRESENCE_READ = 16
# A namespace or Pusher app guest's verdicts: the call id as the 8-byte
# meta; byte 9 the decision.
RT_SUBSCRIBE_VERDICT = 17
RT_PUBLISH_VERDICT = 18

RT_ALLOW, RT_AUTHORISE = 0, 1
"""Byte 9 of an rt-subscribe-verdict (abi/src/pusher.rs): allow (weir's own
checks decide), or authorise (a Pusher subscribe the guest answered itself)."""
RT_PASS, RT_REPLACE, RT_DROP = 0, 1, 2
"""Byte 9 of an rt-publish-verdict (abi/src/realtime.rs)."""
PUBLISH_VERDICTS = ("pass", "replace", "drop")
SIGNATURE_CHECKS = ("none", "passed", "failed")
"""Byte 0 of a pusher-subscribe's rest: what weir's HMAC check made of `auth`."""

DIRECTIONS = ("to-upstream", "to-client")
"""Byte 9 of a proxy event and of a forward command, as a word."""

HTTP_ERROR_REASONS = {1: "refused", 2: "timeout", 3: "connect", 4: "too-large", 5: "busy",
                      6: "invalid"}
"""The code of an http-error event as one word (abi/src/io.rs HttpErrorReason)."""
KV_ERROR_REASONS = {1: "max-bytes", 2: "max-keys", 3: "queue-full", 4: "too-large",
                    5: "no-store"}
"""The code of a kv-error event as one word (abi/src/io.rs KvErrorReason)."""
READ_ERROR_REASONS = {1: "bad-channel", 2: "history-off", 3: "presence-off", 4: "unavailable",
                      5: "busy", 6: "not-realtime"}
"""The code of a history or presence event as one word (abi/src/io.rs ReadErrorReason)."""

EVENT_HEADER = struct.Struct("<QBBHII")
"""conn, kind, reserved, code, offset, len."""
COMMAND_HEADER = struct.Struct("<QBBHIIII")
"""conn, kind, reserved, code, topic offset, topic len, offset, len."""
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_U64U32 = struct.Struct("<QI")
_U64U64 = struct.Struct("<QQ")
_U64U32U8 = struct.Struct("<QIB")

_TOPIC_KINDS = (PUBLISH_TEXT, PUBLISH_BINARY, SUBSCRIBE, UNSUBSCRIBE)


class AbiError(ValueError):
    """One way a buffer breaks the ABI: `variant` is the name of weir-abi's
    `AbiError` variant (the vectors' `error`), `index` the offending header
    (None for HeadersNotWhole)."""

    def __init__(self, variant, index, detail=""):
        where = "" if index is None else f" at header {index}"
        super().__init__(f"{variant}{where}{': ' + detail if detail else ''}")
        self.variant = variant
        self.index = index


# ------------------------------------------------------------------ headers

def read_event_header(b, at=0):
    """The fields of the event header at `at` of `b`, as a dict."""
    conn, kind, reserved, code, offset, length = EVENT_HEADER.unpack_from(b, at)
    return {"conn": conn, "kind": kind, "reserved": reserved, "code": code,
            "offset": offset, "len": length}


def pack_event_header(h):
    """The wire bytes of an event header given as a dict."""
    return EVENT_HEADER.pack(h["conn"], h["kind"], h.get("reserved", 0), h.get("code", 0),
                             h["offset"], h["len"])


def read_command_header(b, at=0):
    """The fields of the command header at `at` of `b`, as a dict."""
    conn, kind, reserved, code, t_off, t_len, offset, length = COMMAND_HEADER.unpack_from(b, at)
    return {"conn": conn, "kind": kind, "reserved": reserved, "code": code,
            "topic_offset": t_off, "topic_len": t_len, "offset": offset, "len": length}


def pack_command_header(h):
    """The wire bytes of a command header given as a dict."""
    return COMMAND_HEADER.pack(h["conn"], h["kind"], h.get("reserved", 0), h.get("code", 0),
                               h.get("topic_offset", 0), h.get("topic_len", 0),
                               h["offset"], h["len"])


# ------------------------------------------------------------------ conn info

class ConnInfo:
    """A connection's request target, route parameters and attachment
    (abi/src/conn_info.rs)."""

    __slots__ = ("target", "params", "attachment")

    def __init__(self, target, params, attachment):
        self.target = target
        self.params = params
        self.attachment = attachment


def parse_conn_info(b, start=0, end=None):
    """Parse connection-info bytes into a ConnInfo, or None when malformed."""
    if end is None:
        end = len(b)
    at = start

    def field():
        nonlocal at
        if at + 4 > end:
            return None
        (n,) = _U32.unpack_from(b, at)
        if n > end - at - 4:
            return None
        try:
            s = bytes(b[at + 4:at + 4 + n]).decode("utf-8")
        except UnicodeDecodeError:
            return None
        at += 4 + n
        return s

    target = field()
    if target is None or at + 4 > end:
        return None
    (count,) = _U32.unpack_from(b, at)
    at += 4
    params = []
    for _ in range(count):
        name = field()
        if name is None:
            return None
        value = field()
        if value is None:
            return None
        params.append((name, value))
    return ConnInfo(target, params, bytes(b[at:end]))


def encode_conn_info(target, params, attachment=b""):
    """Connection-info bytes for `target`, `params` and `attachment`."""
    out = bytearray()

    def put(s):
        raw = s.encode("utf-8")
        out.extend(_U32.pack(len(raw)))
        out.extend(raw)

    put(target)
    out.extend(_U32.pack(len(params)))
    for name, value in params:
        put(name)
        put(value)
    out.extend(attachment)
    return bytes(out)


# ------------------------------------------------------------------ I/O

# weir:gateway 0.4.0's I/O layouts (abi/src/io.rs). A command keeps its
# fixed fields in the header's topic range ("meta"); an event's bytes start
# with the tag (u64) it answers.

def split_http_response(b, start=0, end=None):
    """An http-response event's bytes: (tag, head, body), or None when
    malformed."""
    if end is None:
        end = len(b)
    if end - start < 12:
        return None
    tag, n = _U64U32.unpack_from(b, start)
    if n > end - start - 12:
        return None
    try:
        head = bytes(b[start + 12:start + 12 + n]).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return tag, head, bytes(b[start + 12 + n:end])


def split_http_error(b, start=0, end=None):
    """An http-error event's bytes: (tag, message), or None when malformed."""
    if end is None:
        end = len(b)
    if end - start < 8:
        return None
    try:
        message = bytes(b[start + 8:end]).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return _U64.unpack_from(b, start)[0], message


def header_lines(head):
    """A head's `name: value` lines as (name, value) pairs."""
    out = []
    for line in head.split("\n"):
        if not line:
            continue
        name, colon, value = line.partition(":")
        out.append((name.strip(), value.strip() if colon else ""))
    return out


def split_request_head(head):
    """A request head's (method, url, headers), or None without `METHOD URL`."""
    first, _, rest = head.partition("\n")
    method, sp, url = first.partition(" ")
    if not sp or not method or not url:
        return None
    return method, url, header_lines(rest)


def encode_http_response(tag, headers, body):
    """An http-response event's bytes (what the gateway sends) for `tag`,
    (name, value) pairs and `body`."""
    head = "\n".join(f"{n}: {v}" for n, v in headers).encode("utf-8")
    return _U64U32.pack(tag, len(head)) + head + _as_bytes(body)


def encode_http_error(tag, message):
    """An http-error event's bytes: `tag`, then `message`."""
    return _U64.pack(tag) + message.encode("utf-8")


def encode_tag(tag):
    """A timer event's bytes: its tag."""
    return _U64.pack(tag)


# The realtime reads (abi/src/io/reads.rs): history-read and presence-read
# commands, answered by history and presence events whose code is 0 or a
# read-error reason.

def _sized_text(b, at, end):
    """A u32 length and that many bytes at `at`, UTF-8: (text, end) or None."""
    if end - at < 4:
        return None
    n = _U32.unpack_from(b, at)[0]
    if n > end - at - 4:
        return None
    try:
        return bytes(b[at + 4:at + 4 + n]).decode("utf-8"), at + 4 + n
    except UnicodeDecodeError:
        return None


def split_history(code, b, start=0, end=None):
    """A history event's bytes: (tag, error code) for a failed read, (tag,
    0, offset, epoch, [(offset, data as JSON text)]) for an answer; None
    when malformed."""
    if end is None:
        end = len(b)
    if end - start < 8:
        return None
    tag = _U64.unpack_from(b, start)[0]
    if code:
        return tag, code
    if end - start < 16:
        return None
    offset = _U64.unpack_from(b, start + 8)[0]
    epoch = _sized_text(b, start + 16, end)
    if epoch is None:
        return None
    publications = []
    at = epoch[1]
    while at < end:
        if end - at < 8:
            return None
        o = _U64.unpack_from(b, at)[0]
        data = _sized_text(b, at + 8, end)
        if data is None:
            return None
        publications.append((o, data[0]))
        at = data[1]
    return tag, 0, offset, epoch[0], publications


def split_presence(code, b, start=0, end=None):
    """A presence event's bytes: (tag, error code) for a failed read, (tag,
    0, [(client, user, conn info JSON text or "")]) for an answer; None
    when malformed."""
    if end is None:
        end = len(b)
    if end - start < 8:
        return None
    tag = _U64.unpack_from(b, start)[0]
    if code:
        return tag, code
    members = []
    at = start + 8
    while at < end:
        client = _sized_text(b, at, end)
        user = client and _sized_text(b, client[1], end)
        info = user and _sized_text(b, user[1], end)
        if info is None:
            return None
        members.append((client[0], user[0], info[0]))
        at = info[1]
    return tag, 0, members


def _sized(raw):
    return _U32.pack(len(raw)) + raw


def encode_history(tag, offset, epoch, publications):
    """A successful history event's bytes (what the gateway sends): `tag`,
    the position, each (offset, JSON text)."""
    out = _U64U64.pack(tag, offset) + _sized(epoch.encode("utf-8"))
    for o, data in publications:
        out += _U64.pack(o) + _sized(_as_bytes(data))
    return out


def encode_presence(tag, members):
    """A successful presence event's bytes: `tag`, then each member's
    (client, user, conn info JSON text or "")."""
    out = _U64.pack(tag)
    for client, user, info in members:
        out += _sized(client.encode("utf-8")) + _sized(user.encode("utf-8")) + _sized(
            _as_bytes(info))
    return out


def split_history_read(meta):
    """A history-read's meta: (tag, limit, reverse, channel), or None."""
    if len(meta) < 14 or meta[12] > 1:
        return None
    tag, limit, reverse = _U64U32U8.unpack_from(meta)
    try:
        return tag, limit, reverse == 1, bytes(meta[13:]).decode("utf-8")
    except UnicodeDecodeError:
        return None


def split_presence_read(meta):
    """A presence-read's meta: (tag, channel), or None."""
    if len(meta) < 9:
        return None
    try:
        return _U64.unpack_from(meta)[0], bytes(meta[8:]).decode("utf-8")
    except UnicodeDecodeError:
        return None


# A namespace or Pusher app guest's questions (abi/src/realtime.rs): the
# call id, four sized fields (channel, client, user UTF-8; info bytes), then
# the rest.

class RtRequest:
    """An rt event's bytes, split: the call id, the four fields and the rest."""

    __slots__ = ("call", "channel", "client", "user", "info", "rest")

    def __init__(self, call, channel, client, user, info, rest):
        self.call = call
        self.channel = channel
        self.client = client
        self.user = user
        self.info = info
        self.rest = rest


def split_rt_request(b, start=0, end=None):
    """An rt event's bytes as an RtRequest, or None when they do not follow
    the layout."""
    if end is None:
        end = len(b)
    if end - start < 8:
        return None
    call = _U64.unpack_from(b, start)[0]
    channel = _sized_text(b, start + 8, end)
    client = channel and _sized_text(b, channel[1], end)
    user = client and _sized_text(b, client[1], end)
    if user is None:
        return None
    at = user[1]
    if end - at < 4:
        return None
    n = _U32.unpack_from(b, at)[0]
    if n > end - at - 4:
        return None
    return RtRequest(call, channel[0], client[0], user[0], bytes(b[at + 4:at + 4 + n]),
                     bytes(b[at + 4 + n:end]))


def split_subscribe_rest(rest):
    """A pusher-subscribe's rest: (signature check as a word, auth), or None."""
    if not rest or rest[0] >= len(SIGNATURE_CHECKS):
        return None
    try:
        return SIGNATURE_CHECKS[rest[0]], bytes(rest[1:]).decode("utf-8")
    except UnicodeDecodeError:
        return None


def encode_rt_request(call, channel, client, user, info, rest=b""):
    """An rt event's bytes (what the gateway sends); `info` and `rest` bytes
    or str."""
    return (_U64.pack(call) + _sized(channel.encode("utf-8")) + _sized(client.encode("utf-8"))
            + _sized(user.encode("utf-8")) + _sized(_as_bytes(info)) + _as_bytes(rest))


def encode_subscribe_rest(signature, auth):
    """A pusher-subscribe's rest: the signature check ("none", "passed",
    "failed") and the client's auth."""
    return bytes([SIGNATURE_CHECKS.index(signature)]) + auth.encode("utf-8")


# ------------------------------------------------------------------ events

def check_event_ranges(headers, data):
    """Check an event batch's structure (whole headers, every range inside
    `data`); the number of events. Payload UTF-8 is checked as it is
    decoded."""
    if len(headers) % EVENT_HEADER_BYTES:
        raise AbiError("HeadersNotWhole", None, f"{len(headers)} bytes")
    size = len(data)
    for i, (_, _, _, _, offset, length) in enumerate(EVENT_HEADER.iter_unpack(headers)):
        if offset + length > size:
            raise AbiError("RangeOutOfBounds", i, f"payload {offset}+{length} of {size}")
    return len(headers) // EVENT_HEADER_BYTES


def decode_events(headers, data):
    """Read a whole event batch, validated as weir-abi's `parse_events`
    does: a list of dicts with a `kind` (the WIT case name) and the fields
    of abi/vectors/README.md (bytes as `bytes`). Unknown kinds are skipped.
    Raises AbiError."""
    check_event_ranges(headers, data)
    out = []
    for i, (conn, kind, _, code, offset, length) in enumerate(EVENT_HEADER.iter_unpack(headers)):
        raw = bytes(data[offset:offset + length])
        if kind == OPEN:
            info = parse_conn_info(raw)
            if info is None:
                raise AbiError("ConnInfoMalformed", i)
            out.append({"kind": "open", "conn": conn, "target": info.target,
                        "params": [list(p) for p in info.params], "attachment": info.attachment})
        elif kind == TEXT:
            try:
                out.append({"kind": "text", "conn": conn, "text": raw.decode("utf-8")})
            except UnicodeDecodeError:
                raise AbiError("TextNotUtf8", i) from None
        elif kind == BINARY:
            out.append({"kind": "binary", "conn": conn, "payload": raw})
        elif kind == CLOSE:
            try:
                reason = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise AbiError("ReasonNotUtf8", i) from None
            out.append({"kind": "close", "conn": conn, "code": code, "reason": reason})
        elif kind == HTTP_RESPONSE:
            r = split_http_response(data, offset, offset + length)
            if r is None:
                raise AbiError("IoEventMalformed", i)
            out.append({"kind": "http-response", "conn": conn, "tag": r[0], "status": code,
                        "head": r[1], "body": r[2]})
        elif kind == HTTP_ERROR:
            r = split_http_error(data, offset, offset + length)
            if r is None:
                raise AbiError("IoEventMalformed", i)
            out.append({"kind": "http-error", "conn": conn, "tag": r[0], "reason": code,
                        "message": r[1]})
        elif kind == TIMER:
            if length != 8:
                raise AbiError("IoEventMalformed", i)
            out.append({"kind": "timer", "conn": conn, "tag": _U64.unpack_from(data, offset)[0]})
        elif kind == KV_ERROR:
            out.append({"kind": "kv-error", "conn": conn, "reason": code, "key": raw})
        elif kind in (PROXY_TEXT, PROXY_BINARY):
            direction = headers[i * EVENT_HEADER_BYTES + 9]
            if direction > 1:
                raise AbiError("ReservedByteSet", i, f"value {direction}")
            if kind == PROXY_BINARY:
                out.append({"kind": "proxy-binary", "conn": conn, "direction": direction,
                            "payload": raw})
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise AbiError("TextNotUtf8", i) from None
            out.append({"kind": "proxy-text", "conn": conn, "direction": direction, "text": text})
        elif kind == HISTORY:
            r = split_history(code, data, offset, offset + length)
            if r is None:
                raise AbiError("IoEventMalformed", i)
            if r[1]:
                out.append({"kind": "history", "conn": conn, "tag": r[0], "error": r[1]})
            else:
                out.append({"kind": "history", "conn": conn, "tag": r[0], "offset": r[2],
                            "epoch": r[3], "publications": [list(p) for p in r[4]]})
        elif kind == PRESENCE:
            r = split_presence(code, data, offset, offset + length)
            if r is None:
                raise AbiError("IoEventMalformed", i)
            if r[1]:
                out.append({"kind": "presence", "conn": conn, "tag": r[0], "error": r[1]})
            else:
                out.append({"kind": "presence", "conn": conn, "tag": r[0], "members": [
                    {"client": c, "user": u, "conn_info": n} for c, u, n in r[2]]})
        elif RT_SUBSCRIBE <= kind <= PUSHER_CLIENT_EVENT:
            r = split_rt_request(data, offset, offset + length)
            if r is None:
                raise AbiError("IoEventMalformed", i)
            e = {"kind": RT_EVENT_NAMES[kind - RT_SUBSCRIBE], "conn": conn, "call": r.call,
                 "channel": r.channel, "client": r.client, "user": r.user, "info": r.info}
            if kind == PUSHER_SUBSCRIBE:
                sub = split_subscribe_rest(r.rest)
                if sub is None:
                    raise AbiError("IoEventMalformed", i)
                e["signature"], e["auth"] = sub
            elif kind in (RT_PUBLISH, PUSHER_CLIENT_EVENT):
                e["data"] = r.rest
            out.append(e)
    return out


# ------------------------------------------------------------------ commands

def sendable_close_code(code):
    """Whether an endpoint may send close code `code` (RFC 6455 §7.4)."""
    return 1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999


def _as_bytes(msg):
    if isinstance(msg, str):
        return msg.encode("utf-8")
    return msg


class CommandWriter:
    """A batch's answer being written: packed command headers and one shared
    data buffer (bytearrays, appended to)."""

    __slots__ = ("commands", "data")

    def __init__(self):
        self.commands = bytearray()
        self.data = bytearray()

    def reset(self):
        """Start a new answer."""
        self.commands = bytearray()
        self.data = bytearray()

    def finish(self):
        """The answer: (command headers, data) as bytes."""
        return bytes(self.commands), bytes(self.data)

    def _put(self, raw):
        offset = len(self.data)
        self.data += raw
        return offset, len(raw)

    def _push(self, conn, kind, code, topic, payload):
        self.commands += COMMAND_HEADER.pack(conn, kind, 0, code, topic[0], topic[1],
                                             payload[0], payload[1])

    def send_text(self, conn, text):
        """Send `text` (a str) to `conn` as a text message."""
        data = self.data
        offset = len(data)
        data += text.encode("utf-8")
        self.commands += COMMAND_HEADER.pack(conn, SEND_TEXT, 0, 0, 0, 0, offset, len(data) - offset)

    def send_binary(self, conn, data):
        """Send `data` (bytes-like) to `conn` as a binary message."""
        self._push(conn, SEND_BINARY, 0, (0, 0), self._put(data))

    def send(self, conn, msg):
        """Send `msg` to `conn`: a str as text, bytes as binary."""
        data = self.data
        offset = len(data)
        if isinstance(msg, str):
            data += msg.encode("utf-8")
            kind = SEND_TEXT
        else:
            data += msg
            kind = SEND_BINARY
        self.commands += COMMAND_HEADER.pack(conn, kind, 0, 0, 0, 0, offset, len(data) - offset)

    def close(self, conn, code=1000, reason=""):
        """Close `conn` with `code` and a short UTF-8 `reason`."""
        self._push(conn, CLOSE_CONN, code, (0, 0), self._put(reason.encode("utf-8")))

    def publish(self, topic, msg, exclude=None):
        """Deliver `msg` to every subscriber of `topic`, except `exclude`."""
        kind = PUBLISH_TEXT if isinstance(msg, str) else PUBLISH_BINARY
        t = self._put(topic.encode("utf-8"))
        self._push(exclude or 0, kind, 0, t, self._put(_as_bytes(msg)))

    def subscribe(self, conn, topic):
        """Subscribe `conn` to `topic`."""
        self._push(conn, SUBSCRIBE, 0, self._put(topic.encode("utf-8")), (0, 0))

    def unsubscribe(self, conn, topic):
        """Unsubscribe `conn` from `topic`."""
        self._push(conn, UNSUBSCRIBE, 0, self._put(topic.encode("utf-8")), (0, 0))

    def set_attachment(self, conn, data):
        """Store `data` (bytes, or a str as UTF-8) as `conn`'s attachment."""
        self._push(conn, SET_ATTACHMENT, 0, (0, 0), self._put(_as_bytes(data)))

    def http_request(self, conn, tag, method, url, headers, body):
        """Send an HTTP request for `conn` (0: the route): meta = `tag`,
        then the head (`METHOD URL`, then `name: value` lines); payload =
        `body`. Names and values must not hold line breaks (fetch checks)."""
        head = method + " " + url + "".join(f"\n{n}: {v}" for n, v in headers)
        meta = self._put(_U64.pack(tag) + head.encode("utf-8"))
        self._push(conn, HTTP_REQUEST, 0, meta, self._put(_as_bytes(body)))

    def set_timer(self, conn, tag, ms):
        """Start timer `tag` for `conn` (0: the route), due in `ms` milliseconds."""
        self._push(conn, SET_TIMER, 0, self._put(_U64U64.pack(tag, ms)), (0, 0))

    def cancel_timer(self, conn, tag):
        """Cancel timer `tag` of `conn` (0: the route)."""
        self._push(conn, CANCEL_TIMER, 0, self._put(_U64.pack(tag)), (0, 0))

    def kv_set(self, key, value, ttl_ms=0):
        """Store `value` under `key` (bytes, or str as UTF-8) for `ttl_ms`
        milliseconds (0: until deleted)."""
        key = _as_bytes(key)
        if not key:
            raise ValueError("a key-value key cannot be empty")
        meta = self._put(_U64.pack(ttl_ms) + key)
        self._push(0, KV_SET, 0, meta, self._put(_as_bytes(value)))

    def forward(self, conn, direction, msg):
        """Pass `msg` on through proxied connection `conn` in `direction`
        (0: to the upstream, 1: to the client): a str as text, bytes as binary."""
        kind = FORWARD_TEXT if isinstance(msg, str) else FORWARD_BINARY
        offset, length = self._put(_as_bytes(msg))
        self.commands += COMMAND_HEADER.pack(conn, kind, direction, 0, 0, 0, offset, length)

    def history_read(self, conn, tag, limit, reverse, channel):
        """Read up to `limit` publications of `channel` for `conn` (0: the
        route), newest first when `reverse`."""
        meta = _U64U32U8.pack(tag, limit, 1 if reverse else 0) + channel.encode("utf-8")
        self._push(conn, HISTORY_READ, 0, self._put(meta), (0, 0))

    def presence_read(self, conn, tag, channel):
        """Read `channel`'s presence for `conn` (0: the route)."""
        self._push(conn, PRESENCE_READ, 0, self._put(_U64.pack(tag) + channel.encode("utf-8")),
                   (0, 0))

    def subscribe_verdict(self, conn, call, code, authorise=False, message=""):
        """Answer rt question `call` of `conn` (an rt-subscribe,
        pusher-connect or pusher-subscribe): code 0 allows (`authorise`: a
        Pusher subscribe the guest answered itself), any other refuses with
        it; `message` is the refusal's message or an authorisation's
        channel data."""
        meta = self._put(_U64.pack(call))
        offset, length = self._put(message.encode("utf-8"))
        self.commands += COMMAND_HEADER.pack(conn, RT_SUBSCRIBE_VERDICT,
                                             RT_AUTHORISE if authorise else RT_ALLOW, code,
                                             meta[0], meta[1], offset, length)

    def publish_verdict(self, conn, call, decision, code=0, data=b""):
        """Answer rt question `call` of `conn` (an rt-publish or
        pusher-client-event): RT_PASS, RT_REPLACE with `data` (bytes or
        str), or RT_DROP with `code` (the publisher's error; 0 the host's
        default)."""
        meta = self._put(_U64.pack(call))
        payload = self._put(_as_bytes(data)) if decision == RT_REPLACE else (0, 0)
        self.commands += COMMAND_HEADER.pack(conn, RT_PUBLISH_VERDICT, decision, code, meta[0],
                                             meta[1], payload[0], payload[1])

    def kv_delete(self, key):
        """Remove `key` from the route's store."""
        key = _as_bytes(key)
        if not key:
            raise ValueError("a key-value key cannot be empty")
        self._push(0, KV_DELETE, 0, self._put(key), (0, 0))


def _short_reason(raw):
    if len(raw) <= MAX_CLOSE_REASON_BYTES:
        return raw.decode("utf-8")
    end = MAX_CLOSE_REASON_BYTES
    while end > 0 and (raw[end] & 0xC0) == 0x80:
        end -= 1
    return raw[:end].decode("utf-8")


def decode_commands(headers, data):
    """Read a guest's answer as the host does (weir-abi's
    `parse_commands`): every rule checked in the documented order, close
    codes and reasons repaired. A list of dicts shaped as the vectors'
    `commands`; raises AbiError."""
    if len(headers) % COMMAND_HEADER_BYTES:
        raise AbiError("HeadersNotWhole", None, f"{len(headers)} bytes")
    size = len(data)
    out = []
    for i, (conn, kind, reserved, code, t_off, t_len, offset, length) in enumerate(
            COMMAND_HEADER.iter_unpack(headers)):
        if reserved and not (reserved == 1 and kind in (FORWARD_TEXT, FORWARD_BINARY)) and not (
                (kind == RT_SUBSCRIBE_VERDICT and reserved <= RT_AUTHORISE)
                or (kind == RT_PUBLISH_VERDICT and reserved <= RT_DROP)):
            raise AbiError("ReservedByteSet", i, f"value {reserved}")
        if offset + length > size:
            raise AbiError("RangeOutOfBounds", i, "payload")
        if t_off + t_len > size:
            raise AbiError("RangeOutOfBounds", i, "topic")
        if kind > RT_PUBLISH_VERDICT:
            raise AbiError("UnknownKind", i, f"kind {kind}")
        payload = bytes(data[offset:offset + length])
        text = None
        if kind in (SEND_TEXT, PUBLISH_TEXT, CLOSE_CONN, FORWARD_TEXT, RT_SUBSCRIBE_VERDICT):
            try:
                text = payload.decode("utf-8")
            except UnicodeDecodeError:
                raise AbiError("ReasonNotUtf8" if kind == CLOSE_CONN else "TextNotUtf8", i) from None
        meta = bytes(data[t_off:t_off + t_len])
        if kind == HTTP_REQUEST:
            meta_ok = t_len >= 8 and _is_utf8(meta[8:])
        elif kind == SET_TIMER:
            meta_ok = t_len == 16
        elif kind == CANCEL_TIMER:
            meta_ok = t_len == 8
        elif kind == KV_SET:
            meta_ok = t_len > 8
        elif kind == KV_DELETE:
            meta_ok = t_len > 0
        elif kind == HISTORY_READ:
            meta_ok = split_history_read(meta) is not None
        elif kind == PRESENCE_READ:
            meta_ok = split_presence_read(meta) is not None
        elif kind in (RT_SUBSCRIBE_VERDICT, RT_PUBLISH_VERDICT):
            meta_ok = t_len == 8
        else:
            meta_ok = True
        if not meta_ok:
            raise AbiError("MetaMalformed", i)
        topic = None
        if kind in _TOPIC_KINDS:
            if t_len == 0:
                raise AbiError("EmptyTopic", i)
            try:
                topic = bytes(data[t_off:t_off + t_len]).decode("utf-8")
            except UnicodeDecodeError:
                raise AbiError("TopicNotUtf8", i) from None
        if kind == SEND_TEXT:
            out.append({"kind": "send-text", "conn": conn, "text": text})
        elif kind == SEND_BINARY:
            out.append({"kind": "send-binary", "conn": conn, "payload": payload})
        elif kind == CLOSE_CONN:
            out.append({"kind": "close", "conn": conn,
                        "code": code if sendable_close_code(code) else FALLBACK_CLOSE_CODE,
                        "reason": _short_reason(payload)})
        elif kind == PUBLISH_TEXT:
            out.append({"kind": "publish-text", "topic": topic, "text": text,
                        "exclude": conn or None})
        elif kind == PUBLISH_BINARY:
            out.append({"kind": "publish-binary", "topic": topic, "payload": payload,
                        "exclude": conn or None})
        elif kind == SUBSCRIBE:
            out.append({"kind": "subscribe", "conn": conn, "topic": topic})
        elif kind == UNSUBSCRIBE:
            out.append({"kind": "unsubscribe", "conn": conn, "topic": topic})
        elif kind == SET_ATTACHMENT:
            out.append({"kind": "set-attachment", "conn": conn, "attachment": payload})
        elif kind == HTTP_REQUEST:
            out.append({"kind": "http-request", "conn": conn, "tag": _U64.unpack_from(meta)[0],
                        "head": meta[8:].decode("utf-8"), "body": payload})
        elif kind == SET_TIMER:
            tag, delay = _U64U64.unpack(meta)
            out.append({"kind": "set-timer", "conn": conn, "tag": tag, "delay_ms": delay})
        elif kind == CANCEL_TIMER:
            out.append({"kind": "cancel-timer", "conn": conn, "tag": _U64.unpack(meta)[0]})
        elif kind == KV_SET:
            out.append({"kind": "kv-set", "key": meta[8:], "value": payload,
                        "ttl_ms": _U64.unpack_from(meta)[0]})
        elif kind == KV_DELETE:
            out.append({"kind": "kv-delete", "key": meta})
        elif kind == FORWARD_TEXT:
            out.append({"kind": "forward-text", "conn": conn, "direction": reserved, "text": text})
        elif kind == FORWARD_BINARY:
            out.append({"kind": "forward-binary", "conn": conn, "direction": reserved,
                        "payload": payload})
        elif kind == HISTORY_READ:
            tag, limit, reverse, channel = split_history_read(meta)
            out.append({"kind": "history-read", "conn": conn, "tag": tag, "limit": limit,
                        "reverse": reverse, "channel": channel})
        elif kind == RT_SUBSCRIBE_VERDICT:
            v = {"kind": "rt-subscribe-verdict", "conn": conn, "call": _U64.unpack(meta)[0],
                 "code": code}
            if reserved == RT_AUTHORISE or text:
                v["authorise"] = reserved == RT_AUTHORISE
                v["payload"] = text
            out.append(v)
        elif kind == RT_PUBLISH_VERDICT:
            v = {"kind": "rt-publish-verdict", "conn": conn, "call": _U64.unpack(meta)[0],
                 "verdict": PUBLISH_VERDICTS[reserved]}
            if reserved == RT_REPLACE:
                v["data"] = payload
            elif reserved == RT_DROP:
                v["code"] = code
            out.append(v)
        else:
            tag, channel = split_presence_read(meta)
            out.append({"kind": "presence-read", "conn": conn, "tag": tag, "channel": channel})
    return out


def _is_utf8(b):
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
