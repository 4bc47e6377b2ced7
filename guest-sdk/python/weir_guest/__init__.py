"""weir-guest for Python: write a weir WebSocket handler as a class with
hooks. `python3 guest-sdk/python/build.py chat.py -o chat.wasm` builds the
module's `Handler` class into a component (componentize-py).

    from weir_guest import Handler as Base

    class Handler(Base):
        def on_open(self, conn):
            conn.subscribe(conn.param("room") or "lobby")

        def on_message(self, conn, msg):
            conn.publish(conn.param("room") or "lobby", msg)

Hooks (all optional but on_message):

- on_upgrade(req): decide on the HTTP upgrade, before the connection
  exists. Return None (or True) to accept, a status (400-599, or False for
  403) to refuse, or Accept(state=..., protocol=...) to accept with a first
  connection state and/or a subprotocol the client offered.
- on_open(conn), on_message(conn, msg), on_close(conn, code, reason): `msg`
  is a str for a text message and bytes for a binary one.
- on_timer(conn, tag): a timer set with conn.set_timer (or route.set_timer,
  then `conn` is `route`) without a callback, or whose callback this
  instance no longer has (it replaced the one that set it).
- on_kv_error(route, key, reason): a kv.set or kv.delete the gateway refused.
- on_proxy_message(conn, direction, msg): a proxy route's filter (`filter =
  "x.wasm"` on a `native = "proxy"` route; on_message is then never called,
  and a filter class need not define it): `msg` on its way through `conn`,
  `direction` TO_UPSTREAM or TO_CLIENT. Return None (or Verdict.PASS) to
  pass it on, a str or bytes (or Verdict.replace(msg)) to pass that on in
  its place, Verdict.DROP, or Verdict.close(code, reason) to close the
  client (and the upstream). A plain def: messages of one direction go on
  in the order they came.
- on_subscribe(req), on_client_publish(req): a real-time namespace's guest
  (`guest = "x.wasm"` on a `[[namespaces]]` table of a centrifugo route; it
  needs no on_message). A client asks to subscribe to `req.channel`
  (`req.client`, `req.user`, `req.info` the token's info claim): return
  None (or True) to allow, False to refuse with 103 (permission denied), or
  an error code (or Verdict.refuse(code)). A client publishes `req.data` (a
  value; `req.text` its JSON): return None to publish it, a str or bytes
  (JSON; or Verdict.replace(x)) to publish that instead, Verdict.DROP (the
  client gets 103) or Verdict.drop(code).
- on_pusher_connect(req), on_pusher_subscribe(req),
  on_pusher_client_event(req): a Pusher app's guest (`guest = "x.wasm"` on
  a pusher route's `[[route.apps]]`). A connection opens (`req.target`,
  `req.path`, `req.query(name)`, `req.header(name)`, `req.socket_id`):
  None to allow, Verdict.refuse(code, message) to refuse (4000-4099 as
  given, anything else 4009). A client subscribes (`req.channel`,
  `req.auth`, `req.signature` "none"/"passed"/"failed" from weir's HMAC
  check, `req.channel_data`, `req.user`): None to leave it to weir's own
  check, Verdict.authorise(member) to subscribe whatever the signature
  (member: the presence channel data, `{"user_id", "user_info"}`, or None
  for the client's own), Verdict.refuse(status, message). A client event
  (`req.event`, `req.data`): as on_client_publish (Verdict.DROP drops it
  silently, Verdict.drop(code) tells the sender).
  These five are plain defs that decide at once, as Rust's do: one that
  raises (or is `async def`) answers nothing, and the gateway fails the
  question (as for a Rust guest's trap: error 100, `GuestError`) while the
  instance goes on.
- check_state(state): run by a deploy or rollback before this version
  serves (the `weir:gateway/state` export): `state` is a live connection's
  saved conn.state; raise (or return False or a message) when this version
  cannot work with it, and the deploy is refused with the count (unless
  the operator resets state). By default the check is that the attachment
  is JSON, what every version of this SDK writes.

On a route with `realtime = true`, `await conn.history(channel, limit,
newest=False)` and `await conn.presence(channel)` (and route.history,
route.presence) read the real-time core's channels; the answer comes in a
later batch, as a fetch's does, or raises ReadError.

Any hook may be `async def` (weir:gateway 0.4.0): `await fetch(...)`,
`await sleep(seconds)`, `await gather(...)`. What follows an await runs
when the event it waits for arrives, in a later batch, inside the
gateway's call (weir_guest/io.py). An `async def on_upgrade` may await one
fetch: the gateway defers the upgrade on it.

`conn.state` is the connection's state: any JSON value. After each hook the
SDK compares its JSON with what it saved last and, when it changed, stores
it in the connection's host-held attachment, so it survives the instance
being replaced (recycle_after, a fault, a deploy); mutating a dict or list
in place counts as a change.

A hook that raises closes only its connection with 1011 (the traceback is
logged); the instance and the batch's other connections go on. MemoryError
and the route's deadline end the whole batch instead (its connections get
1011, a fresh instance takes over), as for a Rust guest. `self` is one
object per instance: keep nothing there that must be shared or durable.
"""

