"""A client of its own for scripts/release-test.sh (Python's standard
library only, nothing of weir's): waits for GET /readyz to say 200, then
upgrades to each WebSocket path given and checks that a text message comes
back unchanged.

    python3 release_probe.py HOST:PORT DEADLINE_SECONDS SERVER_PID PATH...

It gives up at once when SERVER_PID (the process serving) has exited.
"""

import base64
import hashlib
import os
import socket
import struct
import sys
import time

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
STEP_SECONDS = 20


def connect(addr):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=STEP_SECONDS)
    s.settimeout(STEP_SECONDS)
    return s


def read_head(s):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            raise AssertionError(f"connection closed before the response head: {data!r}")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, value = line.split(":", 1)
        headers[name.strip().lower()] = value.strip()
    return status, headers, rest


def running(pid):
    """Whether `pid` runs (an exited child its parent has not reaped yet
    is a zombie: state Z)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def readyz(addr, deadline, pid):
    """GET /readyz until 200 (or the deadline); its body."""
    last = "nothing listened"
    while time.monotonic() < deadline:
        if not running(pid):
            raise AssertionError(f"the server (pid {pid}) exited; last: {last}")
        try:
            s = connect(addr)
        except OSError as e:
            last = str(e)
            time.sleep(0.1)
            continue
        with s:
            s.sendall(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            status, _, rest = read_head(s)
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                rest += chunk
        if status == 200:
            return rest.decode()
        last = f"{status} {rest!r}"
        time.sleep(0.1)
    raise AssertionError(f"/readyz never said 200: {last}")


def frame(opcode, payload):
    """A masked client frame (RFC 6455 section 5.2), payload < 64 KiB."""
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | opcode])
    head += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + masked


def read_frame(s, buf):
    def need(n):
        nonlocal buf
        while len(buf) < n:
            chunk = s.recv(65536)
            if not chunk:
                raise AssertionError("connection closed mid-frame")
            buf += chunk

    need(2)
    first, second = buf[0], buf[1]
    assert second & 0x80 == 0, "a server frame is never masked"
    n, at = second & 0x7F, 2
    if n == 126:
        need(4)
        n, at = struct.unpack("!H", buf[2:4])[0], 4
    elif n == 127:
        need(10)
        n, at = struct.unpack("!Q", buf[2:10])[0], 10
    need(at + n)
    payload, buf = buf[at : at + n], buf[at + n :]
    return first, payload, buf


def echo(addr, path):
    key = base64.b64encode(os.urandom(16))
    with connect(addr) as s:
        s.sendall(
            b"GET " + path.encode() + b" HTTP/1.1\r\nHost: localhost\r\n"
            b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        status, headers, buf = read_head(s)
        assert status == 101, f"{path}: upgrade answered {status}"
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()
        assert headers.get("sec-websocket-accept") == accept, f"{path}: {headers}"
        text = f"hello {path} from the release test".encode()
        s.sendall(frame(0x1, text))
        first, payload, buf = read_frame(s, buf)
        assert (first, payload) == (0x81, text), f"{path}: got {first:#x} {payload!r}"
        s.sendall(frame(0x8, struct.pack("!H", 1000)))
        first, payload, buf = read_frame(s, buf)
        assert first == 0x88 and payload[:2] == struct.pack("!H", 1000), f"{path}: close {payload!r}"


def main():
    addr, seconds, pid, paths = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    started = time.monotonic()
    body = readyz(addr, started + seconds, pid)
    print(f"release_probe: /readyz 200 {body.strip()!r} after {time.monotonic() - started:.1f} s")
    for path in paths:
        echo(addr, path)
        print(f"release_probe: {path}: upgraded, echoed, closed 1000")


if __name__ == "__main__":
    main()
