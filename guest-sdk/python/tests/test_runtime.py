"""The Python runtime natively: batches packed with the codec go through
weir_guest.runtime.Runtime with a `connection` function that answers from a
dict (as the gateway's import does), and the answers are read back with the
codec's validating reader.

Run: python3 -m unittest discover -s guest-sdk/python/tests
"""

import pathlib
import sys
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import weir_guest  # noqa: E402
from weir_guest import abi  # noqa: E402
from weir_guest.runtime import Runtime  # noqa: E402


def batch(events):
    """Header and data buffers from (conn, kind, code, bytes) events."""
    headers, data = bytearray(), bytearray()
    for conn, kind, code, raw in events:
        raw = raw.encode() if isinstance(raw, str) else raw
        headers += abi.pack_event_header({"conn": conn, "kind": kind, "code": code,
                                          "offset": len(data), "len": len(raw)})
        data += raw
    return bytes(headers), bytes(data)


def info(target, params=(), attachment=""):
    return abi.encode_conn_info(target, list(params), attachment.encode())


class Chat(weir_guest.Handler):
    def on_open(self, conn):
        conn.subscribe(conn.param("room") or "lobby")

    def on_message(self, conn, msg):
        if msg == "count":
            conn.state = {"n": (conn.state or {}).get("n", 0) + 1}
            conn.send(str(conn.state["n"]))
        elif msg == "boom":
            raise ValueError("boom")
        elif msg == "same":
            conn.state = dict(conn.state)
        else:
            conn.publish(conn.param("room"), msg)