from dataclasses import dataclass
from typing import Any, Optional

from . import abi
from . import io as _io
from .io import (  # noqa: F401 - the SDK's API
    MAX_PENDING_READS, MAX_PENDING_REQUESTS, MAX_PENDING_TIMERS, FetchError, Future, Headers,
    History, Member, Position, Publication, ReadError, Response, Task, cancel_timer,
    create_task, fetch, gather, kv, route, set_timer, sleep)

_pack_command = abi.COMMAND_HEADER.pack

__all__ = ["Handler", "Conn", "Request", "Accept", "log", "ERROR", "WARN", "INFO", "DEBUG",
           "TRACE", "fetch", "sleep", "gather", "create_task", "set_timer", "cancel_timer",
           "kv", "route", "Response", "Headers", "FetchError", "Future", "Task",
           "MAX_PENDING_REQUESTS", "MAX_PENDING_TIMERS", "MAX_PENDING_READS", "Verdict",
           "TO_UPSTREAM", "TO_CLIENT", "ReadError", "History", "Position", "Publication",
           "Member", "SubscribeRequest", "PublishRequest", "ConnectRequest", "ChannelRequest",
           "ClientEventRequest"]

# Log levels (mapped to the WIT `level` enum by the runtime).
ERROR, WARN, INFO, DEBUG, TRACE = "error", "warn", "info", "debug", "trace"

_log_sink = None

TO_UPSTREAM = "to-upstream"
"""A proxied message from the client toward the upstream server."""
TO_CLIENT = "to-client"
"""A proxied message from the upstream server toward the client."""


class Verdict:
    """What a proxy filter does with one message (on_proxy_message's
    return): PASS it on, pass a replacement on instead (`replace(msg)`: a
    str as text, bytes as binary), DROP it, or `close(code, reason)` the
    client (the upstream gets a close of its own) and pass nothing on."""

    __slots__ = ("verdict", "message", "code", "reason")

    def __init__(self, verdict, message=None, code=0, reason=""):
        self.verdict = verdict
        self.message = message
        self.code = code
        self.reason = reason

    @staticmethod
    def replace(msg):
        """Pass `msg` on in the message's place."""
        if not isinstance(msg, str):
            msg = bytes(memoryview(msg))  # bytes-like only (bytes(5) would be 5 zeros)
        return Verdict("replace", msg)

    @staticmethod
    def close(code=1000, reason=""):
        """Close the client with `code` and `reason`; nothing goes on."""
        return Verdict("close", code=code, reason=str(reason))

    # The real-time guests' answers (on_subscribe, on_client_publish and the
    # Pusher hooks); PASS, DROP and replace serve them too.

    @staticmethod
    def refuse(code, message=""):
        """Refuse a subscribe or connection with `code` (a Centrifugo error
        code; a Pusher close code or subscription status) and, for Pusher,
        `message`."""
        return Verdict("refuse", code=_code(code), reason=str(message))

    @staticmethod
    def authorise(member=None):
        """A Pusher subscribe the guest authorised itself (whatever weir's
        signature check said); for a presence channel `member` is the
        member's channel data (`{"user_id": ..., "user_info": ...}`, or its
        JSON), None for the client's own."""
        if member is None:
            data = ""
        elif isinstance(member, str):
            data = member
        else:
            import json
            data = json.dumps(member, separators=(",", ":"))
        return Verdict("authorise", data)

    @staticmethod
    def drop(code=0):
        """Publish nothing; the publisher gets `code` (0: Centrifugo's 103; a
        Pusher event is dropped silently)."""
        return Verdict("drop", code=_code(code))

    def __repr__(self):
        return f"Verdict({self.verdict!r})"


Verdict.PASS = Verdict("pass")
Verdict.DROP = Verdict("drop")
Verdict.ALLOW = Verdict("allow")


def _code(code):
    if type(code) is not int or not 0 <= code <= 0xFFFF:
        raise ValueError(f"weir: a code is 0-65535, not {code!r}")
    return code


