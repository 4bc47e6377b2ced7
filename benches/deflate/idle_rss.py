"""RSS per idle permessage-deflate connection: opens N connections to a
weir echo route with the `websockets` client offering permessage-deflate,
has each echo one 1 KiB JSON-like message (so a takeover connection has
made its compressor and decompressor), lets them sit idle, and prints the
server's RSS growth per connection (from /proc/PID/status).

Usage: python idle_rss.py URL SERVER_PID N
Run with host/tests/clients/.venv/bin/python (scripts/test.sh makes it).
"""

import asyncio
import json
import sys

from websockets.asyncio.client import connect


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit("no VmRSS")


def message(i):
    return json.dumps([{"id": i * 100 + n, "px": (n * 7919) % 1000, "side": "buy"} for n in range(30)])[:1024]


async def main(url, pid, n):
    before = rss_kib(pid)
    conns = []
    for i in range(n):
        ws = await connect(url, compression="deflate", max_size=None, open_timeout=20, ping_interval=None)
        conns.append(ws)
    opened = rss_kib(pid)
    for i, ws in enumerate(conns):
        m = message(i)
        await ws.send(m)
        assert await asyncio.wait_for(ws.recv(), 20) == m
    await asyncio.sleep(1)
    after = rss_kib(pid)
    ext = conns[0].response.headers.get("Sec-WebSocket-Extensions")
    print(json.dumps({
        "url": url, "connections": n, "extension": ext,
        "rss_kib_before": before, "rss_kib_open": opened, "rss_kib_after_one_message": after,
        "kib_per_conn_open": round((opened - before) / n, 2),
        "kib_per_conn_after_one_message": round((after - before) / n, 2),
    }))
    for ws in conns:
        await ws.close()


asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