class RuntimeTests(unittest.TestCase):
    def setUp(self):
        self.known = {}
        self.rt = Runtime(Chat(), self.known.get)

    def run_batch(self, events):
        commands, data = self.rt.handle(*batch(events))
        out = abi.decode_commands(commands, data)
        for c in out:
            if "attachment" in c:
                c["attachment"] = c["attachment"].decode()
        return out

    def test_open_message_and_state_saved_only_when_changed(self):
        got = self.run_batch([
            (1, abi.OPEN, 0, info("/chat/red?x=1", [("room", "red")])),
            (1, abi.TEXT, 0, "count"),
            (1, abi.BINARY, 0, b"\x09"),
            (1, abi.TEXT, 0, "same"),
        ])
        self.assertEqual(got, [
            {"kind": "subscribe", "conn": 1, "topic": "red"},
            {"kind": "send-text", "conn": 1, "text": "1"},
            {"kind": "set-attachment", "conn": 1, "attachment": '{"n":1}'},
            {"kind": "publish-binary", "topic": "red", "payload": b"\x09", "exclude": 1},
        ])

    def test_an_unseen_connection_is_restored_from_the_host(self):
        self.known[7] = info("/chat/blue", [("room", "blue")], '{"n":41}')
        got = self.run_batch([(7, abi.TEXT, 0, "count"), (7, abi.TEXT, 0, "hi")])
        self.assertEqual(got, [
            {"kind": "send-text", "conn": 7, "text": "42"},
            {"kind": "set-attachment", "conn": 7, "attachment": '{"n":42}'},
            {"kind": "publish-text", "topic": "blue", "text": "hi", "exclude": 7},
        ])

    def test_a_raise_closes_only_its_connection(self):
        self.known[7] = info("/chat/blue", [("room", "blue")])
        got = self.run_batch([
            (1, abi.OPEN, 0, info("/chat/red", [("room", "red")])),
            (1, abi.TEXT, 0, "boom"),
            (1, abi.TEXT, 0, "count"),
            (7, abi.TEXT, 0, "count"),
            (1, abi.CLOSE, 1000, "bye"),
        ])
        self.assertEqual(got, [
            {"kind": "subscribe", "conn": 1, "topic": "red"},
            {"kind": "close", "conn": 1, "code": 1011, "reason": "handler error"},
            {"kind": "send-text", "conn": 7, "text": "1"},
            {"kind": "set-attachment", "conn": 7, "attachment": '{"n":1}'},
        ])
        self.assertNotIn(1, self.rt.conns)

    def test_upgrade_answers(self):
        class Up(weir_guest.Handler):
            def on_upgrade(self, req):
                if req.query_param("deny") is not None:
                    return 401
                if req.header("X-Nope"):
                    return False
                protocols = req.protocols()
                return weir_guest.Accept(state={"user": req.query_param("user")},
                                         protocol=protocols[0] if protocols else None)

        rt = Runtime(Up(), self.known.get)
        self.assertEqual(rt.upgrade(weir_guest.Request("/p", "deny")), ("reject", 401))
        self.assertEqual(rt.upgrade(weir_guest.Request("/p", "", [("x-nope", "1")])),
                         ("reject", 403))
        self.assertEqual(
            rt.upgrade(weir_guest.Request("/p", "user=ann",
                                          [("sec-websocket-protocol", "chat, v2")])),
            ("accept", "chat", b'{"user":"ann"}'))
        self.assertEqual(Runtime(Chat(), self.known.get).upgrade(weir_guest.Request("/p")),
                         ("accept", None, b""))

    def test_misuse_is_refused_or_fails_only_its_connection(self):
        class Async(weir_guest.Handler):
            async def on_upgrade(self, req):
                return 401

        # An async on_upgrade that decides without awaiting answers at once.
        self.assertEqual(Runtime(Async(), self.known.get).upgrade(weir_guest.Request("/p")),
                         ("reject", 401))

        class Generator(weir_guest.Handler):
            def on_upgrade(self, req):
                yield 401

        # Anything that is not a decision is refused, not taken for an accept.
        self.assertEqual(Runtime(Generator(), self.known.get).upgrade(weir_guest.Request("/p")),
                         ("reject", 500))

        class Unjson(weir_guest.Handler):
            def on_upgrade(self, req):
                return weir_guest.Accept(state={1, 2})

            def on_message(self, conn, msg):
                if msg == "set":
                    conn.state = {"s": {1}}
                else:
                    conn.send(msg)

        rt = Runtime(Unjson(), self.known.get)
        self.assertEqual(rt.upgrade(weir_guest.Request("/p")), ("reject", 500))
        commands, data = rt.handle(*batch([
            (9, abi.OPEN, 0, info("/b")),
            (9, abi.TEXT, 0, "set"),
            (9, abi.TEXT, 0, "after"),
            (10, abi.OPEN, 0, info("/b")),
            (10, abi.TEXT, 0, "fine"),
        ]))
        self.assertEqual(abi.decode_commands(commands, data), [
            {"kind": "close", "conn": 9, "code": 1011, "reason": "handler error"},
            {"kind": "send-text", "conn": 10, "text": "fine"},
        ])


    def test_echo_text_and_bytes_in_one_batch(self):
        class Echo(weir_guest.Handler):
            def on_message(self, conn, msg):
                conn.send(msg)

        rt = Runtime(Echo(), self.known.get)
        msgs = ["one", "två 😀", b"\x00\xff", "x" * 70000]
        commands, data = rt.handle(*batch([(20, abi.BINARY if isinstance(m, bytes) else abi.TEXT,
                                            0, m) for m in msgs]))
        self.assertEqual(abi.decode_commands(commands, data), [
            {"kind": "send-binary", "conn": 20, "payload": m} if isinstance(m, bytes)
            else {"kind": "send-text", "conn": 20, "text": m} for m in msgs])

    def test_a_batch_that_breaks_the_abi_fails_whole(self):
        headers, data = batch([(1, abi.TEXT, 0, "fine"), (1, abi.TEXT, 0, "cut")])
        with self.assertRaises(abi.AbiError) as e:
            self.rt.handle(headers, data[:-1])
        self.assertEqual((e.exception.variant, e.exception.index), ("RangeOutOfBounds", 1))
        with self.assertRaises(abi.AbiError) as e:
            self.rt.handle(headers[:-1], data)
        self.assertEqual((e.exception.variant, e.exception.index), ("HeadersNotWhole", None))
        with self.assertRaises(abi.AbiError) as e:
            self.rt.handle(*batch([(2, abi.TEXT, 0, b"a\xff")]))
        self.assertEqual((e.exception.variant, e.exception.index), ("TextNotUtf8", 0))

if __name__ == "__main__":
    unittest.main()
