"""Test a Python handler natively, under unittest (or pytest): no gateway,
no wasm. Not part of a component (build.py leaves nothing out, but nothing
in a handler imports it).

`TestRoute` stands in for one gateway route serving a handler module, as
the Rust SDK's `weir_guest::testing::TestRoute` and the JavaScript SDK's
src/testing.mjs do. It loads the module (a fresh copy per instance), turns
what clients do (upgrade, send, close) into the event batches the gateway
sends, one event each, runs them through the SDK's runtime (the code the
component runs), reads the answer with the ABI's validating reader and
applies it as the gateway would: messages land in each client's inbox,
publishes reach the route's subscribers, closes are recorded (and, as a
client answers a close, followed by the connection's on_close), state is
saved under `attachment_max`.

    import unittest
    from weir_guest.testing import TestRoute

    class EchoTest(unittest.TestCase):
        def test_echo(self):
            route = TestRoute.load("echo.py", "/echo")
            c = route.connect("/echo")
            route.send_text(c, "hi")
            self.assertEqual(route.texts(c), ["hi"])

I/O is played by the test: requests wait in `requests()` until the test
answers them (`respond`, `fail`); timers wait in `timers()` until the test
fires them (`fire`, or `advance(seconds)` on the route's clock); the
key-value store is a dict the handler reads with kv.get and writes after
each batch (`kv`, `kv_get`, `kv_set`, `kv_error`, `kv_max_keys`). A
deferred upgrade is answered by `upgrade_answering`. History and presence
reads wait in `reads()` until the test answers them (`answer_history`,
`answer_presence`, `fail_read`). A proxy route's filter is driven with
`proxy_message(conn, direction, msg)`; what it passed on is in
`forwarded(conn)`. A real-time namespace's guest is asked with
`subscribe(channel, ...)` and `client_publish(channel, data, ...)`, a Pusher
app's guest with `pusher_connect(target, ...)`, `pusher_subscribe(channel,
...)` and `pusher_client_event(channel, event, data, ...)`: each returns the
verdict as the gateway reads it from the answer, a dict with `verdict`
("allow", "refuse", "authorise", "pass", "replace", "drop", or "failed"
when the handler answered nothing). `check_state(states)` runs the
`check-state` export over saved conn.state values. `replace_instance()`
starts a fresh instance (module state reset, connections and their saved
state kept), as the gateway does after a fault, a recycle or a deploy.

Scope: one route, one instance, batches of one event; topics are the
route's own. Times are seconds on the route's clock (the gateway counts
milliseconds: a timer's `delay_ms`, `due_ms`).
"""

import importlib.util
import itertools
import json
import os
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import weir_guest

from . import abi
from .runtime import Runtime, check_handler_class

DEFAULT_ATTACHMENT_MAX = 64 * 1024
"""The gateway's default `attachment_max` (64 KiB)."""

_RT_CONN = (1 << 64) - 1
"""The connection id the harness's real-time questions carry (the guest echoes it)."""
_RT_CALL = 0x5EED


def _json_text(v):
    """A str as JSON text already; any other value as its JSON; None as none."""
    if v is None:
        return b""
    return v.encode("utf-8") if isinstance(v, str) else json.dumps(v).encode("utf-8")


def _data_bytes(v):
    """Bytes as they are (raw JSON text); any other value as its JSON (a str
    too, as a client sends one)."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    return json.dumps(v, separators=(",", ":")).encode("utf-8")

HTTP_ERROR_CODES = {v: k for k, v in abi.HTTP_ERROR_REASONS.items()}
KV_ERROR_CODES = {v: k for k, v in abi.KV_ERROR_REASONS.items()}
READ_ERROR_CODES = {v: k for k, v in abi.READ_ERROR_REASONS.items()}

_instances = itertools.count(1)


def match_route(pattern, path):
    """(name, value) pairs of `path` matched against `pattern`
    (`/chat/{room}`, `/files/{*rest}`), or None."""
    params = []
    want = pattern.split("/")
    got = path.split("/")
    for i, w in enumerate(want):
        if w.startswith("{*") and w.endswith("}"):
            params.append((w[2:-1], "/".join(got[i:])))
            return params
        if i >= len(got):
            return None
        g = got[i]
        if w.startswith("{") and w.endswith("}"):
            if not g:
                return None
            params.append((w[1:-1], g))
        elif w != g:
            return None
    return params if len(got) == len(want) else None


@dataclass
class Upgraded:
    """What an upgrade came to: `status` 101 and the connection's `id` (and
    the subprotocol picked), or the HTTP status the gateway answered."""

    status: int
    id: Optional[int] = None
    protocol: Optional[str] = None


@dataclass
class SentRequest:
    """An HTTP request the handler sent (or deferred an upgrade on)."""

    conn: int
    tag: int
    method: str
    url: str
    headers: List[Tuple[str, str]]
    body: bytes

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def header(self, name):
        name = name.lower()
        return next((v for n, v in self.headers if n == name), None)


@dataclass
class SentRead:
    """A history or presence read the handler sent, waiting for the test's
    answer: `kind` "history" or "presence", `conn` 0 for the route's."""

    conn: int
    tag: int
    kind: str
    channel: str
    limit: Optional[int] = None
    newest: bool = False