def log(level, msg):
    """Write a line to the gateway log (prefixed there with the route).
    Natively (tests) the line goes to stderr."""
    if _log_sink is not None:
        _log_sink(level, str(msg))
    else:
        import sys
        print(f"[{level}] {msg}", file=sys.stderr)


@dataclass
class Accept:
    """Accept an upgrade with a first connection state and/or a subprotocol
    (one the client offered)."""

    state: Any = None
    protocol: Optional[str] = None


def _query_param(query, name):
    if not query:
        return None
    for pair in query.split("&"):
        key, eq, value = pair.partition("=")
        if key == name:
            return value if eq else ""
    return None


class Request:
    """The HTTP request asking to open a WebSocket on this route."""

    __slots__ = ("path", "query", "headers", "remote_addr", "params")

    def __init__(self, path, query="", headers=(), remote_addr="127.0.0.1:40000", params=()):
        self.path = path
        """Request path, e.g. `/chat/lobby` (not percent-decoded)."""
        self.query = query
        """Query string without `?`, "" when there is none."""
        self.headers = list(headers)
        """Headers in arrival order, (name, value), names lower-case."""
        self.remote_addr = remote_addr
        """The peer's `ip:port`."""
        self.params = list(params)
        """The route's path parameters, (name, value), in the route's order."""

    def header(self, name):
        """The first header `name` (case-insensitive), or None."""
        name = name.lower()
        return next((v for n, v in self.headers if n == name), None)

    def param(self, name):
        """The route parameter `name`, not percent-decoded, or None."""
        return next((v for n, v in self.params if n == name), None)

    def query_param(self, name):
        """The first query parameter `name`, raw; "" for one without `=`."""
        return _query_param(self.query, name)

    def protocols(self):
        """The subprotocols the client offered, in its order of preference."""
        return [p.strip() for n, v in self.headers if n == "sec-websocket-protocol"
                for p in v.split(",") if p.strip()]


