"""Outbound HTTP, timers and the key-value store for Python handlers
(weir:gateway 0.4.0), and the small awaitable machinery that lets `async
def` hooks run inside the gateway's synchronous calls.

Nothing here blocks. A request or a timer is a command in the batch's
answer, its outcome an event in a later batch; the Future waiting for it is
kept by the runtime under the command's tag and settled when the event
arrives, and the coroutines awaiting it resume then, inside that call
(weir_guest/runtime.py). Each request and timer belongs to the context that
made it: the connection whose hook (or whose awaiting continuation) called
fetch or set_timer, else the route. A connection's ones end with it (the
gateway drops their answers; here they are forgotten, so what awaited them
never resumes).

Not asyncio: a coroutine awaits this module's Futures only (fetch, sleep,
gather, another Task); `asyncio` is neither imported nor needed, which
keeps it out of every instance (see the README, "Why not asyncio").

Bounded: at most MAX_PENDING_REQUESTS requests and MAX_PENDING_TIMERS timers
wait per instance; past them fetch fails with reason "busy" and set_timer
raises, so no backlog grows without bound. The gateway bounds them again
per route (outbound_max_concurrent, its timer cap).

Delays and time-to-live are in seconds (floats), as in the rest of Python;
the gateway counts whole milliseconds (a positive delay rounds up to 1 ms).
"""

import json as _json
from collections import deque
from types import CoroutineType

from . import abi

MAX_PENDING_REQUESTS = 1024
"""Requests one instance may have waiting (the gateway's default
`outbound_max_concurrent` is 64 per route: past this many the instance has
lost track, and further ones fail at once with reason "busy")."""

MAX_PENDING_TIMERS = 100_000
"""Timers one instance may have waiting (the gateway's cap per route)."""

MAX_PENDING_READS = 256
"""History and presence reads one instance may have waiting: the gateway's
cap per route (past it the gateway answers "busy" itself); past it here a
read fails at once with reason "busy"."""

# The runtime answering the call in progress (set by runtime.py at each
# call; None outside one).
_rt = None

# Callbacks of settled futures, run after each event of a batch (and until
# none is left) by the runtime: (callback, future).
_ready = deque()


def _active(what):
    rt = _rt
    if rt is None or not rt.in_call:
        raise RuntimeError(f"weir: {what} is only possible while a hook runs "
                           "(not at module top level)")
    if rt.upgrading and what != "fetch":
        raise RuntimeError(f"weir: {what} is not possible in on_upgrade "
                           "(the connection does not exist yet)")
    return rt


# ------------------------------------------------------------------ futures

_PENDING, _DONE, _FAILED = 0, 1, 2


class Future:
    """The outcome of something that finishes in a later batch (a response,
    a timer): `await` it in an `async def` hook, or `add_done_callback`."""

    __slots__ = ("_state", "_value", "_callbacks", "_ctx", "_seen", "__weakref__")

    def __init__(self):
        self._state = _PENDING
        self._value = None
        self._callbacks = []
        rt = _rt
        self._ctx = rt.ctx if rt is not None else None
        # Someone awaited it or asked for its outcome: a failure is theirs.
        self._seen = False

    def __del__(self):
        # A failure nobody awaited (a fetch not awaited that failed) would
        # otherwise vanish: log it, as asyncio and the JS SDK do.
        if self._state == _FAILED and not self._seen:
            _unobserved(self._value)

    def done(self):
        """Whether it has a result or an exception."""
        return self._state != _PENDING

    def result(self):
        """The result; raises the exception if it failed (or RuntimeError if pending)."""
        self._seen = True
        if self._state == _DONE:
            return self._value
        if self._state == _FAILED:
            raise self._value
        raise RuntimeError("weir: the future is not done yet")

    def exception(self):
        """The exception it failed with, or None."""
        self._seen = True
        return self._value if self._state == _FAILED else None

    def add_done_callback(self, fn):
        """Call `fn(future)` once it is done (after the current event)."""
        self._seen = True
        if self._state != _PENDING:
            _ready.append((fn, self))
        else:
            self._callbacks.append(fn)

    def set_result(self, value):
        if self._state == _PENDING:
            self._state = _DONE
            self._value = value
            self._schedule()

    def set_exception(self, exc):
        if self._state == _PENDING:
            self._state = _FAILED
            self._value = exc
            self._schedule()

    def _schedule(self):
        callbacks = self._callbacks
        self._callbacks = []
        for fn in callbacks:
            _ready.append((fn, self))

    def __await__(self):
        if self._state == _PENDING:
            yield self
        return self.result()


