"""The I/O of weir:gateway 0.4.0 in the Python SDK (fetch, timers, kv,
async hooks, deferred upgrades, bounds) through the harness
(weir_guest.testing.TestRoute), which plays the gateway natively.

Run: python3 -m unittest discover -s guest-sdk/python/tests
"""

import json
import pathlib
import sys
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import weir_guest  # noqa: E402
from weir_guest.testing import TestRoute, match_route  # noqa: E402

ASYNC = HERE / "handlers" / "async_shapes.py"


class Io(unittest.TestCase):
    def setUp(self):
        self.route = TestRoute.load(ASYNC, "/io")
        self.c = self.route.connect("/io")

    def test_await_fetch_resumes_in_the_batch_that_answers_it(self):
        r = self.route
        r.send_text(self.c, "json pen")
        [sent] = r.requests()
        self.assertEqual((sent.conn, sent.method, sent.url), (self.c, "POST", "http://api/item"))
        self.assertEqual(sent.header("content-type"), "application/json")
        self.assertEqual(json.loads(sent.body), {"q": "pen"})
        self.assertEqual(r.received(self.c), [], "nothing before the answer")
        r.respond(sent.tag, 201, [("X-Count", "7")], '{"name": "pen"}')
        self.assertEqual(r.texts(self.c), ["201 7 pen"])
        self.assertEqual(r.requests(), [])

    def test_a_failed_fetch_raises_the_gateways_reason(self):
        r = self.route
        r.send_text(self.c, "fail")
        r.fail(r.requests()[0].tag, "refused", "not allowed")
        self.assertEqual(r.texts(self.c), ["error refused not allowed"])

    def test_gather_over_two_requests_answered_out_of_order(self):
        r = self.route
        r.send_text(self.c, "both")
        a, b = r.requests()
        self.assertEqual((a.url, b.url), ("http://api/a", "http://api/b"))
        r.respond(b.tag, 200, [], "B")
        self.assertEqual(r.received(self.c), [])
        r.respond(a.tag, 200, [], "A")
        self.assertEqual(r.texts(self.c), ["A+B"])

    def test_an_async_hook_that_raises_closes_only_its_connection(self):
        r = self.route
        other = r.connect("/io")
        r.send_text(self.c, "raise-later")
        self.assertTrue(r.is_open(self.c), "still open until its sleep fires")
        r.advance(0)
        self.assertEqual(r.closed_with(self.c), (1011, "handler error"))
        self.assertTrue(any("ValueError: later" in m for lvl, m in r.logs if lvl == "error"))
        r.send_text(other, "echo")
        self.assertEqual(r.texts(other), ["echo"])

    def test_a_failure_nobody_awaited_is_logged_and_the_connection_goes_on(self):
        r = self.route
        r.send_text(self.c, "unawaited")
        r.fail(r.requests()[0].tag, "connect")
        self.assertTrue(r.is_open(self.c))
        self.assertEqual(r.texts(self.c), ["ok"])
        self.assertTrue(any("nobody awaited it: FetchError" in m for lvl, m in r.logs
                            if lvl == "error"), r.logs)

    def test_awaiting_asyncio_fails_its_connection_with_a_reason(self):
        r = self.route
        r.send_text(self.c, "asyncio")
        self.assertEqual(r.closed_with(self.c), (1011, "handler error"))
        self.assertTrue(any("only weir_guest's awaitables" in m for _, m in r.logs), r.logs)

    def test_sleep_resumes_when_its_timer_fires_not_before(self):
        r = self.route
        r.send_text(self.c, "sleep 0.5")
        [t] = r.timers()
        self.assertEqual((t.conn, t.delay_ms), (self.c, 500))
        r.advance(0.499)
        self.assertEqual(r.received(self.c), [])
        r.advance(0.001)
        self.assertEqual(r.texts(self.c), ["slept"])

    def test_a_timer_callback_re_arms_and_timers_end_with_their_connection(self):
        r = self.route
        r.send_text(self.c, "ticks")
        r.advance(1)
        self.assertEqual(r.texts(self.c), ["tick 1", "tick 2", "tick 3"])
        self.assertEqual(r.state(self.c), 3, "state a timer changed is saved")
        r.send_text(self.c, "sleep 5")
        r.close(self.c)
        self.assertEqual(r.timers(), [])
        self.assertEqual(r.runtime.timers, 0, "the instance forgot them too")

    def test_cancelled_timers_never_fire(self):
        r = self.route
        r.send_text(self.c, "cancelled")
        self.assertEqual(r.timers(), [])
        self.assertEqual(r.runtime.timers, 0)

    def test_a_durable_timer_reaches_on_timer_in_a_fresh_instance(self):
        r = self.route
        r.send_text(self.c, "durable 2")
        r.replace_instance()
        r.advance(2)
        self.assertEqual(r.texts(self.c), ["durable fired"])

    def test_a_route_timer_outlives_its_instance_through_on_timer(self):
        r = self.route
        r.send_text(self.c, "route-timer 1")
        [t] = r.timers()
        self.assertEqual(t.conn, 0)
        r.advance(1)
        self.assertEqual(r.texts(self.c), ["route timer"])
        r.send_text(self.c, "route-timer 1")
        r.replace_instance()
        r.advance(1)
        self.assertEqual(r.texts(self.c), ["route on_timer"])

    def test_state_changed_after_an_await_is_saved_and_restored(self):
        r = self.route
        r.send_text(self.c, "count")
        r.send_text(self.c, "count")
        r.advance(0.001)
        self.assertEqual(r.texts(self.c), ["1", "2"])
        self.assertEqual(r.state(self.c), {"n": 2})
        r.replace_instance()
        r.send_text(self.c, "count")
        r.advance(0.001)
        self.assertEqual(r.texts(self.c), ["3"])

    def test_kv_writes_land_after_the_batch_with_ttl_and_refusals_reach_on_kv_error(self):
        r = self.route
        c = self.c
        r.kv_set("c", "old")
        r.send_text(c, "kv")
        self.assertEqual(r.texts(c), ["None None"], "not visible in its own batch")
        self.assertEqual(r.kv(), {"a": "1", "b": '{"x":2}'}, "c deleted")
        self.assertEqual(r.kv_expires("b"), 1.0)
        r.advance(1)
        self.assertEqual(r.kv(), {"a": "1"})
        r.send_text(c, "kv")
        self.assertEqual(r.texts(c), ["1 None"])
        # A store full at one key: the second write is refused and not applied.
        full = TestRoute.load(ASYNC, "/io", kv_max_keys=1)
        d = full.connect("/io")
        full.send_text(d, "kv")
        self.assertEqual(full.texts(d), ["None None", "refused b max-keys"])
        self.assertEqual(full.kv(), {"a": "1"})

    def test_a_route_fetch_is_answered_whatever_connection_closes(self):
        r = self.route
        other = r.connect("/io")
        r.send_text(self.c, "route-fetch")
        [sent] = r.requests()
        self.assertEqual(sent.conn, 0)
        r.close(self.c)
        r.respond(sent.tag, 200, [], "for all")
        self.assertEqual(r.texts(other), ["for all"])

    def test_a_connections_fetch_is_dropped_when_it_closes(self):
        r = self.route
        r.send_text(self.c, "json x")
        r.close(self.c)
        self.assertEqual(r.requests(), [])
        self.assertEqual(r.runtime.requests, 0)

    def test_pending_requests_are_bounded(self):
        r = self.route
        r.send_text(self.c, "flood")
        self.assertEqual(r.texts(self.c), ["busy,busy"])
        self.assertEqual(len(r.requests()), weir_guest.MAX_PENDING_REQUESTS)

    def test_deferred_upgrade_accepts_with_state_and_protocol(self):
        r = self.route
        seen = []

        def auth(sent):
            seen.append(sent)
            return {"status": 200, "body": '{"name": "ann"}'}

        up = r.upgrade_answering("/io?token=t1", auth,
                                 headers=[("Sec-WebSocket-Protocol", "v1, v2")])
        self.assertEqual((up.status, up.protocol), (101, "v1"))
        self.assertEqual((seen[0].url, seen[0].header("authorization")),
                         ("http://auth/check?token=t1", "Bearer x"))
        self.assertEqual(r.state(up.id), {"user": "ann"})

    def test_deferred_upgrade_refused_by_status_by_error_and_one_request_only(self):
        r = self.route
        self.assertEqual(r.upgrade_answering("/io?token=x", lambda s: {"status": 403}).status,
                         401)
        # A FetchError the hook does not catch: its raise refuses with 500.
        self.assertEqual(r.upgrade_answering("/io?token=x",
                                             lambda s: {"error": "timeout"}).status, 500)
        self.assertEqual(r.upgrade_answering("/io?twice", lambda s: {"status": 200}).status, 500)
        self.assertEqual(r.upgrade("/io?sleep").status, 500, "a timer in on_upgrade")
        self.assertTrue(any("one request per upgrade" in m for _, m in r.logs))
        with self.assertRaises(AssertionError):
            r.upgrade("/io?token=y")

    def test_io_outside_a_hook_or_in_on_upgrade_is_refused(self):
        with self.assertRaises(RuntimeError):
            weir_guest.sleep(1)
        with self.assertRaises(RuntimeError):
            weir_guest.kv.set("k", "v")

    def test_fetch_checks_its_request(self):
        from weir_guest import io
        with self.assertRaises(ValueError):
            io.describe_request("http://h/x", "GET", body="no")
        with self.assertRaises(ValueError):
            io.describe_request("http://h/x", headers={"a": "b\r\nc: d"})
        with self.assertRaises(ValueError):
            io.describe_request("http://h/a b")
        self.assertEqual(io.describe_request("http://h/x", "post", {"X-A": "1"}, "hé"),
                         ("POST", "http://h/x", [("x-a", "1"),
                                                 ("content-type", "text/plain;charset=UTF-8")],
                          "hé".encode()))
        self.assertEqual([io.ms_of(s) for s in (0, -1, 0.0001, 0.5, 1.0005, None)],
                         [0, 0, 1, 500, 1001, 0])

    def test_route_patterns_match_as_the_gateways(self):
        self.assertEqual(match_route("/chat/{room}", "/chat/red"), [("room", "red")])
        self.assertIsNone(match_route("/chat/{room}", "/chat/"))
        self.assertIsNone(match_route("/chat/{room}", "/chat/red/x"))
        self.assertEqual(match_route("/f/{*rest}", "/f/a/b"), [("rest", "a/b")])
        self.assertEqual(match_route("/plain", "/plain"), [])


if __name__ == "__main__":
    unittest.main()
