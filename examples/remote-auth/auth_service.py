"""A tiny auth service for the remote-auth example: GET /auth?token=T
answers 200 with the user's name for a known token, 403 otherwise.
Tokens come from AUTH_TOKENS (token=user,...), default let-me-in=ann.
Run: python3 examples/remote-auth/auth_service.py [port]  (default 9003)."""

import http.server
import os
import sys
import urllib.parse

TOKENS = dict(
    pair.split("=", 1)
    for pair in os.environ.get("AUTH_TOKENS", "let-me-in=ann").split(",")
    if "=" in pair
)


class Auth(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        token = urllib.parse.parse_qs(url.query).get("token", [""])[0]
        user = TOKENS.get(token) if url.path == "/auth" else None
        body = (user or "forbidden").encode()
        self.send_response(200 if user else 403)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9003
    http.server.ThreadingHTTPServer(("127.0.0.1", port), Auth).serve_forever()