def _unobserved(exc):
    try:
        from . import log, ERROR
        log(ERROR, f"a Future failed and nobody awaited it: {type(exc).__name__}: {exc}")
    except Exception:  # noqa: S110 - at interpreter exit, nothing to log to
        pass


class Task(Future):
    """A coroutine driven by the gateway's events: it runs at once up to its
    first `await` of a pending Future, then resumes in the call that
    settles it. Its own result or exception settles the Task."""

    __slots__ = ("_coro", "ctx")

    def __init__(self, coro, ctx):
        super().__init__()
        self._coro = coro
        self.ctx = ctx
        self._step(None, None)

    def _step(self, value, exc):
        rt = _rt
        saved = rt.ctx if rt is not None else None
        if rt is not None:
            rt.ctx = self.ctx
        try:
            if exc is None:
                waited = self._coro.send(value)
            else:
                waited = self._coro.throw(exc)
        except StopIteration as stop:
            self.set_result(stop.value)
        except MemoryError:
            raise
        except BaseException as e:  # noqa: B036 - a hook's raise fails its task
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            self.set_exception(e)
        else:
            if isinstance(waited, Future):
                waited.add_done_callback(self._wakeup)
            else:
                # An asyncio future or a bare `yield`: nothing would ever
                # resume it here.
                bad = Future()
                bad.set_exception(TypeError(
                    f"weir: a hook awaited {type(waited).__name__}; only weir_guest's "
                    "awaitables (fetch, sleep, gather, create_task) resume in the gateway"))
                bad.add_done_callback(self._wakeup)
        finally:
            if rt is not None:
                rt.ctx = saved

    def _wakeup(self, fut):
        if fut._state == _FAILED:
            self._step(None, fut._value)
        else:
            self._step(fut._value, None)


def create_task(coro):
    """Run coroutine `coro` as a Task of the current context (it starts at
    once, up to its first await)."""
    rt = _active("create_task")
    return Task(coro, rt.ctx)


def _as_future(aw):
    if isinstance(aw, Future):
        return aw
    if type(aw) is CoroutineType:
        return create_task(aw)
    raise TypeError(f"weir: cannot await {type(aw).__name__}")


def gather(*aws):
    """A Future of every awaitable's result, in order (coroutines run as
    Tasks); it fails with the first exception."""
    futures = [_as_future(a) for a in aws]
    out = Future()
    results = [None] * len(futures)
    left = [len(futures)]
    if not futures:
        out.set_result([])
        return out

    def one(i):
        def done(f):
            if out.done():
                return
            if f._state == _FAILED:
                out.set_exception(f._value)
                return
            results[i] = f._value
            left[0] -= 1
            if left[0] == 0:
                out.set_result(results)
        return done

    for i, f in enumerate(futures):
        f.add_done_callback(one(i))
    return out


# ------------------------------------------------------------------ tags

_counter = 0
_salt = -1

TAG_EPOCH_MS = 1767225600000
"""2026-01-01T00:00:00Z in Unix milliseconds: tags count from there."""


def salt_tags(conn_id):
    """Note the worker a connection id names (the gateway's ids are
    worker << 40 | sequence), so instances of one route on different
    workers issue different tags even in the same millisecond (every
    instance starts from the same build-time snapshot of the interpreter,
    its random generator included)."""
    global _salt
    if _salt < 0 and conn_id > 0:
        _salt = (conn_id >> 40) % 64


def new_tag():
    """A tag for a request or timer, unique in the route while the gateway
    runs: (counter x 64 + worker), the counter seeded from the clock at 64
    per millisecond since 2026, so a fresh instance starts past its
    predecessor's tags unless that one issued more than 64 a millisecond,
    and two workers' instances never meet (as the JavaScript SDK's)."""
    global _counter, _salt
    if _counter == 0:
        import time
        _counter = max(1, (int(time.time() * 1000) - TAG_EPOCH_MS) * 64)
        if _salt < 0:
            import random
            _salt = random.randrange(64)
    tag = _counter * 64 + _salt
    _counter += 1
    return tag


