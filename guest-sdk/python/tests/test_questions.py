"""The Python SDK as a real-time namespace's guest (on_subscribe,
on_client_publish), a Pusher app's guest (on_pusher_connect,
on_pusher_subscribe, on_pusher_client_event) and the `check-state` export
(check_state), driven by its harness (weir_guest.testing.TestRoute) with
the fixtures host/tests/rt_hooks.rs, pusher_guest.rs and deploy_state.rs
run against a real gateway: examples/python/fixtures/moderate.py,
pusher-gate.py and state-check.py.

Run: python3 -m unittest discover -s guest-sdk/python/tests
"""

import base64
import hashlib
import hmac
import json
import pathlib
import sys
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from weir_guest.testing import TestRoute  # noqa: E402

EXAMPLES = HERE.parent.parent.parent / "examples" / "python"
FIXTURES = EXAMPLES / "fixtures"
QUESTIONS = HERE / "handlers" / "questions.py"
JWT_KEY = b"weir-pusher-gate-test-key"


def jwt(claims, key=JWT_KEY):
    def b64(raw):
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    sig = b64(hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest())
    return f"{head}.{body}.{sig}"


class Namespace(unittest.TestCase):
    def test_a_namespace_guest_refuses_secret_and_vip_channels_and_moderates(self):
        r = TestRoute.load(FIXTURES / "moderate.py", "/rt")
        self.assertEqual(r.subscribe("chat:index", "c", "u"), {"verdict": "allow"})
        self.assertEqual(r.subscribe("chat:secret-1"), {"verdict": "refuse", "code": 103})
        self.assertEqual(r.subscribe("chat:vip"), {"verdict": "refuse", "code": 4403})
        self.assertEqual(r.client_publish("chat:index", {"t": "hi"}), {"verdict": "pass"})
        self.assertEqual(r.client_publish("chat:index", {"t": "darn"}),
                         {"verdict": "replace", "text": '{"t":"d**n"}'})
        self.assertEqual(r.client_publish("chat:index", {"t": "spam"}),
                         {"verdict": "drop", "code": 103})
        self.assertEqual(r.client_publish("chat:index", {"t": "!broken"}),
                         {"verdict": "replace", "text": "{not json"})

    def test_a_questions_request_carries_the_client_user_info_and_data(self):
        r = TestRoute.load(QUESTIONS, "/rt")
        self.assertEqual(r.subscribe("echo:x", "c-9", "ann", {"name": "Ann"}),
                         {"verdict": "refuse", "code": 4000 + len("c-9|ann|Ann")})
        self.assertEqual(r.client_publish("echo:x", {"n": 2}, user="ann", info='{"n":1}'),
                         {"verdict": "replace",
                          "text": '{"user":"ann","info":1,"data":2,"text":"{\\"n\\":2}"}'})
        self.assertEqual(r.client_publish("echo:x", b"\xff"),
                         {"verdict": "replace",
                          "text": '{"user":"","info":null,"data":null,"text":null}'})
        self.assertEqual(r.pusher_connect("/app/k?protocol=7&x=1", "1.2",
                                          [("Origin", "https://a")]),
                         {"verdict": "refuse", "code": 4001,
                          "message": "/app/k 7 https://a 1.2"})

    def test_a_hook_that_raises_awaits_or_answers_nonsense_answers_nothing(self):
        r = TestRoute.load(QUESTIONS, "/rt")
        for channel in ("raise:x", "async:x", "nonsense:x"):
            r.logs.clear()
            self.assertEqual(r.subscribe(channel), {"verdict": "failed"}, channel)
            self.assertTrue(any(level == "error" and "on_subscribe" in line and "fails it" in line
                                for level, line in r.logs), r.logs)
        self.assertEqual(r.client_publish("object:x", {}), {"verdict": "failed"})
        self.assertTrue(any("json.dumps(value)" in line for _, line in r.logs), r.logs)
        # The instance goes on.
        self.assertEqual(r.subscribe("ok:x"), {"verdict": "allow"})

    def test_a_handler_without_the_hooks_answers_as_rusts_defaults(self):
        r = TestRoute.load(EXAMPLES / "echo.py", "/rt")
        self.assertEqual(r.subscribe("a"), {"verdict": "allow"})
        self.assertEqual(r.client_publish("a", 1), {"verdict": "pass"})
        self.assertEqual(r.pusher_connect("/app/k"), {"verdict": "allow"})
        self.assertEqual(r.pusher_subscribe("private-a", auth="k:s", signature="failed"),
                         {"verdict": "allow"})
        self.assertEqual(r.pusher_client_event("private-a", "client-x", 1), {"verdict": "pass"})


