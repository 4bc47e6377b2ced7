#!/usr/bin/env python3
"""Writes the small hand-made seed corpus in fuzz/seeds/ (committed; rerun
after changing it). The growing corpus lives in fuzz/corpus/ (untracked)."""
import os, struct

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = bytes([0x37, 0xFA, 0x21, 0x3D])


def frame(op, payload, fin=True, key=KEY, rsv=0, masked=True):
    b0 = (0x80 if fin else 0) | rsv | op
    n = len(payload)
    if n < 126:
        head = bytes([b0, (0x80 if masked else 0) | n])
    elif n < 65536:
        head = bytes([b0, (0x80 if masked else 0) | 126]) + struct.pack(">H", n)
    else:
        head = bytes([b0, (0x80 if masked else 0) | 127]) + struct.pack(">Q", n)
    if not masked:
        return head + payload
    return head + key + bytes(c ^ key[i % 4] for i, c in enumerate(payload))


def write(target, name, data):
    d = os.path.join(HERE, "seeds", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# frame_stream: [mode, size, max_message, junk, n, chunks..., wire]
def stream(name, wire, mode=0, size=0, max_message=255, chunks=(), junk=0xA5):
    write("frame_stream", name, bytes([mode, size, max_message, junk, len(chunks), *chunks]) + wire)

stream("text_hello", frame(1, b"Hello"))
stream("text_hello_bytewise", frame(1, b"Hello"), chunks=[0])
stream("fragments_ping_between",
       frame(1, b"fra", fin=False) + frame(9, b"p") + frame(0, "gmént".encode()) + frame(8, b"\x03\xe8bye"),
       chunks=[2, 6, 0])
stream("binary_200_scaled", frame(2, bytes(range(200))), mode=1, size=0, chunks=[49, 99])
stream("binary_streamed_small_buffer", frame(2, bytes(300)) + frame(10, b""), mode=1, size=2, chunks=[30])
stream("long_length_partial", frame(2, b"")[:1] + bytes([0xFF]) + struct.pack(">Q", 1 << 20) + KEY + bytes(40))
stream("text_split_code_point", frame(1, "κόσμε€𝄞".encode()), mode=2, size=3, chunks=[0, 1, 2])
stream("bad_utf8", frame(1, b"ok\xed\xa0\x80more"), chunks=[3])
stream("unmasked", frame(1, b"hi", masked=False))
stream("rsv1", frame(1, b"hi", rsv=0x40))
stream("close_1005", frame(8, b"\x03\xed"))
stream("close_one_byte", frame(8, b"\x03"))
stream("too_big", frame(2, bytes(100)), max_message=2)
stream("continuation_first", frame(0, b"x"))
stream("ping_too_long", frame(9, bytes(126)))
# The inputs that found the decoder bugs (fuzz/README.md); the first one
# was close_one_byte above.
write("frame_stream", "regress_control_frame_streamed",
      bytes.fromhex("0203ffa503000102899137fa213df940ffffff02ef2940eeb127c3bf9b7e0abcb9a9"))
write("frame_stream", "regress_peer_closed_past_end",
      bytes.fromhex("00000d08828282828282828282828282828282828282828282820000000282"))

# unmask: arbitrary-derived input; any bytes do.
write("unmask", "short", bytes([1, 2, 3, 4, 3, 5, 0, 0, 0]) + b"hello")
write("unmask", "long", bytes([0x37, 0xFA, 0x21, 0x3D, 7, 1, 0, 0, 0]) + bytes(range(256)) * 2)

# upgrade_request
write("upgrade_request", "rfc_example",
      b"GET /chat HTTP/1.1\r\nHost: server.example.com\r\nUpgrade: websocket\r\n"
      b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
      b"Origin: http://example.com\r\nSec-WebSocket-Protocol: chat, superchat\r\n"
      b"Sec-WebSocket-Version: 13\r\n\r\n")
write("upgrade_request", "token_lists",
      b"GET /echo?x=1 HTTP/1.1\r\nHost: a\r\nupgrade: h2c, WebSocket\r\n"
      b"connection: keep-alive, UPGRADE\r\nsec-websocket-key:  AQIDBAUGBwgJCgsMDQ4PEA==  \r\n"
      b"sec-websocket-protocol: mqtt\r\nsec-websocket-protocol: v2.json , chat\r\n"
      b"sec-websocket-version: 13\r\n\r\n")
write("upgrade_request", "version_8",
      b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n")
write("upgrade_request", "post_http10",
      b"POST / HTTP/1.0\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")

# routes_file: first byte even = text, odd = generator input
with open(os.path.join(HERE, "..", "examples", "routes.toml"), "rb") as f:
    write("routes_file", "examples_routes", b"\x00" + f.read())
write("routes_file", "minimal", b"\x00[[route]]\npath = \"/echo\"\nnative = \"echo\"\n")
write("routes_file", "conflict",
      b"\x00[server]\nmax_message = \"1MiB\"\nsubprotocols = [\"chat\"]\n\n[[route]]\npath = \"/chat/{room}\"\n"
      b"guest = \"chat.wasm\"\nisolation = \"batch\"\nenv = { A = \"b\" }\n\n[[route]]\npath = \"/chat/*\"\nnative = \"relay\"\n")
write("routes_file", "generated", bytes([1]) + bytes(range(1, 200, 3)))
