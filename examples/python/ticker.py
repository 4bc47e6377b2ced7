"""Ticker: a route timer polls an HTTP endpoint (TICKER_URL below, which
the route's `allow_outbound` must allow) every second and publishes its
body to the topic `ticker` whenever it changed. Clients of the route are
subscribed to it and get the latest value on joining. The Python twin of
examples/ticker (Rust) and examples/js/ticker.js.

The timer and the request are the route's own (route.set_timer,
route.fetch), not a connection's: the gateway holds the timer, so it keeps
firing when the instance that set it is replaced (the new one gets it in
on_timer). The last value is kept in the route's store (`kv`), which also
keeps instances on different workers from publishing the same change
twice."""

import weir_guest
from weir_guest import FetchError, kv, route

TICKER_URL = "http://127.0.0.1:9002/ticker.txt"
POLL_EVERY = 1.0
"""How often the endpoint is polled (seconds)."""

# This instance keeps a poll going (started by its first client).
polling = False


async def poll():
    global polling
    polling = True
    route.set_timer(POLL_EVERY)
    try:
        r = await route.fetch(TICKER_URL)
    except FetchError:
        return  # the next poll tries again
    if not r.ok:
        return
    value = r.text.strip()
    if kv.get_text("last") == value:
        return
    kv.set("last", value)
    route.publish("ticker", value)


class Handler(weir_guest.Handler):
    def on_open(self, conn):
        global polling
        conn.subscribe("ticker")
        last = kv.get_text("last")
        if last is not None:
            conn.send_text(last)
        if not polling:
            polling = True
            route.set_timer(0)

    def on_message(self, conn, msg):
        pass

    # Every route timer, whichever instance set it.
    def on_timer(self, target, tag):
        if target is route:
            return poll()
