"""A Python `websockets` peer with permessage-deflate for routes that
deliver messages from elsewhere (relay, pubsub, guests): connects, prints
"ready", sends SEND JSON-like messages, receives RECV messages, and prints
them as one JSON line with whether each arrived compressed (RSV1 as read
off the wire, before websockets inflates it).

Usage: python deflate_peer.py URL takeover|none SEND RECV [open]
("open": ready once open, without waiting for a pong)
"""

import asyncio
import json
import sys

from websockets.asyncio.client import connect
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory
from websockets.frames import Opcode


def message(i, size):
    parts, n = [], 0
    while sum(map(len, parts)) < size:
        parts.append(json.dumps({"from": "py", "seq": i, "n": n, "px": n * 7919 % 1000}))
        n += 1
    return "".join(parts)[:size]


async def main(url, mode, send, recv, wait_pong):
    none = mode == "none"
    factory = ClientPerMessageDeflateFactory(
        server_no_context_takeover=none,
        client_no_context_takeover=none,
        client_max_window_bits=True,
    )
    async with connect(url, extensions=[factory], compression=None,
                       max_size=2**22, open_timeout=10) as ws:
        extensions = ws.response.headers.get("Sec-WebSocket-Extensions", "")
        rsv1 = []
        for ext in ws.protocol.extensions:
            decode = ext.decode

            def seen(frame, *, max_size=None, decode=decode):
                if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
                    rsv1.append(frame.rsv1)
                return decode(frame, max_size=max_size)

            ext.decode = seen
        # Answered once the gateway's loop runs the connection: a native
        # pubsub subscriber is in its topic by then. (An unpaired relay
        # connection is not read: it is ready once open.)
        if wait_pong:
            await asyncio.wait_for(await ws.ping(), 10)
        print("ready", flush=True)
        sizes = [40, 300, 1024, 5000]
        sent = [message(i, sizes[i % len(sizes)]) for i in range(send)]
        for m in sent:
            await ws.send(m)
        received = []
        for _ in range(recv):
            got = await asyncio.wait_for(ws.recv(), 10)
            received.append(got if isinstance(got, str) else got.hex())
        await ws.close()
    print(json.dumps({"extensions": extensions, "sent": sent, "received": received,
                      "rsv1": rsv1}))
    return 0


sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                          sys.argv[5:] != ["open"])))
