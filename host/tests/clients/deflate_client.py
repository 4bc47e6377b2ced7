"""A Python `websockets` client with permessage-deflate: sends JSON-like
messages of several sizes to an echo route, checks each echo, and prints
what it negotiated as one JSON line.

Usage: python deflate_client.py URL takeover|none
"""

import asyncio
import json
import sys

from websockets.asyncio.client import connect
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory


def message(i, size):
    parts, n = [], 0
    while sum(map(len, parts)) < size:
        parts.append(json.dumps({"seq": i, "n": n, "price": n * 7919 % 1000}))
        n += 1
    return "".join(parts)[:size]


async def main(url, mode):
    none = mode == "none"
    factory = ClientPerMessageDeflateFactory(
        server_no_context_takeover=none,
        client_no_context_takeover=none,
        client_max_window_bits=True,
        compress_settings={"memLevel": 8},
    )
    async with connect(url, extensions=[factory], compression=None,
                       max_size=2**22, open_timeout=10) as ws:
        extensions = ws.response.headers.get("Sec-WebSocket-Extensions", "")
        sizes = [10, 300, 1024, 16384, 100000]
        for i in range(20):
            m = message(i, sizes[i % len(sizes)])
            await ws.send(m)
            got = await asyncio.wait_for(ws.recv(), 10)
            if got != m:
                print(json.dumps({"error": f"echo {i} differs"}))
                return 1
        # Binary too.
        blob = bytes(range(256)) * 40
        await ws.send(blob)
        if await asyncio.wait_for(ws.recv(), 10) != blob:
            print(json.dumps({"error": "binary echo differs"}))
            return 1
    print(json.dumps({"extensions": extensions, "echoed": 21,
                      "negotiated": [type(e).__name__ for e in ws.protocol.extensions]}))
    return 0


sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
