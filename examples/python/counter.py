"""Message counter: answers every message with how many messages this
connection has sent so far ("1", "2", ...). The count is the connection's
state: the SDK saves it in the gateway-held attachment after each change, so
it survives the instance being replaced (recycle_after, a fault, a deploy).
`?from=N` on the upgrade starts counting from N."""

import weir_guest


class Handler(weir_guest.Handler):
    def on_upgrade(self, req):
        start = req.query_param("from") or ""
        return weir_guest.Accept(state=int(start) if start.isdigit() else 0)

    def on_message(self, conn, msg):
        conn.state += 1
        conn.send_text(str(conn.state))
