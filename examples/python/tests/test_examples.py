"""The Python examples under the SDK's harness (weir_guest.testing), with
the assertions their Rust and JavaScript twins' tests make. Run:
python3 -m unittest discover -s examples/python/tests"""

import pathlib
import sys
import unittest

HERE = pathlib.Path(__file__).resolve().parent
EXAMPLES = HERE.parent
sys.path.insert(0, str(EXAMPLES.parent.parent / "guest-sdk" / "python"))

from weir_guest.testing import TestRoute  # noqa: E402


def example(name):
    return EXAMPLES / f"{name}.py"


class Examples(unittest.TestCase):
    def test_echo_sends_every_message_back_as_it_came(self):
        route = TestRoute.load(example("echo"), "/plain")
        c = route.connect("/plain")
        route.send_text(c, "héllo")
        route.send_binary(c, b"\x00\xff")
        self.assertEqual(route.received(c), ["héllo", b"\x00\xff"])

    def test_json_answers_the_next_even_number_and_errors_without_closing(self):
        route = TestRoute.load(example("json"), "/json")
        c = route.connect("/json")
        for msg in ('{"number": 3}', '{"number": 4}', "nope", '{"number": 1.5}'):
            route.send_text(c, msg)
        three, four, bad, frac = route.json(c)
        self.assertEqual([three, four], [{"number": 4}, {"number": 6}])
        self.assertTrue(bad["error"].startswith("malformed JSON"), bad)
        self.assertEqual(frac["error"], '"number" must be an integer')
        self.assertTrue(route.is_open(c))

    def test_chat_reaches_the_other_members_of_the_room_only(self):
        route = TestRoute.load(example("chat"), "/chat/{room}")
        a = route.connect("/chat/red")
        b = route.connect("/chat/red")
        other = route.connect("/chat/blue")
        self.assertEqual(route.topics(a), ["red"])
        route.send_text(a, "hi")
        self.assertEqual(route.texts(b), ["hi"])
        self.assertEqual(route.received(a), [])
        self.assertEqual(route.received(other), [])

    def test_counter_counts_from_the_query_and_survives_a_new_instance(self):
        route = TestRoute.load(example("counter"), "/counter")
        c = route.connect("/counter?from=10")
        route.send_text(c, "x")
        route.send_text(c, "x")
        route.replace_instance()
        route.send_text(c, "x")
        self.assertEqual(route.texts(c), ["11", "12", "13"])
        d = route.connect("/counter")
        route.send_text(d, "x")
        self.assertEqual(route.texts(d), ["1"])

    def test_ticker_polls_on_a_route_timer_and_publishes_changes_only(self):
        route = TestRoute.load(example("ticker"), "/ticker")
        a = route.connect("/ticker")
        [first] = route.timers()
        self.assertEqual(first.conn, 0, "the route's timer, not the connection's")
        route.fire(first.tag)
        [req] = route.requests()
        self.assertEqual((req.url, req.conn), ("http://127.0.0.1:9002/ticker.txt", 0))
        route.respond(req.tag, 200, [], "42\n")
        self.assertEqual(route.texts(a), ["42"])
        self.assertEqual(route.kv_get("last"), "42")
        # The same value again: nothing published. A failure: nothing either.
        route.advance(1)
        route.respond(route.requests()[0].tag, 200, [], "42")
        route.advance(1)
        route.fail(route.requests()[0].tag, "timeout")
        self.assertEqual(route.received(a), [])
        # A fresh instance keeps polling on the timer it inherited; a late
        # joiner gets the last value at once.
        route.replace_instance()
        route.advance(1)
        route.respond(route.requests()[0].tag, 200, [], "43")
        self.assertEqual(route.texts(a), ["43"])
        b = route.connect("/ticker")
        self.assertEqual(route.texts(b), ["43"])
        self.assertEqual(len(route.timers()), 1, "one poll going, not one per client")

    def test_remote_auth_accepts_on_200_401_otherwise_503_without_an_answer(self):
        route = TestRoute.load(example("remote-auth"), "/auth")
        sent = []

        def service(req):
            sent.append(req)
            return {"status": 200, "body": "ann\n"}

        ok = route.upgrade_answering("/auth?token=let-me-in", service)
        self.assertEqual(sent[0].url, "http://127.0.0.1:9003/auth?token=let-me-in")
        route.send_text(ok.id, "hi")
        self.assertEqual(route.texts(ok.id), ["ann: hi"])
        route.send_binary(ok.id, b"\x01")
        self.assertEqual(route.closed_with(ok.id), (1003, "text only"))
        self.assertEqual(
            route.upgrade_answering("/auth?token=nope", lambda r: {"status": 403}).status, 401)
        self.assertEqual(
            route.upgrade_answering("/auth?token=x", lambda r: {"error": "connect"}).status, 503)
        self.assertEqual(route.upgrade("/auth?token=a%20b").status, 401,
                         "refused before any request")
        self.assertEqual(
            route.upgrade_answering("/auth?token=t", lambda r: {"status": 200, "body": " "}).status,
            502)

    def test_the_io_probe_fixture_fetches_sleeps_and_keeps_values(self):
        route = TestRoute.load(EXAMPLES / "fixtures" / "io-probe.py", "/io")
        c = route.connect("/io")
        route.send_text(c, "post b http://h/post hello there")
        [req] = route.requests()
        self.assertEqual((req.method, req.header("x-kind"), req.text),
                         ("POST", "probe", "hello there"))
        route.respond(req.tag, 200, [], req.text)
        route.send_text(c, "timer 50")
        route.advance(0.05)
        route.send_text(c, "set room lobby")
        route.send_text(c, "get-kv room")
        self.assertEqual(route.texts(c), ["b 200 hello there", "timer", "room=lobby"])


if __name__ == "__main__":
    unittest.main()