def ms_of(seconds):
    """A delay in seconds as the gateway's whole milliseconds (a positive
    delay is at least 1 ms)."""
    if seconds is None:
        return 0
    s = float(seconds)
    if not s > 0 or s == float("inf"):  # also NaN
        return 0
    import math
    return max(1, math.ceil(s * 1000))


# ------------------------------------------------------------------ HTTP

class Headers:
    """Response headers: (name, value) pairs, names lower-case, in order."""

    __slots__ = ("_list",)

    def __init__(self, pairs=()):
        self._list = [(n.lower(), v) for n, v in pairs]

    def get(self, name, default=None):
        """The values of `name` joined with ", ", or `default`."""
        n = name.lower()
        vs = [v for k, v in self._list if k == n]
        return ", ".join(vs) if vs else default

    def get_all(self, name):
        """Every value of `name`, in order."""
        n = name.lower()
        return [v for k, v in self._list if k == n]

    def items(self):
        return list(self._list)

    def __contains__(self, name):
        n = name.lower()
        return any(k == n for k, _ in self._list)

    def __getitem__(self, name):
        v = self.get(name)
        if v is None:
            raise KeyError(name)
        return v

    def __iter__(self):
        return iter(self._list)

    def __len__(self):
        return len(self._list)

    def __repr__(self):
        return f"Headers({self._list!r})"


class Response:
    """An HTTP response, its body whole (the gateway buffers it, up to the
    route's `outbound_max_response`)."""

    __slots__ = ("status", "headers", "body", "url")

    def __init__(self, status, headers=(), body=b"", url=""):
        self.status = status
        """The HTTP status."""
        self.headers = headers if isinstance(headers, Headers) else Headers(headers)
        """The headers: `headers.get(name)`."""
        self.body = bytes(body)
        """The body, bytes."""
        self.url = url

    @property
    def ok(self):
        """Whether the status is 2xx."""
        return 200 <= self.status <= 299

    @property
    def text(self):
        """The body as text (invalid UTF-8 becomes U+FFFD)."""
        return self.body.decode("utf-8", "replace")

    def json(self):
        """The body parsed as JSON."""
        return _json.loads(self.body)

    def __repr__(self):
        return f"<Response {self.status} {len(self.body)} bytes>"


class FetchError(Exception):
    """Why a fetch got no response. `reason` is the gateway's: `refused`
    (allow_outbound), `timeout`, `connect`, `too-large`, `busy`, `invalid`."""

    def __init__(self, reason, message=""):
        super().__init__(f"fetch failed: {reason}{': ' + message if message else ''}")
        self.reason = reason
        self.message = message


def _check_header(s, what):
    s = str(s)
    if "\r" in s or "\n" in s:
        raise ValueError(f"fetch: a header {what} cannot hold a line break")
    return s


def describe_request(url, method="GET", headers=None, body=None, json=None):
    """The request fetch(...) describes: (method, url, [(name, value)], body)."""
    method = str(method).upper()
    if not method.isalpha() or not method.isascii():
        raise ValueError(f"fetch: invalid method {method!r}")
    url = str(url)
    if not url or any(c.isspace() for c in url):
        raise ValueError("fetch: a URL cannot be empty or hold white space")
    if headers is None:
        pairs = []
    elif hasattr(headers, "items") and not isinstance(headers, Headers):
        pairs = list(headers.items())
    else:
        pairs = list(headers)
    pairs = [(_check_header(n, "name").lower(), _check_header(v, "value")) for n, v in pairs]
    names = {n for n, _ in pairs}
    if json is not None:
        if body is not None:
            raise ValueError("fetch: give body or json, not both")
        body = _json.dumps(json, separators=(",", ":"))
        if "content-type" not in names:
            pairs.append(("content-type", "application/json"))
    if body is not None:
        if method in ("GET", "HEAD"):
            raise ValueError(f"fetch: a {method} request cannot have a body")
        if isinstance(body, str):
            if "content-type" not in names and json is None:
                pairs.append(("content-type", "text/plain;charset=UTF-8"))
            body = body.encode("utf-8")
        else:
            body = bytes(body)
    else:
        body = b""
    return method, url, pairs, body