class Conn:
    """One connection as a hook sees it: its id, request target and route
    parameters, its state, and everything a handler can do to it. One object
    per connection for its whole life in an instance."""

    __slots__ = ("id", "target", "params", "state", "_saved", "_w", "_failed", "_rt", "_io",
                 "_closed")
    is_route = False

    def __init__(self, conn_id, info, runtime):
        self.id = conn_id
        """Unique within the gateway process, never 0."""
        self.target = info.target
        """The request target it was opened with: `path` or `path?query`."""
        self.params = info.params
        """The route parameters, (name, value), in the route's order."""
        self.state = None
        """The connection's state: any JSON value, saved when it changes."""
        self._saved = ""
        # The instance's answer writer, one attribute away: send and
        # send_text write into it directly (a Python call less per message).
        self._w = runtime.writer
        self._failed = False
        self._rt = runtime
        # Tags of this connection's pending requests and timers (None: none yet).
        self._io = None
        self._closed = False
        if info.attachment:
            import json
            try:
                text = info.attachment.decode("utf-8")
                self.state = json.loads(text)
                self._saved = json.dumps(self.state, separators=(",", ":"))
            except ValueError as e:
                log(WARN, f"connection state does not decode ({e}); starting from None")
                self._saved = "\0"

    def param(self, name):
        """The route parameter `name` (`/chat/{room}` opened as
        `/chat/lobby`: "lobby"), or None."""
        for n, v in self.params:
            if n == name:
                return v
        return None

    @property
    def path(self):
        """The request path, without the query."""
        return self.target.partition("?")[0]

    def query_param(self, name):
        """The query parameter `name` of the target, raw, or None."""
        return _query_param(self.target.partition("?")[2], name)

    @property
    def ctx(self):
        """The batch's answer, to address other connections by id
        (`conn.ctx.send_text(other_id, "hi")`)."""
        return self._w

    def send(self, msg):
        """Send `msg` to this connection: a str as text, bytes as binary."""
        w = self._w
        data = w.data
        offset = len(data)
        if isinstance(msg, str):
            data += msg.encode("utf-8")
            kind = 0  # abi.SEND_TEXT
        else:
            data += msg
            kind = 1  # abi.SEND_BINARY
        w.commands += _pack_command(self.id, kind, 0, 0, 0, 0, offset, len(data) - offset)

    def send_text(self, text):
        """Send a text message."""
        w = self._w
        data = w.data
        offset = len(data)
        data += text.encode("utf-8")
        w.commands += _pack_command(self.id, 0, 0, 0, 0, 0, offset, len(data) - offset)

    def send_binary(self, data):
        """Send a binary message."""
        self._w.send_binary(self.id, data)

    def close(self, code=1000, reason=""):
        """Close with `code` (1000-4999) and a short reason; on_close follows."""
        self._w.close(self.id, code, reason)

    def subscribe(self, topic):
        """Subscribe to `topic` (topics belong to the route)."""
        self._w.subscribe(self.id, topic)

    def unsubscribe(self, topic):
        """Unsubscribe from `topic`."""
        self._w.unsubscribe(self.id, topic)

    def publish(self, topic, msg):
        """Deliver `msg` to every *other* subscriber of `topic`, on every worker."""
        self._w.publish(topic, msg, self.id)

    def broadcast(self, topic, msg):
        """Deliver `msg` to every subscriber of `topic`, this connection included."""
        self._w.publish(topic, msg, None)

    def fetch(self, url, method="GET", headers=None, body=None, *, json=None):
        """`weir_guest.fetch` for this connection (what fetch does inside its
        hooks): its answer is dropped if the connection closes first."""
        rt = self._rt
        saved = rt.ctx
        rt.ctx = self
        try:
            return _io.fetch(url, method, headers, body, json=json)
        finally:
            rt.ctx = saved

    def set_timer(self, delay, callback=None):
        """A timer of this connection, due in `delay` seconds:
        `callback(conn, tag)` runs then (it may be `async def`), or, without
        one (or in an instance that replaced this one), the handler's
        `on_timer(conn, tag)`. Ends with the connection. Returns its tag."""
        _io._active("set_timer")
        return self._rt.timer(self, delay, callback, None)

    def cancel_timer(self, tag):
        """Cancel this connection's timer `tag`."""
        _io.cancel_timer(tag)

    def history(self, channel, limit=0, newest=False):
        """Read up to `limit` (0: the position alone; the gateway caps it)
        publications of real-time channel `channel`, oldest first or, with
        `newest`, newest first (a `realtime = true` route): a Future of a
        History (`position.offset`, `position.epoch`, `publications`), or
        failing with ReadError. For this connection (it ends with it)."""
        _io._live("conn.history")
        return self._rt.read(self, True, channel, limit, newest)

    def presence(self, channel):
        """Read `channel`'s presence: a Future of a list of Member (`client`,
        `user`, `info`), or failing with ReadError."""
        _io._live("conn.presence")
        return self._rt.read(self, False, channel, 0, False)

    def forward(self, direction, msg):
        """Pass a message of the filter's own through this proxied
        connection, `direction` TO_UPSTREAM or TO_CLIENT (a proxy route's
        filter; any other route ignores it)."""
        try:
            d = abi.DIRECTIONS.index(direction)
        except ValueError:
            raise ValueError(f"weir: a direction is {TO_UPSTREAM!r} or {TO_CLIENT!r}, "
                             f"not {direction!r}") from None
        self._w.forward(self.id, d, msg)


class Handler:
    """Base class of a handler: every hook but on_message has a default."""

    def on_upgrade(self, req):
        """Accept every upgrade."""
        return None

    def on_open(self, conn):
        """Nothing to do on open."""

    def on_message(self, conn, msg):
        raise NotImplementedError("a weir handler needs on_message(conn, msg)")

    def on_close(self, conn, code, reason):
        """Nothing to do on close."""

    def on_timer(self, conn, tag):
        """A timer without a callback came due (`conn` is `route` for a
        route's): nothing to do by default."""

    def on_kv_error(self, route, key, reason):
        """A key-value write was refused and not applied: logged by default."""
        log(WARN, f"kv write of {bytes(key)!r} refused: {reason}")

    def on_proxy_message(self, conn, direction, msg):
        """A proxy route's filter: pass every message on unchanged by default."""
        return None

    # A real-time namespace's or Pusher app's guest: Rust's defaults.

    def on_subscribe(self, req):
        """A namespace's client subscribes: allowed by default."""
        return None

    def on_client_publish(self, req):
        """A namespace's client publishes: published as it is by default."""
        return None

    def on_pusher_connect(self, req):
        """A Pusher app's connection opens: allowed by default."""
        return None

    def on_pusher_subscribe(self, req):
        """A Pusher app's client subscribes: weir's own checks decide by default."""
        return None

    def on_pusher_client_event(self, req):
        """A Pusher app's client event: passed as it is by default."""
        return None

    def check_state(self, state):
        """A deploy asks whether this version can work with a live
        connection's saved state: any JSON state is accepted by default."""
        return None
