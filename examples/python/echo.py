"""Echo: every message goes back to its sender, text as text and binary as
binary. The smallest handler the Python SDK allows (examples/echo in Rust)."""

import weir_guest


class Handler(weir_guest.Handler):
    def on_message(self, conn, msg):
        conn.send(msg)