def _failed_future(exc):
    f = Future()
    f.set_exception(exc)
    return f


def fetch(url, method="GET", headers=None, body=None, *, json=None):
    """Send an HTTP request through the gateway (the route's
    `allow_outbound` must allow the URL): a Future of its Response, settled
    in a later batch, or failing with FetchError. `headers`: a dict or
    (name, value) pairs; `body`: str (UTF-8) or bytes; `json`: a value sent
    as JSON. For the connection whose work is running (its answer is
    dropped if it closes first), else the route."""
    try:
        req = describe_request(url, method, headers, body, json)
    except ValueError as e:
        return _failed_future(e)
    rt = _active("fetch")
    return rt.request(rt.ctx, req)


def response_of(status, head, body, url):
    """A Response for an http-response event."""
    return Response(status, abi.header_lines(head), body, url)


def fetch_error_of(code, message):
    """A FetchError for an http-error event."""
    return FetchError(abi.HTTP_ERROR_REASONS.get(code, "unknown"), message)


# ------------------------------------------------------------------ realtime reads

class ReadError(Exception):
    """Why a history or presence read has no answer. `reason` is the
    gateway's: `bad-channel`, `history-off`, `presence-off`, `unavailable`,
    `busy`, `not-realtime`."""

    def __init__(self, reason, message=""):
        super().__init__(f"read failed: {reason}{': ' + message if message else ''}")
        self.reason = reason


def _parsed(text):
    if not text:
        return None
    try:
        return _json.loads(text)
    except ValueError:
        return None


class Position:
    """Where a channel's stream is: the `offset` of its last publication and
    the stream's `epoch` (it changes when the history was lost)."""

    __slots__ = ("offset", "epoch")

    def __init__(self, offset, epoch):
        self.offset = offset
        self.epoch = epoch

    def __eq__(self, other):
        return isinstance(other, Position) and (self.offset, self.epoch) == (
            other.offset, other.epoch)

    def __repr__(self):
        return f"Position(offset={self.offset}, epoch={self.epoch!r})"


class Publication:
    """One publication of a history read: its `offset`, `data` (the JSON
    value) and `text` (its JSON text)."""

    __slots__ = ("offset", "data", "text")

    def __init__(self, offset, text):
        self.offset = offset
        self.text = text
        self.data = _parsed(text)

    def __repr__(self):
        return f"Publication(offset={self.offset}, text={self.text!r})"


class History:
    """What a history read resolves to: the channel's `position` and the
    `publications` read (a list of Publication, in the order asked for)."""

    __slots__ = ("position", "publications")

    def __init__(self, position, publications):
        self.position = position
        self.publications = publications

    def __repr__(self):
        return f"History({self.position!r}, {len(self.publications)} publications)"


class Member:
    """One member of a presence read: its connection's `client` id, its
    `user` ("" for anonymous), `info` (the connection's info as a JSON value,
    None when none) and `conn_info` (its JSON text, "" when none)."""

    __slots__ = ("client", "user", "info", "conn_info")

    def __init__(self, client, user, conn_info):
        self.client = client
        self.user = user
        self.conn_info = conn_info
        self.info = _parsed(conn_info)

    def __repr__(self):
        return f"Member(client={self.client!r}, user={self.user!r})"


def read_error_of(code):
    """A ReadError for a history or presence event's code."""
    return ReadError(abi.READ_ERROR_REASONS.get(code, "unknown"))


def history_of(r):
    """A History for a split history answer (tag, 0, offset, epoch, publications)."""
    return History(Position(r[2], r[3]), [Publication(o, t) for o, t in r[4]])


def members_of(r):
    """The Members of a split presence answer (tag, 0, members)."""
    return [Member(c, u, i) for c, u, i in r[2]]


# ------------------------------------------------------------------ timers

def sleep(delay, result=None):
    """A Future that is done after `delay` seconds (a timer the gateway
    holds), with `result`: `await weir_guest.sleep(0.5)`."""
    rt = _active("sleep")
    f = Future()
    rt.timer(rt.ctx, delay, f.set_result, (result,))
    return f


def set_timer(delay, callback=None):
    """A timer of the current context (the connection whose work runs, else
    the route), due in `delay` seconds; its tag. See Conn.set_timer."""
    rt = _active("set_timer")
    return rt.timer(rt.ctx, delay, callback, None)


