"""Remote authentication before the 101: on_upgrade awaits an HTTP auth
service (AUTH_URL below, which the route's `allow_outbound` must allow),
`GET AUTH_URL?token=T` for the client's `?token=T`, and the answer decides:
200 accepts, with the response body (the user's name) as the connection's
state; any other status is a 401; no answer (refused, timeout, down) a
503. Then every message is echoed as `name: message`. The Python twin of
examples/remote-auth (Rust) and examples/js/remote-auth.js: the gateway
defers the upgrade on the one request on_upgrade awaits.

A service to try it with: `python3 examples/remote-auth/auth_service.py`
(port 9003; token `let-me-in` is user `ann`)."""

import re

import weir_guest
from weir_guest import Accept, FetchError, fetch

AUTH_URL = "http://127.0.0.1:9003/auth"
TOKEN = re.compile(r"[A-Za-z0-9-]+")


class Handler(weir_guest.Handler):
    async def on_upgrade(self, req):
        token = req.query_param("token") or ""
        if not TOKEN.fullmatch(token):
            return 401
        try:
            r = await fetch(f"{AUTH_URL}?token={token}")
        except FetchError:
            return 503
        if r.status != 200:
            return 401
        user = r.text.strip()
        return Accept(state=user) if user else 502

    def on_message(self, conn, msg):
        if not isinstance(msg, str):
            conn.close(1003, "text only")
            return
        conn.send_text(f"{conn.state}: {msg}")
