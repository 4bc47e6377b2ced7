"""How a batch becomes hook calls: the same code runs in the component
(through `export`, which build.py's entry module calls) and natively (tests
and weir_guest.testing pass their own host functions).

Async hooks: a hook that returns a coroutine (an `async def`) runs as a
Task (weir_guest/io.py) up to its first await; the Futures it awaits are
settled by the I/O events of later batches, and the callbacks they wake
(a Task's next step, done-callbacks) run after each event, inside the
gateway's call, until none is left.
"""

import json
import traceback
from types import CoroutineType

from . import abi
from . import io
from . import questions
from . import Accept, Conn, Request, Verdict, log, ERROR, DEBUG
from .io import Task, Future, route

_EMPTY_INFO = abi.ConnInfo("", [], b"")
_EVENT = abi.EVENT_HEADER
_U64 = abi._U64

# What a pending entry is waiting for.
_FETCH, _TIMER, _HISTORY, _PRESENCE = 1, 2, 3, 4


def _dumps(state):
    return json.dumps(state, separators=(",", ":"))


class _Pending:
    """A request or timer this instance waits for, by tag."""

    __slots__ = ("kind", "ctx", "fn", "args", "fut", "url")

    def __init__(self, kind, ctx, fn=None, args=None, fut=None, url=""):
        self.kind = kind
        self.ctx = ctx
        self.fn = fn
        self.args = args
        self.fut = fut
        self.url = url