def cancel_timer(tag):
    """Cancel timer `tag` (an unknown or fired one is ignored)."""
    rt = _rt
    if rt is not None and rt.in_call and not rt.upgrading:
        rt.cancel(tag)


# ------------------------------------------------------------------ kv

def _key(key):
    k = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    if not k:
        raise ValueError("kv: a key cannot be empty")
    return k


class KV:
    """The route's key-value store (`kv` in the routes file). Reads answer
    at once; writes are applied after the batch (not visible to a read in
    the same batch), and one the gateway refuses comes back to the
    handler's `on_kv_error(route, key, reason)`. Keys up to 1 KiB, values
    up to 1 MiB."""

    __slots__ = ()

    def get(self, key):
        """The value under `key` (str or bytes) as bytes, or None."""
        rt = _rt
        if rt is None:
            raise RuntimeError("weir: kv is only available while a hook runs")
        return rt.kv_get(_key(key))

    def get_text(self, key):
        """The value under `key` as text (UTF-8), or None."""
        v = self.get(key)
        return None if v is None else bytes(v).decode("utf-8", "replace")

    def get_json(self, key):
        """The value under `key` parsed as JSON, or None."""
        v = self.get(key)
        return None if v is None else _json.loads(v)

    def set(self, key, value, ttl=None):
        """Store `value` (str as UTF-8, or bytes) under `key`, for `ttl`
        seconds if given (else until deleted)."""
        k = _key(key)
        ms = 0 if ttl is None else max(1, ms_of(ttl))
        _active("kv.set").writer.kv_set(k, value, ms)

    def set_json(self, key, value, ttl=None):
        """Store `value` as JSON under `key`."""
        self.set(key, _json.dumps(value, separators=(",", ":")), ttl)

    def delete(self, key):
        """Remove `key`."""
        _active("kv.delete").writer.kv_delete(_key(key))


kv = KV()


def kv_reason_of(code):
    """The word for a kv-error event's code."""
    return abi.KV_ERROR_REASONS.get(code, "unknown")


# ------------------------------------------------------------------ route

def _live(what):
    rt = _rt
    if rt is None or not rt.in_call or rt.upgrading:
        raise RuntimeError(f"weir: {what} is only possible while a hook runs "
                           "(not in on_upgrade or at top level)")
    return rt


class Route:
    """The route: what a hook may do that is about no one connection. Its
    requests and timers outlive every connection (a route timer outlives
    the instance too: a fresh one gets it through `on_timer(route, tag)`)."""

    __slots__ = ()
    is_route = True
    id = 0

    def publish(self, topic, msg):
        """Deliver `msg` to every subscriber of `topic`."""
        _live("route.publish").writer.publish(topic, msg, None)

    def send(self, conn_id, msg):
        """Send `msg` to connection `conn_id` (a str as text, bytes as binary)."""
        _live("route.send").writer.send(conn_id, msg)

    def close(self, conn_id, code=1000, reason=""):
        """Close connection `conn_id`."""
        _live("route.close").writer.close(conn_id, code, reason)

    def set_timer(self, delay, callback=None):
        """A route timer due in `delay` seconds: `callback(route, tag)`, or
        the handler's `on_timer(route, tag)`; its tag."""
        return _live("route.set_timer").timer(None, delay, callback, None)

    def cancel_timer(self, tag):
        _live("route.cancel_timer").cancel(tag)

    def fetch(self, url, method="GET", headers=None, body=None, *, json=None):
        """fetch for the route: its answer comes whatever connection closes."""
        rt = _rt
        saved = rt.ctx if rt is not None else None
        if rt is not None:
            rt.ctx = None
        try:
            return fetch(url, method, headers, body, json=json)
        finally:
            if rt is not None:
                rt.ctx = saved

    def history(self, channel, limit=0, newest=False):
        """Conn.history for the route: its answer comes whatever connection
        closes."""
        return _live("route.history").read(None, True, channel, limit, newest)

    def presence(self, channel):
        """Conn.presence for the route."""
        return _live("route.presence").read(None, False, channel, 0, False)

    @property
    def kv(self):
        return kv

    def __repr__(self):
        return "<route>"


route = Route()
