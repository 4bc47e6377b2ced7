"""The questions a guest attached to a real-time namespace or a Pusher app is
asked, and its answers (the Rust SDK's hook.rs and pusher.rs): a
namespace's client subscribes (rt-subscribe, on_subscribe) and publishes
(rt-publish, on_client_publish); a Pusher app's connection opens
(pusher-connect, on_pusher_connect), a client subscribes (pusher-subscribe,
on_pusher_subscribe) or sends a client event (pusher-client-event,
on_pusher_client_event). Layouts: abi/src/realtime.rs and abi/src/pusher.rs.

A hook decides at once, as a Rust one does: the verdict goes in the answer
of the batch that asked. A hook that raises, or is a coroutine, answers
nothing; the gateway takes a question its batch left unanswered as failed
(a centrifugo client gets error 100, a Pusher one `GuestError` or a
reconnect), as it takes a Rust guest's trap, but the instance and the
batch's other events go on.
"""

import json
from types import CoroutineType

from . import abi

PERMISSION_DENIED = 103
"""Centrifugo's "permission denied": what a refusal without a code becomes."""
PUSHER_UNAUTHORIZED = 4009
"""Pusher's "unauthorized" close code: a refused connection without a code."""
PUSHER_FORBIDDEN = 403
"""The status of a refused Pusher subscribe without one."""

_HOOKS = ("on_subscribe", "on_client_publish", "on_pusher_connect", "on_pusher_subscribe",
          "on_pusher_client_event")


