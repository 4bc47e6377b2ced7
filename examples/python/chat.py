"""Chat rooms on a route `/chat/{room}`: a connection joins the room its path
names (the topic is the room's name; topics belong to the route), and every
message it sends reaches every *other* member of the room, text as text,
binary as binary (examples/chat in Rust)."""

import weir_guest


class Handler(weir_guest.Handler):
    def on_open(self, conn):
        conn.subscribe(conn.param("room") or "lobby")

    def on_message(self, conn, msg):
        conn.publish(conn.param("room") or "lobby", msg)