@dataclass
class PendingTimer:
    """A timer the gateway holds: `conn` 0 for the route's."""

    conn: int
    tag: int
    delay_ms: int
    due_ms: int

    @property
    def delay(self):
        return self.delay_ms / 1000


@dataclass
class _Client:
    info: bytes
    attachment: bytes
    protocol: Optional[str]
    topics: set = field(default_factory=set)
    inbox: list = field(default_factory=list)
    forwarded: list = field(default_factory=list)
    closed_by_handler: Optional[Tuple[int, str]] = None
    gone: bool = False


@dataclass
class _Entry:
    value: bytes
    expires_ms: int


def _bytes(x):
    return x.encode("utf-8") if isinstance(x, str) else bytes(x)


class TestRoute:
    """A route serving one handler module, driven by the test."""

    __test__ = False  # not a test class, whatever a runner guesses from its name

    @classmethod
    def load(cls, path, pattern, attachment_max=DEFAULT_ATTACHMENT_MAX, kv_max_keys=None):
        """The handler module at `path` (a .py file defining class Handler)
        served at `pattern` (`/chat/{room}`)."""
        return cls(path, pattern, attachment_max, kv_max_keys)

    def __init__(self, path, pattern, attachment_max=DEFAULT_ATTACHMENT_MAX, kv_max_keys=None):
        self.path = os.fspath(path)
        self.pattern = pattern
        self.attachment_max = attachment_max
        self.kv_max_keys = kv_max_keys
        self.logs = []
        """What the handler logged: (level, message)."""
        self._next_id = 1
        self._clients = {}
        self._closing = []
        self._requests = []
        self._reads = []
        self._timers = {}
        self._now_ms = 0
        self._store = {}
        self._kv_refused = []
        self._verdicts = []
        self.runtime = None
        self.replace_instance()

    def replace_instance(self):
        """Drop the instance and start a fresh one from the module (its
        top-level state starts over), as the gateway does after a fault or
        every `recycle_after` batches: connections stay open; the new
        instance knows them only by what the gateway holds (target,
        parameters, saved state)."""
        name = f"weir_test_app_{next(_instances)}"
        spec = importlib.util.spec_from_file_location(name, self.path)
        if spec is None:
            raise FileNotFoundError(f"{self.path} is not a Python module")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        handler_class = getattr(module, "Handler", None)
        check_handler_class(handler_class)
        self.runtime = Runtime(handler_class(), self._connection, self._kv_read)

    # ------------------------------------------------------------ clients

    def connect(self, target, headers=()):
        """Upgrade `target` (path and query) and open it; its id. Raises if
        the handler refuses (or defers: use upgrade_answering)."""
        r = self.upgrade(target, headers)
        if r.id is None:
            raise AssertionError(f"upgrade of {target} refused with {r.status}")
        return r.id

    def upgrade(self, target, headers=(), remote_addr="127.0.0.1:50000"):
        """Ask the handler to upgrade `target`: Upgraded(101, id) if it
        accepts (the connection is open), Upgraded(status) if not."""
        return self.upgrade_answering(target, None, headers, remote_addr)

    def upgrade_answering(self, target, answer, headers=(), remote_addr="127.0.0.1:50000"):
        """As upgrade; if the handler defers the upgrade on a request,
        `answer(sent)` plays the remote service: given the SentRequest, it
        returns {"status", "headers", "body"} or {"error": reason}
        (`refused`, `timeout`, `connect`, `too-large`, `busy`, `invalid`)."""
        path, _, query = target.partition("?")
        params = match_route(self.pattern, path)
        if params is None:
            raise ValueError(f"{path} does not match route {self.pattern}")
        headers = [(n.lower(), v) for n, v in headers]
        req = weir_guest.Request(path, query, headers, remote_addr, params)
        decision = self._call(lambda rt: rt.upgrade(req))
        if decision[0] == "defer":
            if answer is None:
                raise AssertionError("the handler deferred the upgrade on a request; "
                                     "use upgrade_answering")
            _, tag, (method, url, req_headers, body) = decision
            a = answer(SentRequest(0, tag, method, url, list(req_headers), bytes(body)))
            if "error" in a:
                code = HTTP_ERROR_CODES.get(a["error"])
                if code is None:
                    raise ValueError(f"no http-error reason {a['error']}")
                outcome = ("error", code, a.get("message", a["error"]))
            else:
                outcome = ("response", a.get("status", 200),
                           [(n.lower(), v) for n, v in a.get("headers", ())],
                           _bytes(a.get("body", b"")))
            decision = self._call(lambda rt: rt.resume_upgrade(tag, outcome))
            if decision[0] == "defer":
                return Upgraded(500)
        if decision[0] == "reject":
            s = decision[1]
            return Upgraded(s if 400 <= s <= 599 else 403)
        _, protocol, attachment = decision
        if protocol is not None and protocol not in req.protocols():
            return Upgraded(500)
        if len(attachment) > self.attachment_max:
            return Upgraded(500)
        conn = self._next_id
        self._next_id += 1
        info = abi.encode_conn_info(target, params)
        self._clients[conn] = _Client(info, bytes(attachment), protocol)
        self._run(conn, abi.OPEN, 0, info + bytes(attachment))
        return Upgraded(101, conn, protocol)

    def send(self, conn, msg):
        """The client sends `msg`: a str as text, bytes as binary."""
        if isinstance(msg, str):
            self.send_text(conn, msg)
        else:
            self.send_binary(conn, msg)

    def send_text(self, conn, text):
        """The client sends a text message."""
        self._live(conn)
        self._run(conn, abi.TEXT, 0, text.encode("utf-8"))

    def send_binary(self, conn, data):
        """The client sends a binary message."""
        self._live(conn)
        self._run(conn, abi.BINARY, 0, bytes(data))

    def close(self, conn, code=1000, reason=""):
        """The client closes (1005: no code, 1006: dropped); on_close runs."""
        self._live(conn)
        self._gone(conn)
        self._run(conn, abi.CLOSE, code, reason.encode("utf-8"))

    def proxy_message(self, conn, direction, msg):
        """A message on its way through proxied connection `conn`,
        `direction` "to-upstream" (the client sent it) or "to-client" (the
        upstream did): the handler is a proxy route's filter
        (on_proxy_message); what it passed on is in forwarded(conn)."""
        self._live(conn)
        if direction not in abi.DIRECTIONS:
            raise ValueError(f"no direction {direction!r}: 'to-upstream' or 'to-client'")
        text = isinstance(msg, str)
        self._run(conn, abi.PROXY_TEXT if text else abi.PROXY_BINARY, 0,
                  msg.encode("utf-8") if text else bytes(msg), abi.DIRECTIONS.index(direction))

    # ------------------------------------------------------------ real-time guests

    def subscribe(self, channel, client="client-1", user="", info=None):
        """Ask the handler, as a real-time namespace's guest, whether a
        client may subscribe (on_subscribe); `info` is the token's info
        claim (JSON text, or a value). {"verdict": "allow"}, {"verdict":
        "refuse", "code": n} or {"verdict": "failed"}."""
        v = self._ask(abi.RT_SUBSCRIBE, channel, client, user, _json_text(info))
        if v is None:
            return {"verdict": "failed"}
        return {"verdict": "allow"} if v["code"] == 0 else {"verdict": "refuse", "code": v["code"]}

    def client_publish(self, channel, data, client="client-1", user="", info=None):
        """Give the handler, as a real-time namespace's guest, a client's
        publication (on_client_publish): `data` a value (sent as its JSON)
        or raw bytes. {"verdict": "pass"}, {"verdict": "replace", "text":
        ...}, {"verdict": "drop", "code": n} or {"verdict": "failed"}."""
        return self._publish_answer(self._ask(abi.RT_PUBLISH, channel, client, user,
                                              _json_text(info), _data_bytes(data)))

    def pusher_connect(self, target, socket_id="1.1", headers=()):
        """Ask the handler, as a Pusher app's guest, about a connection
        (on_pusher_connect); `headers` (name, value) pairs or `name: value`
        lines. {"verdict": "allow"}, {"verdict": "refuse", "code": n,
        "message": ...} or {"verdict": "failed"}."""
        lines = headers if isinstance(headers, str) else "\n".join(f"{n}: {v}" for n, v in headers)
        v = self._ask(abi.PUSHER_CONNECT, target, socket_id, "", lines.encode("utf-8"))
        if v is None:
            return {"verdict": "failed"}
        if v["code"] == 0:
            return {"verdict": "allow"}
        return {"verdict": "refuse", "code": v["code"], "message": v.get("payload", "")}

    def pusher_subscribe(self, channel, socket_id="1.1", user="", channel_data="", auth="",
                         signature="none"):
        """Ask the handler, as a Pusher app's guest, about a subscribe
        (on_pusher_subscribe); `signature` what weir's HMAC check made of
        `auth` ("none", "passed", "failed"). {"verdict": "allow"},
        {"verdict": "authorise", "channel_data": str or None (the client's
        own)}, {"verdict": "refuse", "code": n, "message": ...} or
        {"verdict": "failed"}."""
        rest = abi.encode_subscribe_rest(signature, auth)
        v = self._ask(abi.PUSHER_SUBSCRIBE, channel, socket_id, user, _json_text(channel_data),
                      rest)
        if v is None:
            return {"verdict": "failed"}
        if v["code"] != 0:
            return {"verdict": "refuse", "code": v["code"], "message": v.get("payload", "")}
        if v.get("authorise"):
            return {"verdict": "authorise", "channel_data": v["payload"] or None}
        return {"verdict": "allow"}

    def pusher_client_event(self, channel, event, data, socket_id="1.1", user=""):
        """Give the handler, as a Pusher app's guest, a client event
        (on_pusher_client_event); the verdict as client_publish's (a drop
        with code 0 is silent)."""
        return self._publish_answer(self._ask(abi.PUSHER_CLIENT_EVENT, channel, socket_id, user,
                                              event.encode("utf-8"), _data_bytes(data)))

    def check_state(self, states):
        """The `check-state` export over `states` (conn.state values as a
        live connection would have saved them; bytes go as raw attachment
        bytes): for each, None when this version accepts it, else why not."""
        from .questions import check_states
        attachments = [s if isinstance(s, bytes) else json.dumps(s, separators=(",", ":")).encode()
                       for s in states]
        return self._call(lambda rt: check_states(rt.handler, attachments))

    @staticmethod
    def _publish_answer(v):
        if v is None:
            return {"verdict": "failed"}
        if v["verdict"] == "replace":
            return {"verdict": "replace", "text": v["data"].decode("utf-8")}
        if v["verdict"] == "drop":
            return {"verdict": "drop", "code": v["code"]}
        return {"verdict": "pass"}

    def _ask(self, kind, channel, client, user, info, rest=b""):
        """One real-time question in a batch of its own; its one verdict, or
        None when the handler answered nothing."""
        self._verdicts = []
        self._run(_RT_CONN, kind, 0, abi.encode_rt_request(_RT_CALL, channel, client, user, info,
                                                           rest))
        got, self._verdicts = self._verdicts, []
        if not got:
            return None
        if len(got) != 1:
            raise AssertionError(f"one verdict per question, got {got!r}")
        v = got[0]
        if v["call"] != _RT_CALL or v["conn"] != _RT_CONN:
            raise AssertionError(f"the verdict names call {v['call']} of {v['conn']}, not the "
                                 "question's")
        want = ("rt-publish-verdict" if kind in (abi.RT_PUBLISH, abi.PUSHER_CLIENT_EVENT)
                else "rt-subscribe-verdict")
        if v["kind"] != want:
            raise AssertionError(f"a {want} was due, got {v['kind']}")
        return v

    # ------------------------------------------------------------ what clients saw

    def forwarded(self, conn):
        """What the filter passed on through `conn` since the last call, in
        order: (direction, message), a str for text, bytes for binary."""
        c = self._client(conn)
        out, c.forwarded = c.forwarded, []
        return out

    def received(self, conn):
        """Everything `conn` received since the last call, oldest first:
        str (text) and bytes (binary)."""
        c = self._client(conn)
        out, c.inbox = c.inbox, []
        return out

    def texts(self, conn):
        """What `conn` received since the last call, all text (raises on a
        binary one)."""
        out = self.received(conn)
        for m in out:
            if not isinstance(m, str):
                raise AssertionError(f"connection {conn} received a binary message {m!r}")
        return out

    def json(self, conn):
        """What `conn` received since the last call, each text parsed as JSON."""
        return [json.loads(t) for t in self.texts(conn)]

    def closed_with(self, conn):
        """(code, reason) the handler closed `conn` with, or None."""
        return self._client(conn).closed_by_handler

    def is_open(self, conn):
        """Whether `conn` is open (neither side closed it)."""
        c = self._clients.get(conn)
        return c is not None and not c.gone and c.closed_by_handler is None

    def topics(self, conn):
        """The topics `conn` is subscribed to, sorted."""
        return sorted(self._client(conn).topics)

    def attachment(self, conn):
        """The attachment the gateway holds for `conn` (its saved state), as bytes."""
        return self._client(conn).attachment

    def state(self, conn):
        """`conn.state` as the gateway holds it (None when none was saved)."""
        a = self.attachment(conn)
        return json.loads(a) if a else None

    # ------------------------------------------------------------ HTTP

    def requests(self):
        """The requests the handler sent that are not answered yet
        (SentRequest), oldest first."""
        return list(self._requests)

    def respond(self, tag, status=200, headers=(), body=b""):
        """Answer pending request `tag` with `status`, (name, value)
        `headers` and `body` (str or bytes)."""
        r = self._take_request(tag)
        headers = [(n.lower(), v) for n, v in headers]
        self._run(r.conn, abi.HTTP_RESPONSE, status,
                  abi.encode_http_response(tag, headers, _bytes(body)))

    def fail(self, tag, reason="timeout", message=""):
        """Fail pending request `tag` with `reason` (refused, timeout,
        connect, too-large, busy, invalid)."""
        code = HTTP_ERROR_CODES.get(reason)
        if code is None:
            raise ValueError(f"no http-error reason {reason}")
        r = self._take_request(tag)
        self._run(r.conn, abi.HTTP_ERROR, code, abi.encode_http_error(tag, message or reason))

    def _take_request(self, tag):
        for i, r in enumerate(self._requests):
            if r.tag == tag:
                return self._requests.pop(i)
        raise AssertionError(f"no request with tag {tag} is pending")

    # ------------------------------------------------------------ realtime reads

    def reads(self):
        """The history and presence reads the handler sent that are not
        answered yet (SentRead), oldest first."""
        return list(self._reads)

    def answer_history(self, tag, offset=0, epoch="", publications=()):
        """Answer pending history read `tag`: the channel is at `offset` in
        `epoch` and holds `publications`, (offset, data) pairs (data: JSON
        text, or a value made JSON here)."""
        r = self._take_read(tag, "history")
        pubs = [(o, d if isinstance(d, str) else json.dumps(d)) for o, d in publications]
        self._run(r.conn, abi.HISTORY, 0, abi.encode_history(tag, offset, epoch, pubs))

    def answer_presence(self, tag, members=()):
        """Answer pending presence read `tag` with `members`: (client,
        user, info) tuples (info: JSON text, a value made JSON here, or
        None for none)."""
        r = self._take_read(tag, "presence")
        ms = [(c, u, "" if i is None else i if isinstance(i, str) else json.dumps(i))
              for c, u, i in members]
        self._run(r.conn, abi.PRESENCE, 0, abi.encode_presence(tag, ms))

    def fail_read(self, tag, reason):
        """Fail pending read `tag` with `reason` (bad-channel, history-off,
        presence-off, unavailable, busy, not-realtime)."""
        code = READ_ERROR_CODES.get(reason)
        if code is None:
            raise ValueError(f"no read-error reason {reason}")
        r = self._take_read(tag, None)
        kind = abi.HISTORY if r.kind == "history" else abi.PRESENCE
        self._run(r.conn, kind, code, abi.encode_tag(tag))

    def _take_read(self, tag, kind):
        for i, r in enumerate(self._reads):
            if r.tag == tag and kind in (None, r.kind):
                return self._reads.pop(i)
        raise AssertionError(f"no {kind or ''} read with tag {tag} is pending")

    # ------------------------------------------------------------ timers

    @property
    def now(self):
        """The route's clock, in seconds (moved by advance and fire)."""
        return self._now_ms / 1000

    def timers(self):
        """Pending timers (PendingTimer), soonest first."""
        return sorted(self._timers.values(), key=lambda t: (t.due_ms, t.tag))

    def fire(self, tag):
        """Fire pending timer `tag` now (its callback or on_timer runs)."""
        t = self._timers.pop(tag, None)
        if t is None:
            raise AssertionError(f"no timer with tag {tag} is pending")
        self._now_ms = max(self._now_ms, t.due_ms)
        self._run(t.conn, abi.TIMER, 0, abi.encode_tag(tag))

    def advance(self, seconds):
        """Move the route's clock on by `seconds`, firing every timer that
        comes due, in order (timers they set included)."""
        until = self._now_ms + round(seconds * 1000)
        while True:
            due = self.timers()
            if not due or due[0].due_ms > until:
                break
            self.fire(due[0].tag)
        self._now_ms = until

    # ------------------------------------------------------------ kv

    def _kv_read(self, key):
        e = self._store.get(bytes(key))
        if e is None or (e.expires_ms and e.expires_ms <= self._now_ms):
            return None
        return e.value

    def kv_get(self, key):
        """The value under `key` as text (None when absent or expired)."""
        v = self._kv_read(_bytes(key))
        return None if v is None else v.decode("utf-8", "replace")

    def kv_set(self, key, value, ttl=None):
        """Put `value` under `key` directly (as if an earlier version wrote
        it), for `ttl` seconds if given."""
        self._store[_bytes(key)] = _Entry(
            _bytes(value), self._now_ms + round(ttl * 1000) if ttl else 0)

    def kv(self):
        """The live store as {key: value}, text where it is UTF-8."""
        out = {}
        for k, e in self._store.items():
            if e.expires_ms and e.expires_ms <= self._now_ms:
                continue
            try:
                out[k.decode("utf-8")] = e.value.decode("utf-8")
            except UnicodeDecodeError:
                out[k] = e.value
        return out

    def kv_expires(self, key):
        """When `key` expires on the route's clock (seconds), 0 for never,
        None when absent."""
        e = self._store.get(_bytes(key))
        return None if e is None else e.expires_ms / 1000

    def kv_error(self, key, reason="max-bytes"):
        """Tell the handler that a write of `key` was refused for `reason`
        (max-bytes, max-keys, queue-full, too-large, no-store): its
        on_kv_error runs."""
        code = KV_ERROR_CODES.get(reason)
        if code is None:
            raise ValueError(f"no kv-error reason {reason}")
        self._run(0, abi.KV_ERROR, code, _bytes(key))

    # ------------------------------------------------------------ the gateway's side

    def _client(self, conn):
        c = self._clients.get(conn)
        if c is None:
            raise KeyError(f"no connection {conn}")
        return c

    def _live(self, conn):
        if not self.is_open(conn):
            raise AssertionError(f"connection {conn} is not open")

    def _open(self, conn):
        c = self._clients.get(conn)
        return c if c is not None and not c.gone and c.closed_by_handler is None else None

    def _gone(self, conn):
        """`conn` is gone: its timers and requests end with it (the gateway
        drops them)."""
        self._client(conn).gone = True
        for tag in [t for t, v in self._timers.items() if v.conn == conn]:
            del self._timers[tag]
        self._requests = [r for r in self._requests if r.conn != conn]
        self._reads = [r for r in self._reads if r.conn != conn]

    def _connection(self, conn):
        c = self._clients.get(conn)
        if c is None or c.gone:
            return None
        return c.info + c.attachment

    def _log(self, level, msg):
        self.logs.append((level, msg))

    def _call(self, fn):
        saved = weir_guest._log_sink
        weir_guest._log_sink = self._log
        try:
            return fn(self.runtime)
        finally:
            weir_guest._log_sink = saved

    def _run(self, conn, kind, code, data, reserved=0):
        """One batch of one event, its answer applied; closes the handler
        sent are then answered."""
        headers = abi.pack_event_header({"conn": conn, "kind": kind, "reserved": reserved,
                                         "code": code, "offset": 0, "len": len(data)})
        commands, out = self._call(lambda rt: rt.handle(headers, bytes(data)))
        for c in abi.decode_commands(commands, out):
            self._apply(conn, c)
        refused, self._kv_refused = self._kv_refused, []
        for key, reason in refused:
            self.kv_error(key, reason)
        while self._closing:
            cid, close_code, reason = self._closing.pop(0)
            c = self._clients.get(cid)
            if c is not None and not c.gone:
                self._gone(cid)
                self._run(cid, abi.CLOSE, close_code, reason.encode("utf-8"))

    def _apply(self, batch_conn, c):
        kind = c["kind"]
        if kind in ("send-text", "send-binary"):
            to = self._open(c["conn"])
            if to is not None:
                to.inbox.append(c["text"] if kind == "send-text" else c["payload"])
        elif kind == "close":
            to = self._open(c["conn"])
            if to is not None:
                to.closed_by_handler = (c["code"], c["reason"])
                self._closing.append((c["conn"], c["code"], c["reason"]))
        elif kind in ("publish-text", "publish-binary"):
            msg = c["text"] if kind == "publish-text" else c["payload"]
            for cid, to in self._clients.items():
                if (not to.gone and to.closed_by_handler is None and cid != c["exclude"]
                        and c["topic"] in to.topics):
                    to.inbox.append(msg)
        elif kind == "subscribe":
            to = self._open(c["conn"])
            if to is not None:
                to.topics.add(c["topic"])
        elif kind == "unsubscribe":
            to = self._open(c["conn"])
            if to is not None:
                to.topics.discard(c["topic"])
        elif kind == "set-attachment":
            if c["conn"] != batch_conn:
                # The gateway ignores (and logs) an attachment outside its batch.
                self.logs.append(("warn", f"attachment for {c['conn']} outside its batch "
                                  "ignored"))
                return
            to = self._clients.get(c["conn"])
            if to is None or to.gone:
                return
            if len(c["attachment"]) > self.attachment_max:
                if to.closed_by_handler is None:
                    to.closed_by_handler = (1011, "")
                    self._closing.append((c["conn"], 1011, ""))
                return
            to.attachment = c["attachment"]
        elif kind == "http-request":
            if c["conn"] != 0 and self._open(c["conn"]) is None:
                return
            head = abi.split_request_head(c["head"])
            if head is None:
                raise AssertionError(f"request head {c['head']!r} has no METHOD URL")
            method, url, headers = head
            self._requests.append(SentRequest(c["conn"], c["tag"], method, url, headers,
                                              c["body"]))
        elif kind == "set-timer":
            if c["conn"] == 0 or self._open(c["conn"]) is not None:
                self._timers[c["tag"]] = PendingTimer(c["conn"], c["tag"], c["delay_ms"],
                                                      self._now_ms + c["delay_ms"])
        elif kind == "cancel-timer":
            t = self._timers.get(c["tag"])
            if t is not None and t.conn == c["conn"]:
                del self._timers[c["tag"]]
        elif kind == "kv-set":
            key = c["key"]
            full = (self.kv_max_keys is not None and len(self._store) >= self.kv_max_keys
                    and key not in self._store)
            if full:
                self._kv_refused.append((key, "max-keys"))
            else:
                ttl = c["ttl_ms"]
                self._store[key] = _Entry(c["value"], self._now_ms + ttl if ttl else 0)
        elif kind == "kv-delete":
            self._store.pop(c["key"], None)
        elif kind in ("forward-text", "forward-binary"):
            to = self._open(c["conn"])
            if to is not None:
                to.forwarded.append((abi.DIRECTIONS[c["direction"]],
                                     c["text"] if kind == "forward-text" else c["payload"]))
        elif kind in ("history-read", "presence-read"):
            if c["conn"] == 0 or self._open(c["conn"]) is not None:
                if kind == "history-read":
                    self._reads.append(SentRead(c["conn"], c["tag"], "history", c["channel"],
                                                c["limit"], c["reverse"]))
                else:
                    self._reads.append(SentRead(c["conn"], c["tag"], "presence", c["channel"]))
        elif kind in ("rt-subscribe-verdict", "rt-publish-verdict"):
            self._verdicts.append(c)
        else:
            raise AssertionError(f"the harness does not play {kind}")


__all__ = ["TestRoute", "Upgraded", "SentRequest", "SentRead", "PendingTimer", "match_route",
           "DEFAULT_ATTACHMENT_MAX"]
