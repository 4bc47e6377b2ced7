#!/usr/bin/env python3
"""benches/neighbours.py — native echo beside a misbehaving guest route.

One `weir serve` (one worker, pinned to CPU 0) serves native /echo and the
`faulty` fixture on /loud (default log budget: 200 lines/s, 256 KiB/s,
burst 1,000; `timeout = "100ms"`). Rounds alternate: weir-load echo 64 B ×
10 × 1 alone, then the same load while an attacker (a stdlib WebSocket
client on CPU 1) works on /loud:

- `--attack flood`: sends `print 2000 <1 KB>` as fast as it is answered —
  the debugging loop of issue 26;
- `--attack loop`: opens a connection, sends `loop` (the guest spins until
  its 100 ms deadline, and the connection is closed 1011), again and again
  — the attack of issue 12 — each time from another loopback address
  (127.0.0.2–251), so the route's back-off does not stop it;
- `--attack loop-one-ip`: the same from one address, which the back-off
  refuses (429) after 3 trips.

Each round reports echo msg/s and p99, the bytes the gateway wrote to its
log, and the attacker's rate; the table gives medians and attack/alone
ratios measured in the same run.

Usage: python3 benches/neighbours.py [--attack flood|loop|loop-one-ip]
                                     [--rounds N] [--duration SECS]
Environment: WEIR_BIN, WEIR_LOAD (default $CARGO_TARGET_DIR/release/…),
WEIR_FAULTY (default examples/wasm/faulty.wasm).
"""

import argparse
import base64
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/weir-target"))
WEIR = os.environ.get("WEIR_BIN", os.path.join(TARGET, "release/weir"))
LOAD = os.environ.get("WEIR_LOAD", os.path.join(TARGET, "release/weir-load"))
FAULTY = os.environ.get("WEIR_FAULTY", os.path.join(ROOT, "examples/wasm/faulty.wasm"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ws_connect(port, path, source="127.0.0.1"):
    s = socket.create_connection(("127.0.0.1", port), source_address=(source, 0))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(
        (f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            raise RuntimeError("handshake failed")
        head += chunk
    if not head.startswith(b"HTTP/1.1 101"):
        s.close()
        return None, head
    return s, head.split(b"\r\n\r\n", 1)[1]


def text_frame(payload):
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x81])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def flood(port, stop, counter, _one_ip):
    """Sends `print 2000 <1 KB>` and waits for `printed`, until stopped;
    counts lines printed."""
    s, buf = ws_connect(port, "/loud")
    frame = text_frame(b"print 2000 " + b"k" * 1000)
    while not stop.is_set():
        s.sendall(frame)
        while b"printed" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                return
            buf += chunk
        buf = buf.split(b"printed", 1)[1]
        counter[0] += 2000
    s.close()


def loop(port, stop, counter, one_ip):
    """Opens a connection, sends `loop`, waits for the gateway to close it;
    again until stopped. Counts the calls that ran into the deadline."""
    frame = text_frame(b"loop")
    n = 0
    while not stop.is_set():
        source = "127.0.0.1" if one_ip else f"127.0.0.{2 + n % 250}"
        n += 1
        s, rest = ws_connect(port, "/loud", source)
        if s is None:  # refused (429): the back-off works; try again later
            time.sleep(0.05)
            continue
        s.sendall(frame)
        s.settimeout(5)
        try:
            while s.recv(65536):
                pass
        except OSError:
            pass
        s.close()
        counter[0] += 1


def echo_round(port, duration):
    out = subprocess.run(
        ["taskset", "-c", "1", LOAD, "echo", "--url", f"ws://127.0.0.1:{port}/echo",
         "-c", "10", "-p", "1", "--warmup", "1s", "--duration", f"{duration}s"],
        capture_output=True, text=True, check=True,
    ).stdout
    line = next(l for l in out.splitlines() if l.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    assert result["ok"], result
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--attack", choices=["flood", "loop", "loop-one-ip"], default="flood")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=5)
    args = p.parse_args()
    port = free_port()
    work = tempfile.mkdtemp(prefix="weir-log-flood-")
    routes = os.path.join(work, "routes.toml")
    with open(routes, "w") as f:
        f.write(f'[server]\nlisten = "127.0.0.1:{port}"\nworkers = 1\n\n'
                f'[[route]]\npath = "/echo"\nnative = "echo"\n\n'
                f'[[route]]\npath = "/loud"\nguest = "{FAULTY}"\ntimeout = "100ms"\n')
    log_path = os.path.join(work, "weir.log")
    log = open(log_path, "wb")
    weir = subprocess.Popen(["taskset", "-c", "0", WEIR, "serve", routes],
                            stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.time() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                assert time.time() < deadline and weir.poll() is None, "weir did not start"
                time.sleep(0.05)
        attack = flood if args.attack == "flood" else loop
        unit = "lines printed" if args.attack == "flood" else "deadline trips"
        rows = {"alone": [], "attack": []}
        for r in range(args.rounds):
            for mode in (("alone", "attack") if r % 2 == 0 else ("attack", "alone")):
                stop, counter = threading.Event(), [0]
                flooder = None
                if mode == "attack":
                    flooder = threading.Thread(
                        target=attack, args=(port, stop, counter, args.attack == "loop-one-ip"))
                    flooder.start()
                before, t0 = os.path.getsize(log_path), time.time()
                result = echo_round(port, args.duration)
                log_bytes = os.path.getsize(log_path) - before
                secs = time.time() - t0
                stop.set()
                if flooder:
                    flooder.join()
                rows[mode].append((result["msgs_per_s"], result["p99_us"], log_bytes / secs,
                                   counter[0] / secs))
                print(f"round {r + 1} {mode:6}: {result['msgs_per_s']:>9.0f} msg/s, p99 "
                      f"{result['p99_us']:>8.1f} us, log {log_bytes / secs / 1024:8.1f} KiB/s, "
                      f"{unit} {counter[0] / secs:>9.1f}/s", flush=True)
        med = {m: [statistics.median(col) for col in zip(*v)] for m, v in rows.items()}
        print(f"\nattack: {args.attack}\n")
        print(f"| load | echo msg/s | echo p99 µs | gateway log KiB/s | {unit} /s |")
        print("|---|---|---|---|---|")
        for m in ("alone", "attack"):
            a = med[m]
            print(f"| {m} | {a[0]:,.0f} | {a[1]:,.1f} | {a[2] / 1024:,.1f} | {a[3]:,.1f} |")
        print(f"\nattack/alone: msg/s {med['attack'][0] / med['alone'][0]:.2f}, "
              f"p99 {med['attack'][1] / med['alone'][1]:.2f}")
    finally:
        weir.terminate()
        weir.wait(timeout=20)
        log.close()


if __name__ == "__main__":
    sys.exit(main())