class Runtime:
    """One instance's handler and what it knows of each connection, its
    pending I/O and its deferred upgrades."""

    def __init__(self, handler, connection, kv_get=None):
        self.handler = handler
        # The host's `connection` import: bytes of a connection's info, or None.
        self.connection = connection
        # The host's `kv.get` import: bytes or None.
        self.kv_import = kv_get
        self.conns = {}
        self.writer = abi.CommandWriter()
        # Inside a guest call (a batch or an upgrade): I/O may be asked for.
        self.in_call = False
        # Inside on_upgrade: only one fetch, no commands.
        self.upgrading = False
        # The fetch an upgrade made, waiting to become its `defer`:
        # (tag, request, future).
        self.upgrade_fetch = None
        # Deferred upgrades by tag: (task, future, url).
        self.deferred = {}
        # Requests and timers waiting, by tag.
        self.pending = {}
        self.requests = 0
        self.timers = 0
        self.reads = 0
        # Whose work runs: a Conn, or None for the route.
        self.ctx = None
        # Some callback or task ran in this batch: settle every connection
        # it had.
        self.async_ran = False
        self.batch_conns = []

    def kv_get(self, key):
        return self.kv_import(key) if self.kv_import is not None else None

    # ------------------------------------------------------------ I/O

    def request(self, ctx, req):
        """Send `req` (method, url, headers, body) for `ctx` (a Conn, or
        None for the route); a Future of its Response."""
        fut = Future()
        if self.upgrading:
            if self.upgrade_fetch is not None:
                fut.set_exception(io.FetchError(
                    "busy", "on_upgrade may make one request (the upgrade's defer)"))
            else:
                self.upgrade_fetch = (io.new_tag(), req, fut)
            return fut
        if self.requests >= io.MAX_PENDING_REQUESTS:
            fut.set_exception(io.FetchError(
                "busy", f"{io.MAX_PENDING_REQUESTS} requests already waiting"))
            return fut
        tag = io.new_tag()
        method, url, headers, body = req
        self.writer.http_request(0 if ctx is None else ctx.id, tag, method, url, headers, body)
        self.pending[tag] = _Pending(_FETCH, ctx, fut=fut, url=url)
        self.requests += 1
        if ctx is not None:
            if ctx._io is None:
                ctx._io = set()
            ctx._io.add(tag)
        return fut

    def timer(self, ctx, delay, fn, args):
        """Start a timer for `ctx` due in `delay` seconds: `fn(*args)` runs
        then, or `fn(target, tag)` when `args` is None, or the handler's
        on_timer when `fn` is None. Returns its tag."""
        if self.timers >= io.MAX_PENDING_TIMERS:
            raise RuntimeError(f"weir: {io.MAX_PENDING_TIMERS} timers already waiting in "
                               "this instance")
        tag = io.new_tag()
        self.writer.set_timer(0 if ctx is None else ctx.id, tag, io.ms_of(delay))
        self.pending[tag] = _Pending(_TIMER, ctx, fn, args)
        self.timers += 1
        if ctx is not None:
            if ctx._io is None:
                ctx._io = set()
            ctx._io.add(tag)
        return tag

    def read(self, ctx, history, channel, limit, newest):
        """A history (`history` true) or presence read of `channel` for
        `ctx` (a Conn, or None for the route); a Future of its answer."""
        fut = Future()
        if not isinstance(channel, str) or not channel:
            fut.set_exception(io.ReadError("bad-channel", "a channel is a non-empty str"))
            return fut
        if self.reads >= io.MAX_PENDING_READS:
            fut.set_exception(io.ReadError(
                "busy", f"{io.MAX_PENDING_READS} reads already waiting"))
            return fut
        tag = io.new_tag()
        conn_id = 0 if ctx is None else ctx.id
        if history:
            n = max(0, min(int(limit or 0), 0xFFFFFFFF))
            self.writer.history_read(conn_id, tag, n, bool(newest), channel)
        else:
            self.writer.presence_read(conn_id, tag, channel)
        self.pending[tag] = _Pending(_HISTORY if history else _PRESENCE, ctx, fut=fut)
        self.reads += 1
        if ctx is not None:
            if ctx._io is None:
                ctx._io = set()
            ctx._io.add(tag)
        return fut

    def _uncount(self, entry):
        if entry.kind == _FETCH:
            self.requests -= 1
        elif entry.kind == _TIMER:
            self.timers -= 1
        else:
            self.reads -= 1

    def cancel(self, tag):
        """Cancel timer `tag` (an unknown or fired one is ignored)."""
        entry = self.pending.get(tag)
        if entry is None or entry.kind != _TIMER:
            return
        self.writer.cancel_timer(0 if entry.ctx is None else entry.ctx.id, tag)
        self._forget(tag, entry)

    def _forget(self, tag, entry):
        del self.pending[tag]
        self._uncount(entry)
        if entry.ctx is not None and entry.ctx._io:
            entry.ctx._io.discard(tag)

    def _drop_io(self, conn):
        """`conn` closed: forget its requests and timers (the gateway drops
        their answers; what awaited them never resumes)."""
        if not conn._io:
            return
        for tag in conn._io:
            entry = self.pending.pop(tag, None)
            if entry is not None:
                self._uncount(entry)
        conn._io = None

    def _answered(self, tag, settle, kind=_FETCH):
        entry = self.pending.get(tag)
        if entry is None or entry.kind != kind:
            what = "request" if kind == _FETCH else "read"
            log(DEBUG, f"answer to {what} {tag}, which this instance did not send "
                "(it replaced the one that did); dropped")
            return
        self._forget(tag, entry)
        settle(entry)

    def _fired(self, conn_id, tag):
        entry = self.pending.get(tag)
        target = route if conn_id == 0 else self._known(conn_id)
        if target is not route and target._failed:
            return
        if entry is not None:
            self._forget(tag, entry)
        saved = self.ctx
        self.ctx = None if target is route else target
        try:
            if entry is not None and entry.kind == _TIMER and entry.fn is not None:
                if entry.args is None:
                    r = entry.fn(target, tag)
                else:
                    r = entry.fn(*entry.args)
            else:
                r = self.handler.on_timer(target, tag)
            if r is not None:
                self._watch(target, "a timer", r)
        except MemoryError:
            raise
        except Exception as e:
            if target is route:
                self._route_failed("a timer", e)
            else:
                self._failed(target, "a timer", e)
        finally:
            self.ctx = saved

    def _io_event(self, i, conn_id, kind, code, data, offset, end):
        """An http-response, http-error, timer, history or presence event."""
        if conn_id != 0:
            conn = self.conns.get(conn_id) or self._known(conn_id)
            if conn._failed:
                return
        if kind == abi.HISTORY or kind == abi.PRESENCE:
            history = kind == abi.HISTORY
            r = (abi.split_history if history else abi.split_presence)(code, data, offset, end)
            if r is None:
                raise abi.AbiError("IoEventMalformed", i)

            def settle(e):
                if r[1]:
                    e.fut.set_exception(io.read_error_of(r[1]))
                else:
                    e.fut.set_result(io.history_of(r) if history else io.members_of(r))
            self._answered(r[0], settle, _HISTORY if history else _PRESENCE)
        elif kind == abi.TIMER:
            if end - offset != 8:
                raise abi.AbiError("IoEventMalformed", i)
            self._fired(conn_id, _U64.unpack_from(data, offset)[0])
        elif kind == abi.HTTP_RESPONSE:
            r = abi.split_http_response(data, offset, end)
            if r is None:
                raise abi.AbiError("IoEventMalformed", i)
            tag, head, body = r
            self._answered(tag, lambda e: e.fut.set_result(
                io.response_of(code, head, body, e.url)))
        else:
            r = abi.split_http_error(data, offset, end)
            if r is None:
                raise abi.AbiError("IoEventMalformed", i)
            tag, message = r
            self._answered(tag, lambda e: e.fut.set_exception(io.fetch_error_of(code, message)))

    # ------------------------------------------------------------ hooks

    def _watch(self, conn, hook, r):
        """A hook returned `r`: a coroutine runs as a Task of `conn` (route:
        None), whose raise, when it comes, fails `conn` (or is logged for
        the route)."""
        if type(r) is not CoroutineType:
            return
        self.async_ran = True
        task = Task(r, None if conn is route else conn)

        def done(t):
            exc = t.exception()
            if exc is None:
                return
            if isinstance(exc, MemoryError):
                raise exc
            if conn is route or conn is None or conn._closed:
                self._route_failed(hook, exc)
            else:
                self._failed(conn, hook, exc)

        task.add_done_callback(done)

    def _drain(self):
        """Run every ready callback (tasks' next steps), until none is left.
        A loop that never ends is stopped by the route's deadline."""
        ready = io._ready
        if not ready:
            return
        self.async_ran = True
        saved = self.ctx
        while ready:
            fn, fut = ready.popleft()
            self.ctx = fut._ctx
            try:
                fn(fut)
            except MemoryError:
                raise
            except Exception as e:
                log(ERROR, "a done-callback raised: " + _describe(e))
        self.ctx = saved

    def _filter(self, conn, direction, msg):
        """A proxy event: the filter's verdict on `msg` (direction byte
        `direction`) becomes a forward, a close or nothing."""
        w = self.writer
        self.ctx = conn
        try:
            verdict = self.handler.on_proxy_message(conn, abi.DIRECTIONS[direction], msg)
        except MemoryError:
            raise
        except Exception:
            self._failed(conn, "on_proxy_message")
            return
        if verdict is None or verdict is Verdict.PASS:
            w.forward(conn.id, direction, msg)
        elif verdict is Verdict.DROP:
            pass
        elif isinstance(verdict, (str, bytes, bytearray, memoryview)):
            w.forward(conn.id, direction, verdict if isinstance(verdict, str) else bytes(verdict))
        elif isinstance(verdict, Verdict) and verdict.verdict == "replace":
            w.forward(conn.id, direction, verdict.message)
        elif isinstance(verdict, Verdict) and verdict.verdict == "close":
            w.close(conn.id, verdict.code, verdict.reason)
        elif type(verdict) is CoroutineType:
            verdict.close()
            self._failed(conn, "on_proxy_message", TypeError(
                "on_proxy_message is a coroutine: a filter decides at once (messages go on "
                "in order)"))
        else:
            self._failed(conn, "on_proxy_message", TypeError(
                f"on_proxy_message returned {verdict!r}, not a verdict"))

    def _route_failed(self, what, e):
        log(ERROR, f"handler raised in {what} (route): " + _describe(e))

    # ------------------------------------------------------------ upgrade

    def _begin(self, upgrading):
        io._rt = self
        self.in_call = True
        self.upgrading = upgrading
        self.upgrade_fetch = None
        self.ctx = None

    def _end(self):
        self.in_call = False
        self.upgrading = False
        self.upgrade_fetch = None
        self.ctx = None

    def upgrade(self, req):
        """The handler's answer to an upgrade: ("accept", protocol,
        attachment bytes), ("reject", status) or ("defer", tag, (method,
        url, headers, body)) when an async on_upgrade awaits one fetch."""
        self._begin(True)
        try:
            try:
                answer = self.handler.on_upgrade(req)
            except MemoryError:
                raise
            except Exception:
                log(ERROR, "handler raised in on_upgrade: " + _one_line(traceback.format_exc()))
                return ("reject", 500)
            if type(answer) is CoroutineType:
                task = Task(answer, None)
                self._drain()
                if not task.done():
                    return self._defer(task)
                return self._decide_task(task)
            return self._decide(answer)
        finally:
            self._end()

    def _decide_task(self, task):
        """The decision of an on_upgrade that finished as `task`."""
        answer = self._outcome(task)
        if answer is _REFUSED:
            return ("reject", 500)
        return self._decide(answer)

    def _outcome(self, task):
        exc = task.exception()
        if exc is None:
            return task.result()
        if isinstance(exc, MemoryError):
            raise exc
        log(ERROR, "handler raised in on_upgrade: " + _describe(exc))
        return _REFUSED

    def _defer(self, task):
        """on_upgrade awaits: its one fetch becomes the upgrade's `defer`."""
        f = self.upgrade_fetch
        if f is None:
            task._coro.close()
            log(ERROR, "on_upgrade awaited something other than one fetch (a timer?); "
                "refused with 500")
            return ("reject", 500)
        tag, req, fut = f
        if len(self.deferred) >= io.MAX_PENDING_REQUESTS:
            # The gateway gave up on the oldest (handshake_timeout): forget it.
            del self.deferred[next(iter(self.deferred))]
        self.deferred[tag] = (task, fut, req[1])
        return ("defer", tag, req)

    def resume_upgrade(self, tag, outcome):
        """The outcome of a deferred upgrade's request: ("response", status,
        headers, body) or ("error", code, message); the decision as upgrade
        answers it (a second await refuses with 500)."""
        d = self.deferred.pop(tag, None)
        if d is None:
            log(ERROR, f"resume of upgrade {tag}, which this instance did not defer "
                "(it was replaced); refused with 500")
            return ("reject", 500)
        task, fut, url = d
        self._begin(True)
        try:
            if outcome[0] == "response":
                fut.set_result(io.Response(outcome[1], outcome[2], outcome[3], url))
            else:
                fut.set_exception(io.fetch_error_of(outcome[1], outcome[2]))
            self._drain()
            if not task.done():
                task._coro.close()
                log(ERROR, "on_upgrade awaited again after its request (one request per "
                    "upgrade); refused with 500")
                return ("reject", 500)
            return self._decide_task(task)
        finally:
            self._end()

    def _decide(self, answer):
        if answer is None or answer is True:
            return ("accept", None, b"")
        if answer is False:
            return ("reject", 403)
        if isinstance(answer, int):
            return ("reject", answer)
        if isinstance(answer, Accept):
            try:
                state = b"" if answer.state is None else _dumps(answer.state).encode("utf-8")
            except (TypeError, ValueError) as e:
                log(ERROR, f"on_upgrade's state is not JSON ({e}); refused with 500")
                return ("reject", 500)
            return ("accept", answer.protocol, state)
        # Taking anything else for an accept could let an auth check through.
        if hasattr(answer, "close") and hasattr(answer, "send"):
            answer.close()
        log(ERROR, f"on_upgrade returned {type(answer).__name__}: it answers None, a status "
            "or Accept(...); refused with 500")
        return ("reject", 500)

    # ------------------------------------------------------------ batches

    def _known(self, conn_id):
        conn = self.conns.get(conn_id)
        if conn is None:
            raw = self.connection(conn_id)
            info = abi.parse_conn_info(raw) if raw is not None else None
            conn = Conn(conn_id, info or _EMPTY_INFO, self)
            self.conns[conn_id] = conn
            io.salt_tags(conn_id)
        return conn

    def _settle(self, conn):
        """Save `conn.state` if its JSON changed since it was last saved. A
        state that is not JSON fails its connection like a raise."""
        state = conn.state
        if state is None and conn._saved == "":
            return
        try:
            text = "" if state is None else _dumps(state)
        except (TypeError, ValueError) as e:
            self._failed(conn, "saving conn.state", e)
            return
        if text != conn._saved:
            self.writer.set_attachment(conn.id, text)
            conn._saved = text

    def _failed(self, conn, hook, exc=None):
        if conn._failed:
            return
        conn._failed = True
        detail = _describe(exc) if exc is not None else _one_line(traceback.format_exc())
        log(ERROR, f"handler raised in {hook} (connection {conn.id}): {detail}")
        self.writer.close(conn.id, 1011, "handler error")

    def handle(self, headers, data):
        """One hook call per event, one answer: (command headers, data)."""
        self._begin(False)
        self.async_ran = False
        try:
            return self._run(headers, data)
        finally:
            self._end()
            self.batch_conns.clear()

    def _run(self, headers, data):
        w = self.writer
        w.reset()
        handler = self.handler
        on_message = handler.on_message
        conns = self.conns
        size = len(data)
        ready = io._ready
        touched = self.batch_conns
        async_ran = False
        # The host checked what it sends; a batch that still breaks the ABI
        # is a host bug, and failing the batch (1011 for its connections)
        # is the honest answer: the AbiError traps the instance. Each range
        # is checked as its event comes up, in this one pass (a pass of its
        # own cost ~0.2 µs a message in the guest).
        if len(headers) % abi.EVENT_HEADER_BYTES:
            raise abi.AbiError("HeadersNotWhole", None, f"{len(headers)} bytes")
        for i, (conn_id, kind, _, code, offset, length) in enumerate(_EVENT.iter_unpack(headers)):
            end = offset + length
            if end > size:
                raise abi.AbiError("RangeOutOfBounds", i, f"payload {offset}+{length} of {size}")
            if kind == 1 or kind == 2:  # abi.TEXT, abi.BINARY: constants cost a lookup
                conn = conns.get(conn_id) or self._known(conn_id)
                if conn._failed:
                    continue
                if kind == 1:
                    try:
                        msg = data[offset:end].decode("utf-8")
                    except UnicodeDecodeError:
                        raise abi.AbiError("TextNotUtf8", i) from None
                else:
                    msg = data[offset:end]
                # Whose work runs: what fetch or set_timer in the hook is for.
                self.ctx = conn
                try:
                    r = on_message(conn, msg)
                except MemoryError:
                    raise
                except Exception:
                    self._failed(conn, "on_message")
                    continue
                if r is not None:
                    self._watch(conn, "on_message", r)
                    async_ran = True
                if ready:
                    self._drain()
                    async_ran = True
                if conn.state is not None or conn._saved:
                    self._settle(conn)
                if async_ran:
                    touched.append(conn)
                continue
            if kind == abi.OPEN:
                info = abi.parse_conn_info(data, offset, end)
                if info is None:
                    raise abi.AbiError("ConnInfoMalformed", i)
                conn = Conn(conn_id, info, self)
                conns[conn_id] = conn
                io.salt_tags(conn_id)
                self.ctx = conn
                try:
                    r = handler.on_open(conn)
                except MemoryError:
                    raise
                except Exception:
                    self._failed(conn, "on_open")
                    continue
                if r is not None:
                    self._watch(conn, "on_open", r)
                self._drain()
                if not conn._failed:
                    self._settle(conn)
                touched.append(conn)
            elif kind == abi.CLOSE:
                conn = self._known(conn_id)
                try:
                    reason = data[offset:end].decode("utf-8")
                except UnicodeDecodeError:
                    raise abi.AbiError("ReasonNotUtf8", i) from None
                self.ctx = conn
                try:
                    r = handler.on_close(conn, code, reason)
                    if r is not None:
                        self._watch(route, "on_close", r)
                except MemoryError:
                    raise
                except Exception:
                    log(ERROR, f"handler raised in on_close (connection {conn_id}): "
                        + _one_line(traceback.format_exc()))
                self._drain()
                conn._closed = True
                self._drop_io(conn)
                conns.pop(conn_id, None)
            elif kind == abi.PROXY_TEXT or kind == abi.PROXY_BINARY:
                direction = headers[i * abi.EVENT_HEADER_BYTES + 9]
                if direction > 1:
                    raise abi.AbiError("ReservedByteSet", i, f"direction {direction}")
                conn = conns.get(conn_id) or self._known(conn_id)
                if conn._failed:
                    continue
                if kind == abi.PROXY_TEXT:
                    try:
                        msg = data[offset:end].decode("utf-8")
                    except UnicodeDecodeError:
                        raise abi.AbiError("TextNotUtf8", i) from None
                else:
                    msg = bytes(data[offset:end])
                self._filter(conn, direction, msg)
                self._drain()
                if not conn._failed:
                    self._settle(conn)
                touched.append(conn)
            elif abi.HTTP_RESPONSE <= kind <= abi.TIMER or kind == abi.HISTORY or (
                    kind == abi.PRESENCE):
                self.ctx = None
                self._io_event(i, conn_id, kind, code, data, offset, end)
                self._drain()
                if conn_id != 0:
                    conn = conns.get(conn_id)
                    if conn is not None and not conn._closed and not conn._failed:
                        self._settle(conn)
                        touched.append(conn)
            elif abi.RT_SUBSCRIBE <= kind <= abi.PUSHER_CLIENT_EVENT:
                r = abi.split_rt_request(data, offset, end)
                if r is None:
                    raise abi.AbiError("IoEventMalformed", i)
                self.ctx = None
                failed = questions.answer(handler, w, kind, conn_id, r)
                if failed is not None:
                    log(ERROR, f"handler raised in {failed[0]} (question {r.call}; the gateway "
                        "fails it): " + _describe(failed[1]))
                self._drain()
            elif kind == abi.KV_ERROR:
                key = bytes(data[offset:end])
                self.ctx = None
                try:
                    r = handler.on_kv_error(route, key, io.kv_reason_of(code))
                    if r is not None:
                        self._watch(route, "on_kv_error", r)
                except MemoryError:
                    raise
                except Exception as e:
                    self._route_failed("on_kv_error", e)
                self._drain()
            # Kinds this SDK does not know (a newer host) are skipped.
            self.ctx = None
            async_ran = async_ran or self.async_ran
        # A continuation that ran for one connection may have changed
        # another's state: save every one this batch had (the gateway takes
        # an attachment only for a connection in the batch).
        if async_ran or self.async_ran:
            for conn in touched:
                if not conn._closed and not conn._failed:
                    self._settle(conn)
        return w.finish()


