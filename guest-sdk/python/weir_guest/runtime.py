"""How a batch becomes hook calls: the same code runs in the component
(through `export`, which build.py's entry module calls) and natively (tests
pass their own host functions).
"""

import json
import traceback

from . import abi
from . import Accept, Conn, Request, log, ERROR

_EMPTY_INFO = abi.ConnInfo("", [], b"")
_EVENT = abi.EVENT_HEADER


def _dumps(state):
    return json.dumps(state, separators=(",", ":"))


class Runtime:
    """One instance's handler and what it knows of each connection."""

    def __init__(self, handler, connection):
        self.handler = handler
        # The host's `connection` import: bytes of a connection's info, or None.
        self.connection = connection
        self.conns = {}
        self.writer = abi.CommandWriter()

    def upgrade(self, req):
        """The handler's answer to an upgrade: ("accept", protocol,
        attachment bytes) or ("reject", status)."""
        try:
            answer = self.handler.on_upgrade(req)
        except MemoryError:
            raise
        except Exception:
            log(ERROR, "handler raised in on_upgrade: " + _one_line(traceback.format_exc()))
            return ("reject", 500)
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
        # A coroutine (async def) included: its decision would come too
        # late, and taking it for an accept would let an auth check through.
        if hasattr(answer, "close") and hasattr(answer, "send"):
            answer.close()
        log(ERROR, f"on_upgrade returned {type(answer).__name__}: hooks run synchronously and "
            "answer None, a status or Accept(...); refused with 500")
        return ("reject", 500)

    def _known(self, conn_id):
        conn = self.conns.get(conn_id)
        if conn is None:
            raw = self.connection(conn_id)
            info = abi.parse_conn_info(raw) if raw is not None else None
            conn = Conn(conn_id, info or _EMPTY_INFO, self)
            self.conns[conn_id] = conn
        return conn

    def _settle(self, conn):
        """Save `conn.state` if its JSON changed since it was last saved. A
        state that is not JSON fails its connection like a raise."""
        state = conn.state
        if state is None and conn._saved == "":
            return
        try:
            text = "" if state is None else _dumps(state)
        except (TypeError, ValueError):
            self._failed(conn, "saving conn.state")
            return
        if text != conn._saved:
            self.writer.set_attachment(conn.id, text)
            conn._saved = text

    def _failed(self, conn, hook):
        conn._failed = True
        log(ERROR, f"handler raised in {hook} (connection {conn.id}): "
            + _one_line(traceback.format_exc()))
        self.writer.close(conn.id, 1011, "handler error")

    def handle(self, headers, data):
        """One hook call per event, one answer: (command headers, data)."""
        w = self.writer
        w.reset()
        handler = self.handler
        on_message = handler.on_message
        conns = self.conns
        size = len(data)
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
                try:
                    on_message(conn, msg)
                except MemoryError:
                    raise
                except Exception:
                    self._failed(conn, "on_message")
                    continue
                if conn.state is not None or conn._saved:
                    self._settle(conn)
            elif kind == abi.OPEN:
                info = abi.parse_conn_info(data, offset, offset + length)
                if info is None:
                    raise abi.AbiError("ConnInfoMalformed", i)
                conn = Conn(conn_id, info, self)
                self.conns[conn_id] = conn
                try:
                    handler.on_open(conn)
                except MemoryError:
                    raise
                except Exception:
                    self._failed(conn, "on_open")
                    continue
                self._settle(conn)
            elif kind == abi.CLOSE:
                conn = self._known(conn_id)
                try:
                    reason = data[offset:offset + length].decode("utf-8")
                except UnicodeDecodeError:
                    raise abi.AbiError("ReasonNotUtf8", i) from None
                try:
                    handler.on_close(conn, code, reason)
                except MemoryError:
                    raise
                except Exception:
                    log(ERROR, f"handler raised in on_close (connection {conn_id}): "
                        + _one_line(traceback.format_exc()))
                self.conns.pop(conn_id, None)
            # Kinds this SDK does not know (a newer host) are skipped.
        return w.finish()


def _one_line(text):
    return " | ".join(line.strip() for line in text.strip().splitlines())


def export(handler_class):
    """The class componentize-py exports as `weir:gateway/handler` for
    `handler_class` (one handler object per instance, made on first use).
    Checked here, at build time (componentize-py runs the module then), so
    a module without a handler fails its build instead of every batch."""
    import weir_guest

    if not isinstance(handler_class, type) or not callable(
            getattr(handler_class, "on_message", None)) or (
            handler_class.on_message is weir_guest.Handler.on_message):
        raise TypeError("weir: the handler module must define class Handler(weir_guest.Handler)"
                        " with on_message(self, conn, msg)")
    from wit_world import exports
    from wit_world.imports import host, types

    levels = {"error": host.Level.ERROR, "warn": host.Level.WARN, "info": host.Level.INFO,
              "debug": host.Level.DEBUG, "trace": host.Level.TRACE}
    weir_guest._log_sink = lambda level, msg: host.log(levels.get(level, host.Level.INFO), msg)
    state = {}

    def runtime():
        rt = state.get("rt")
        if rt is None:
            rt = state["rt"] = Runtime(handler_class(), host.connection)
        return rt

    class Export(exports.Handler):
        def upgrade(self, req):
            answer = runtime().upgrade(Request(req.path, req.query, req.headers,
                                               req.remote_addr, req.params))
            if answer[0] == "reject":
                return types.UpgradeResponse_Reject(answer[1])
            return types.UpgradeResponse_Accept(types.Accept(answer[1], answer[2]))

        def handle(self, events):
            commands, data = runtime().handle(events.events, events.data)
            return types.Commands(commands, data)

    return Export

