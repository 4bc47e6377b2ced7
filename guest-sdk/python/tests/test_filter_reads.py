"""The Python SDK's proxy filter hook and realtime reads, driven by its
harness (weir_guest.testing.TestRoute), with the fixtures
host/tests/polyglot_filters.rs runs against a real gateway:
examples/python/fixtures/moderate.py (on_proxy_message) and rt-probe.py
(await conn.history / conn.presence / route.history).

Run: python3 -m unittest discover -s guest-sdk/python/tests
"""

import pathlib
import sys
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from weir_guest import MAX_PENDING_READS  # noqa: E402
from weir_guest.testing import TestRoute  # noqa: E402

FIXTURES = HERE.parent.parent.parent / "examples" / "python" / "fixtures"
FILTERS = HERE / "handlers" / "filters.py"


class Filter(unittest.TestCase):
    def setUp(self):
        self.route = TestRoute.load(FIXTURES / "moderate.py", "/p")
        self.c = self.route.connect("/p")

    def test_a_filter_passes_rewrites_and_drops_both_ways_in_order(self):
        r, c = self.route, self.c
        r.proxy_message(c, "to-upstream", "hello")
        r.proxy_message(c, "to-upstream", "buy spam")
        r.proxy_message(c, "to-client", "darn it, darn")
        r.proxy_message(c, "to-client", b"\x00\xff")
        self.assertEqual(r.forwarded(c), [("to-upstream", "hello"),
                                          ("to-client", "d**n it, d**n"),
                                          ("to-client", b"\x00\xff")])
        self.assertEqual(r.received(c), [], "a filter's verdicts are forwards, not sends")
        self.assertEqual(r.forwarded(c), [], "forwarded() drains")

    def test_a_filters_own_message_and_its_state(self):
        r, c = self.route, self.c
        r.proxy_message(c, "to-client", "spam 1")
        r.proxy_message(c, "to-upstream", "spam 2")
        self.assertEqual(r.state(c), 2, "the drop count is saved as the connection's state")
        r.replace_instance()
        r.proxy_message(c, "to-upstream", "!dropped")
        self.assertEqual(r.forwarded(c), [("to-client", "dropped 2")],
                         "a fresh instance restores it")

    def test_verdict_close_closes_the_client_and_nothing_goes_on(self):
        r, c = self.route, self.c
        r.proxy_message(c, "to-client", "!kick")
        self.assertEqual(r.forwarded(c), [("to-client", "!kick")], "only the client's closes")
        r.proxy_message(c, "to-upstream", "!kick")
        self.assertEqual(r.forwarded(c), [])
        self.assertEqual(r.closed_with(c), (1008, "kicked by the moderator"))
        self.assertFalse(r.is_open(c))

    def test_bad_verdicts_close_only_their_connection_1011(self):
        r = TestRoute.load(FILTERS, "/f")
        ok = r.connect("/f")
        for bad in ("raise", "number", "async"):
            c = r.connect("/f")
            r.proxy_message(c, "to-upstream", bad)
            self.assertEqual(r.forwarded(c), [], bad)
            self.assertEqual(r.closed_with(c), (1011, "handler error"), bad)
        logs = [m for level, m in r.logs if level == "error"]
        self.assertTrue(any("ValueError: filter broke" in m for m in logs), logs)
        self.assertTrue(any("returned 42, not a verdict" in m for m in logs), logs)
        self.assertTrue(any("on_proxy_message is a coroutine" in m for m in logs), logs)
        r.proxy_message(ok, "to-upstream", "fine")
        r.proxy_message(ok, "to-client", "swap")
        r.proxy_message(ok, "to-client", "bytes")
        self.assertEqual(r.forwarded(ok), [("to-upstream", "fine"), ("to-client", "swapped"),
                                           ("to-client", b"\x01\x02\x03")])

    def test_a_handler_without_on_proxy_message_passes_everything_on(self):
        r = TestRoute.load(HERE / "handlers" / "async_shapes.py", "/a")
        c = r.connect("/a")
        r.proxy_message(c, "to-client", "as is")
        self.assertEqual(r.forwarded(c), [("to-client", "as is")])


class Reads(unittest.TestCase):
    def setUp(self):
        self.route = TestRoute.load(FIXTURES / "rt-probe.py", "/g")
        self.c = self.route.connect("/g")

    def test_await_history_resumes_with_the_position_and_publications(self):
        r, c = self.route, self.c
        r.send_text(c, "newest chat:room 2")
        [read] = r.reads()
        self.assertEqual((read.conn, read.kind, read.channel, read.limit, read.newest),
                         (c, "history", "chat:room", 2, True))
        self.assertEqual(r.received(c), [], "nothing until the answer comes")
        r.answer_history(read.tag, 9, "ep", [(9, '"b"'), (8, {"n": 1})])
        self.assertEqual(r.json(c), [{"history": {"offset": 9, "epoch": "ep", "publications": [
            {"offset": 9, "data": "b"}, {"offset": 8, "data": {"n": 1}}]}}])
        self.assertEqual(r.reads(), [])

    def test_await_presence_and_failed_reads(self):
        r, c = self.route, self.c
        r.send_text(c, "presence chat:room")
        r.answer_presence(r.reads()[0].tag, [("c1", "u1", {"n": 1}), ("c2", "", None)])
        self.assertEqual(r.json(c), [{"presence": [
            {"client": "c1", "user": "u1", "info": {"n": 1}},
            {"client": "c2", "user": "", "info": None}]}])
        for reason in ("bad-channel", "history-off", "presence-off", "unavailable", "busy",
                       "not-realtime"):
            r.send_text(c, "presence chat:x" if reason == "presence-off" else "history chat:x 5")
            r.fail_read(r.reads()[0].tag, reason)
            [answer] = r.json(c)
            self.assertEqual(list(answer.values()), [{"error": reason}])

    def test_route_history_is_the_routes(self):
        r, c = self.route, self.c
        d = r.connect("/g")
        r.send_text(c, "route-history chat:room")
        r.send_text(d, "history chat:room 3")
        mine, its = r.reads()
        self.assertEqual((mine.conn, mine.limit, its.conn), (0, 100, d))
        r.close(d)
        self.assertEqual([x.tag for x in r.reads()], [mine.tag],
                         "a connection's read ends with it")
        r.answer_history(mine.tag, 0, "e")
        self.assertEqual(r.json(c), [{"history": {"offset": 0, "epoch": "e",
                                                  "publications": []}}])

    def test_reads_are_bounded_and_checked_before_they_are_sent(self):
        r = TestRoute.load(FILTERS, "/f")
        c = r.connect("/f")
        r.send_text(c, "flood")
        self.assertEqual(len(r.reads()), MAX_PENDING_READS)
        self.assertEqual(r.texts(c), ["busy 1", "bad-channel 2"])
        r.fail_read(r.reads()[0].tag, "unavailable")
        r.send_text(c, "one more")
        self.assertEqual(len(r.reads()), MAX_PENDING_READS, "a settled read frees its place")


if __name__ == "__main__":
    unittest.main()