def _text(raw):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _value(text):
    """JSON text as a value; None when there is none or it is not JSON."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


class SubscribeRequest:
    """A client of a real-time namespace asks to subscribe to `channel` (the
    namespace's own checks passed): on_subscribe's argument."""

    __slots__ = ("channel", "client", "user", "info_text")

    def __init__(self, r):
        self.channel = r.channel
        self.client = r.client
        """The Centrifugo client id (one per connection)."""
        self.user = r.user
        """The connection token's `sub` ("" for an anonymous user)."""
        self.info_text = _text(r.info) or ""
        """The connection token's `info` claim as JSON text ("" when none)."""

    @property
    def info(self):
        """The `info` claim as a value (None when none)."""
        return _value(self.info_text)


class PublishRequest(SubscribeRequest):
    """A client publishes into a channel of the namespace: on_client_publish's
    argument."""

    __slots__ = ("bytes", "text")

    def __init__(self, r):
        super().__init__(r)
        self.bytes = r.rest
        """The publication's bytes."""
        self.text = _text(r.rest)
        """The publication as text (JSON), or None when it is not UTF-8."""

    @property
    def data(self):
        """The publication as a value (None when it is not JSON)."""
        return _value(self.text)


class ConnectRequest:
    """A connection of a Pusher app opens (before
    `pusher:connection_established`): on_pusher_connect's argument."""

    __slots__ = ("target", "socket_id", "headers")

    def __init__(self, r):
        self.target = r.channel
        """The request target: path and query (`/app/key?protocol=7&...`)."""
        self.socket_id = r.client
        self.headers = _text(r.info) or ""
        """The upgrade's headers, `name: value` lines joined by "\\n"."""

    def header(self, name):
        """The first value of header `name` (case-insensitive), or None."""
        name = name.lower()
        for line in self.headers.split("\n"):
            n, colon, v = line.partition(":")
            if colon and n.strip().lower() == name:
                return v.strip()
        return None

    @property
    def path(self):
        """The path, without the query."""
        return self.target.partition("?")[0]

    def query(self, name):
        """The first value of query parameter `name`, as sent (not
        percent-decoded), or None."""
        _, q, query = self.target.partition("?")
        if not q:
            return None
        for pair in query.split("&"):
            n, eq, v = pair.partition("=")
            if n == name:
                return v if eq else ""
        return None


class ChannelRequest:
    """A client of a Pusher app subscribes (weir's limits passed, its
    signature checked): on_pusher_subscribe's argument."""

    __slots__ = ("channel", "socket_id", "user", "channel_data", "auth", "signature")

    def __init__(self, r, signature, auth):
        self.channel = r.channel
        self.socket_id = r.client
        self.user = r.user
        """The user signed in on the connection (`pusher:signin`), or ""."""
        self.channel_data = _text(r.info) or ""
        """The `channel_data` the client sent (JSON text), or ""."""
        self.auth = auth
        """The `auth` the client sent (what its authoriser returned), or ""."""
        self.signature = signature
        """What weir's HMAC check made of `auth`: "none", "passed" or "failed"."""


class ClientEventRequest:
    """A client of a Pusher app sends a client event (the app allows them, the
    sender is subscribed, within its rate): on_pusher_client_event's
    argument."""

    __slots__ = ("channel", "socket_id", "user", "event", "bytes", "text")

    def __init__(self, r):
        self.channel = r.channel
        self.socket_id = r.client
        self.user = r.user
        """The sender's presence `user_id` on a presence channel, else the
        signed-in user, or ""."""
        self.event = _text(r.info) or ""
        """The event's name (`client-...`)."""
        self.bytes = r.rest
        self.text = _text(r.rest)
        """The event's `data` as JSON text, or None when it is not UTF-8."""

    @property
    def data(self):
        """The event's `data` as a value (None when it is not JSON)."""
        return _value(self.text)


def _wrong(hook, v, wants):
    return TypeError(f"{hook} returned {v!r}, not {wants}")


def _refusal_code(code, pusher):
    # Refuse(0) is not an allow: Rust's SubDecision::Refuse(0) is 103, a
    # Pusher refusal's code at least 1.
    if code == 0:
        return 1 if pusher else PERMISSION_DENIED
    return code


def _subscribe_verdict(w, hook, conn, call, v, refuse_code, pusher, authorise):
    from . import Verdict
    if v is None or v is True or (isinstance(v, Verdict) and v.verdict == "allow"):
        w.subscribe_verdict(conn, call, 0)
    elif v is False:
        w.subscribe_verdict(conn, call, refuse_code)
    elif type(v) is int and 0 <= v <= 0xFFFF:
        w.subscribe_verdict(conn, call, _refusal_code(v, pusher))
    elif isinstance(v, Verdict) and v.verdict == "refuse":
        w.subscribe_verdict(conn, call, _refusal_code(v.code, pusher), False,
                            v.reason if pusher else "")
    elif authorise and isinstance(v, Verdict) and v.verdict == "authorise":
        w.subscribe_verdict(conn, call, 0, True, v.message)
    else:
        if authorise:
            wants = ("None/True (allow), Verdict.authorise(member), False, a status or "
                     "Verdict.refuse(status, message)")
        elif pusher:
            wants = "None/True (allow), False, a close code or Verdict.refuse(code, message)"
        else:
            wants = "None/True (allow), False, an error code or Verdict.refuse(code)"
        raise _wrong(hook, v, wants)


def _publish_verdict(w, hook, conn, call, v):
    from . import Verdict
    if v is None or (isinstance(v, Verdict) and v.verdict == "pass"):
        w.publish_verdict(conn, call, abi.RT_PASS)
    elif isinstance(v, str):
        w.publish_verdict(conn, call, abi.RT_REPLACE, 0, v.encode("utf-8"))
    elif isinstance(v, (bytes, bytearray, memoryview)):
        w.publish_verdict(conn, call, abi.RT_REPLACE, 0, bytes(v))
    elif isinstance(v, Verdict) and v.verdict == "replace":
        w.publish_verdict(conn, call, abi.RT_REPLACE, 0, v.message)
    elif isinstance(v, Verdict) and v.verdict == "drop":
        w.publish_verdict(conn, call, abi.RT_DROP, v.code)
    else:
        hint = "; a value to publish goes as json.dumps(value)" if isinstance(v, (dict, list)) else ""
        raise _wrong(hook, v, "None (pass), a str or bytes (publish that instead), "
                     "Verdict.replace(x), Verdict.DROP or Verdict.drop(code)" + hint)


def answer(handler, w, kind, conn, r):
    """Ask `handler` question `kind` (an rt event, split as `r`) of connection
    `conn` and write its verdict to `w`. Returns None, or (hook, exception)
    when the hook raised or answered something that is not a verdict
    (nothing is written then: the gateway fails the question)."""
    hook = _HOOKS[kind - abi.RT_SUBSCRIBE]
    if kind == abi.RT_SUBSCRIBE:
        req = SubscribeRequest(r)
    elif kind == abi.RT_PUBLISH:
        req = PublishRequest(r)
    elif kind == abi.PUSHER_CONNECT:
        req = ConnectRequest(r)
    elif kind == abi.PUSHER_SUBSCRIBE:
        sub = abi.split_subscribe_rest(r.rest)
        if sub is None:
            return hook, TypeError("pusher-subscribe without a signature check")
        req = ChannelRequest(r, sub[0], sub[1])
    else:
        req = ClientEventRequest(r)
    try:
        v = getattr(handler, hook)(req)
        if type(v) is CoroutineType:
            v.close()
            raise TypeError(f"{hook} is a coroutine: it decides at once (the question waits "
                            "on this batch's answer)")
        if kind in (abi.RT_PUBLISH, abi.PUSHER_CLIENT_EVENT):
            _publish_verdict(w, hook, conn, r.call, v)
        elif kind == abi.RT_SUBSCRIBE:
            _subscribe_verdict(w, hook, conn, r.call, v, PERMISSION_DENIED, False, False)
        elif kind == abi.PUSHER_CONNECT:
            _subscribe_verdict(w, hook, conn, r.call, v, PUSHER_UNAUTHORIZED, True, False)
        else:
            _subscribe_verdict(w, hook, conn, r.call, v, PUSHER_FORBIDDEN, True, True)
    except MemoryError:
        raise
    except Exception as e:
        return hook, e
    return None


def check_states(handler, attachments):
    """The `check-state` export: for each attachment, None when this version
    can work with it (it is JSON, as this SDK writes conn.state, and the
    handler's check_state(state) accepts it), else why not. Nothing is
    kept."""
    out = []
    for raw in attachments:
        raw = bytes(raw)
        if not raw:
            out.append(None)
            continue
        try:
            state = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            out.append("the attachment is not UTF-8 JSON (not a conn.state this SDK saved)")
            continue
        except ValueError as e:
            out.append(f"the attachment is not JSON ({e}): not a conn.state this SDK saved")
            continue
        try:
            v = handler.check_state(state)
        except MemoryError:
            raise
        except Exception as e:
            out.append(str(e) or type(e).__name__)
            continue
        if type(v) is CoroutineType:
            v.close()
            out.append("check_state is a coroutine: it decides at once")
        elif v is None or v is True:
            out.append(None)
        elif v is False:
            out.append("check_state refused it")
        elif isinstance(v, str):
            out.append(v)
        else:
            out.append(f"check_state returned {v!r}: None (or True) accepts, False or a message "
                       "refuses")
    return out