class Pusher(unittest.TestCase):
    def setUp(self):
        self.r = TestRoute.load(FIXTURES / "pusher-gate.py", "/app/{key}")

    def sub(self, channel, auth, signature):
        return self.r.pusher_subscribe(channel, "1.2", auth=auth, signature=signature)

    def test_a_jwt_authorises_a_presence_channel_with_its_member(self):
        token = jwt({"sub": "ann", "name": "Ann", "channels": ["presence-room*"], "iat": 1,
                     "exp": 2})
        d = self.sub("presence-room-1", token, "failed")
        self.assertEqual(d["verdict"], "authorise", d)
        self.assertEqual(json.loads(d["channel_data"]),
                         {"user_id": "ann", "user_info": {"name": "Ann"}})
        self.assertEqual(self.sub("private-room-1", jwt({"channels": ["private-*"], "iat": 1,
                                                          "exp": 2}), "failed"),
                         {"verdict": "authorise", "channel_data": None})
        self.assertEqual(self.sub("presence-other", token, "failed")["code"], 403)
        forged = token[:-1] + ("B" if token.endswith("A") else "A")
        self.assertEqual(self.sub("presence-room-1", forged, "failed"),
                         {"verdict": "refuse", "code": 401, "message": "JWT signature mismatch"})
        self.assertEqual(self.sub("presence-room-1", jwt({"channels": ["*"], "iat": 2, "exp": 2}),
                                  "failed")["message"], "JWT without a valid iat/exp")
        self.assertEqual(self.sub("private-banned-x", "", "passed"),
                         {"verdict": "refuse", "code": 403, "message": "this channel is closed"})
        self.assertEqual(self.sub("private-x", "k:s", "passed"), {"verdict": "allow"})
        self.assertEqual(self.sub("public", "", "none"), {"verdict": "allow"})
        self.assertEqual(self.sub("private-trap-1", "", "none"), {"verdict": "failed"})

    def test_a_suspended_tenant_and_client_events(self):
        r = self.r
        self.assertEqual(r.pusher_connect("/app/k?protocol=7", headers="host: x"),
                         {"verdict": "allow"})
        self.assertEqual(r.pusher_connect("/suspended/app/k?protocol=7"),
                         {"verdict": "refuse", "code": 4003,
                          "message": "this tenant is suspended"})

        def event(data, name="client-msg"):
            return r.pusher_client_event("private-x", name, data)
        self.assertEqual(event("buy spam"), {"verdict": "drop", "code": 0})
        self.assertEqual(event("!loud"), {"verdict": "drop", "code": 4301})
        self.assertEqual(event("  hi  "),
                         {"verdict": "replace", "text": '{"checked":true,"text":"hi"}'})
        self.assertEqual(event({"n": 1}), {"verdict": "replace", "text": '{"checked":true,"n":1}'})
        self.assertEqual(event(b"{"), {"verdict": "pass"}, "data that is not JSON passes")
        self.assertEqual(event(1, "client-trap"), {"verdict": "failed"})


class CheckState(unittest.TestCase):
    def test_json_the_sdk_wrote_passes_and_check_state_refuses_what_it_cannot_serve(self):
        r = TestRoute.load(FIXTURES / "state-check.py", "/s")
        got = r.check_state([{"v": 2, "nick": "a", "count": 3}, 7, {"v": 1},
                             b"\x01\x00{}"])
        self.assertIsNone(got[0])
        self.assertEqual(got[1], "state 7 is not version 2")
        self.assertEqual(got[2], 'state {"v":1} is not version 2')
        self.assertIn("not JSON", got[3])
        counter = TestRoute.load(EXAMPLES / "counter.py", "/c")
        self.assertEqual(counter.check_state([7, {"any": True}]), [None, None])
        self.assertIn("not UTF-8", counter.check_state([b"\xff"])[0])
        c = r.connect("/s?nick=ann")
        r.send_text(c, "x")
        self.assertEqual(r.texts(c), ['py {"v":2,"nick":"ann","count":1}'])
        self.assertEqual(r.check_state([r.state(c)]), [None])


if __name__ == "__main__":
    unittest.main()
