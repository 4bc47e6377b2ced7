"""Handler for tests/test_io.py: the async shapes a handler may use."""

import weir_guest
from weir_guest import fetch, gather, kv, route, sleep, FetchError, MAX_PENDING_REQUESTS


class Handler(weir_guest.Handler):
    async def on_upgrade(self, req):
        if req.query_param("twice") is not None:
            await fetch("http://auth/one")
            await fetch("http://auth/two")
            return True
        if req.query_param("sleep") is not None:
            await sleep(0.01)
            return True
        token = req.query_param("token")
        if token is None:
            return True
        r = await fetch(f"http://auth/check?token={token}",
                        headers={"authorization": "Bearer x"})
        if not r.ok:
            return 401
        protocols = req.protocols()
        return weir_guest.Accept(state={"user": r.json()["name"]},
                                 protocol=protocols[0] if protocols else None)

    def on_open(self, conn):
        conn.subscribe("all")

    async def on_message(self, conn, msg):
        word, _, arg = msg.partition(" ")
        if word == "json":
            r = await fetch("http://api/item", method="POST", json={"q": arg})
            conn.send_text(f"{r.status} {r.headers.get('x-count')} {r.json()['name']}")
        elif word == "both":
            a, b = await gather(fetch("http://api/a"), fetch("http://api/b"))
            conn.send_text(f"{a.text}+{b.text}")
        elif word == "fail":
            try:
                await fetch("http://api/down")
            except FetchError as e:
                conn.send_text(f"error {e.reason} {e.message}")
        elif word == "unawaited":
            fetch("http://api/nobody")  # not awaited
            conn.send_text("ok")
        elif word == "raise-later":
            await sleep(0)
            raise ValueError("later")
        elif word == "sleep":
            await sleep(float(arg))
            conn.send_text("slept")
        elif word == "ticks":
            def tick(c, tag):
                c.state = (c.state or 0) + 1
                c.send_text(f"tick {c.state}")
                if c.state < 3:
                    c.set_timer(0.1, tick)
            conn.set_timer(0.1, tick)
        elif word == "cancelled":
            for _ in range(5):
                conn.cancel_timer(conn.set_timer(0.02, lambda c, t: c.send_text("never")))
        elif word == "durable":
            conn.state = {"timer": conn.set_timer(float(arg))}
        elif word == "count":
            await sleep(0.001)
            conn.state = dict(conn.state or {}, n=(conn.state or {}).get("n", 0) + 1)
            conn.send_text(str(conn.state["n"]))
        elif word == "flood":
            futures = [fetch(f"http://api/{i}") for i in range(MAX_PENDING_REQUESTS + 2)]
            refused = [f.exception().reason for f in futures
                       if f.done() and f.exception() is not None]
            conn.send_text(",".join(refused))
        elif word == "kv":
            kv.set("a", "1")
            kv.set_json("b", {"x": 2}, ttl=1)
            kv.delete("c")
            conn.send_text(f"{kv.get_text('a')} {kv.get_json('d')}")
        elif word == "route-fetch":
            r = await route.fetch("http://api/route")
            route.publish("all", r.text)
        elif word == "route-timer":
            route.set_timer(float(arg), lambda r, tag: r.publish("all", "route timer"))
        elif word == "asyncio":
            import asyncio
            await asyncio.sleep(0)
        else:
            conn.send(msg)

    def on_timer(self, conn, tag):
        if conn is route:
            route.publish("all", "route on_timer")
        elif conn.state and conn.state.get("timer") == tag:
            conn.send_text("durable fired")

    def on_kv_error(self, route_, key, reason):
        route_.publish("all", f"refused {key.decode()} {reason}")