_REFUSED = object()


def _one_line(text):
    return " | ".join(line.strip() for line in text.strip().splitlines())


def _describe(exc):
    return _one_line("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def check_handler_class(handler_class):
    """Raise TypeError unless `handler_class` is a proper handler class."""
    import weir_guest

    base = weir_guest.Handler
    hooks = ("on_message", "on_proxy_message") + questions._HOOKS
    if not isinstance(handler_class, type) or not callable(
            getattr(handler_class, "on_message", None)) or all(
            getattr(handler_class, h, None) in (None, getattr(base, h)) for h in hooks):
        raise TypeError("weir: the handler module must define class Handler(weir_guest.Handler)"
                        " with on_message(self, conn, msg) (or, for a proxy route's filter, "
                        "on_proxy_message(self, conn, direction, msg); for a real-time "
                        "namespace's or Pusher app's guest, on_subscribe, on_client_publish "
                        "or on_pusher_*)")


def export(handler_class):
    """The class componentize-py exports as `weir:gateway/handler` for
    `handler_class` (one handler object per instance, made on first use).
    Checked here, at build time (componentize-py runs the module then), so
    a module without a handler fails its build instead of every batch."""
    import weir_guest

    check_handler_class(handler_class)
    from wit_world import exports
    from wit_world.imports import host, types
    try:  # weir:gateway 0.4.0; a build for 0.3.0 has no kv (build.py --world 0.3.0)
        from wit_world.imports import kv
        kv_get = kv.get
    except ImportError:
        kv_get = None

    levels = {"error": host.Level.ERROR, "warn": host.Level.WARN, "info": host.Level.INFO,
              "debug": host.Level.DEBUG, "trace": host.Level.TRACE}
    weir_guest._log_sink = lambda level, msg: host.log(levels.get(level, host.Level.INFO), msg)
    state = {}

    def runtime():
        rt = state.get("rt")
        if rt is None:
            rt = state["rt"] = Runtime(handler_class(), host.connection, kv_get)
        return rt

    _exported["runtime"] = runtime

    def request_of(req):
        return Request(req.path, req.query, req.headers, req.remote_addr, req.params)

    def response(answer):
        if answer[0] == "reject":
            return types.UpgradeResponse_Reject(answer[1])
        if answer[0] == "defer" and not hasattr(types, "UpgradeResponse_Defer"):
            log(ERROR, "on_upgrade awaited a fetch, but this component was built for "
                "weir:gateway 0.3.0 (no deferred upgrades); refused with 500")
            return types.UpgradeResponse_Reject(500)
        if answer[0] == "defer":
            method, url, headers, body = answer[2]
            return types.UpgradeResponse_Defer(types.DeferredUpgrade(
                answer[1], types.HttpRequest(method, url, headers, body)))
        return types.UpgradeResponse_Accept(types.Accept(answer[1], answer[2]))

    class Export(exports.Handler):
        def upgrade(self, req):
            return response(runtime().upgrade(request_of(req)))

        def resume_upgrade(self, tag, req, outcome):
            if isinstance(outcome, types.HttpOutcome_Response):
                r = outcome.value
                got = ("response", r.status, r.headers, r.body)
            else:
                got = ("error", outcome.value[0], outcome.value[1])
            return response(runtime().resume_upgrade(tag, got))

        def handle(self, events):
            commands, data = runtime().handle(events.events, events.data)
            return types.Commands(commands, data)

    return Export


# What export() made, for export_state.
_exported = {}


def export_state():
    """The class componentize-py exports as `weir:gateway/state` (world
    `stateful-handler`, 0.4.0): check-state over the instance export() made."""
    from wit_world import exports

    class State(exports.State):
        def check_state(self, attachments):
            return questions.check_states(_exported["runtime"]().handler, attachments)

    return State
