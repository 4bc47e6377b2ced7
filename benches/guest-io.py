#!/usr/bin/env python3
"""benches/guest-io.py — guest outbound I/O against the same logic in native Rust.

Servers, each on CPU 0 alone (`weir serve --workers 1`: its worker and its
guest I/O thread share that core; the native peer is one thread):

- weir: the `fetch-echo` fixture (examples/fixtures/fetch-echo) on /fetch;
- native: benches/peers/rust `fetch-native`, the same logic on tokio,
  tokio-tungstenite and hyper's pooled client.

Both call the same HTTP backend (benches/peers/rust `http-backend`, on
CPU 1 with the client): every message is POSTed to it and its answer is
the reply, so weir-load's byte-for-byte echo check verifies the whole path.

Rounds alternate the two servers (the order flips every round):

- fetch: weir-load echo, 64 B binary, `-c` connections x 1 in flight; the
  server's CPU per message (utime+stime from /proc over the measured
  window, all threads), msg/s, p99; the backend's CPU per message beside it
  (its /proc time over the whole run, warm-up included, over the messages
  of the whole run at the measured rate: an estimate, shown apart);
- timers: one connection sends `timers 10000 MS` and waits for `done
  10000`, `--sets` times; the server's CPU over all sets (/proc, 10 ms
  ticks, hence several sets) per 10,000 timers set and fired.

The table gives medians and weir/native ratios computed within each round.

Usage: python3 benches/guest-io.py [--rounds N] [--duration SECS] [-c CONNS]
                                   [--sets N] [--timer-ms MS]
Environment: WEIR_BIN, WEIR_LOAD (default $CARGO_TARGET_DIR/release/...),
PEERS_BIN (where fetch-native and http-backend are; default
${PEERS_TARGET:-$CARGO_TARGET_DIR}/release: `bash benches/peers/install.sh`
or `cargo build --release --manifest-path benches/peers/rust/Cargo.toml`),
WEIR_FETCH_ECHO (default examples/wasm/fetch-echo.wasm).
"""

import argparse
import base64
import json
import os
import socket
import statistics
import struct
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/weir-target"))
WEIR = os.environ.get("WEIR_BIN", os.path.join(TARGET, "release/weir"))
LOAD = os.environ.get("WEIR_LOAD", os.path.join(TARGET, "release/weir-load"))
PEERS = os.environ.get(
    "PEERS_BIN", os.path.join(os.environ.get("PEERS_TARGET", TARGET), "release"))
GUEST = os.environ.get("WEIR_FETCH_ECHO", os.path.join(ROOT, "examples/wasm/fetch-echo.wasm"))
TICK_NS = 1e9 / os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc):
    deadline = time.time() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return
        except OSError:
            assert time.time() < deadline and proc.poll() is None, f"nothing on {port}"
            time.sleep(0.05)


def cpu_ns(pid):
    """utime + stime of every thread of `pid`, in ns."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_NS


def ws_connect(port, path):
    s = socket.create_connection(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(
        (f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        assert chunk, "handshake failed"
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return s, head.split(b"\r\n\r\n", 1)[1]


def text_frame(payload):
    mask = os.urandom(4)
    assert len(payload) < 126
    return (bytes([0x81, 0x80 | len(payload)]) + mask
            + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def read_text(s, buf):
    """One unfragmented server text frame (< 126 bytes) and the rest."""
    while len(buf) < 2 or len(buf) < 2 + (buf[1] & 0x7F):
        chunk = s.recv(4096)
        assert chunk, "connection closed"
        buf += chunk
    n = buf[1] & 0x7F
    assert buf[0] == 0x81 and n < 126, buf[:8]
    return buf[2:2 + n].decode(), buf[2 + n:]


def fetch_round(port, pid, backend_pid, args):
    before = cpu_ns(backend_pid)
    out = subprocess.run(
        ["taskset", "-c", "1", LOAD, "echo", "--url", f"ws://127.0.0.1:{port}/fetch",
         "-c", str(args.c), "-p", "1", "-s", "64", "--warmup", "2s",
         "--duration", f"{args.duration}s", "--server-pid", str(pid)],
        capture_output=True, text=True, check=False)
    line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line, out.stdout + out.stderr
    r = json.loads(line[len("RESULT "):])
    assert r["ok"], r
    msgs = r["msgs_per_s"] * (2 + args.duration)
    return (r["server_cpu_ns_per_msg"], r["msgs_per_s"], r["p99_us"],
            (cpu_ns(backend_pid) - before) / msgs)


def timer_round(port, pid, args):
    s, buf = ws_connect(port, "/fetch")
    s.settimeout(60)
    frame = text_frame(f"timers 10000 {args.timer_ms}".encode())
    before, t0 = cpu_ns(pid), time.time()
    for _ in range(args.sets):
        s.sendall(frame)
        reply, buf = read_text(s, buf)
        assert reply == "done 10000", reply
    cpu = (cpu_ns(pid) - before) / args.sets
    wall = (time.time() - t0) / args.sets
    s.close()
    return cpu, wall


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--duration", type=int, default=5)
    p.add_argument("-c", type=int, default=50)
    p.add_argument("--sets", type=int, default=10)
    p.add_argument("--timer-ms", type=int, default=10)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="weir-guest-io-")
    log = open(os.path.join(work, "log"), "wb")
    procs = []

    def start(cmd, port, cpu, env=None):
        proc = subprocess.Popen(["taskset", "-c", str(cpu)] + cmd, stdout=log, stderr=log,
                                env=dict(os.environ, **(env or {})))
        procs.append(proc)
        wait_port(port, proc)
        return proc

    try:
        backend_port, weir_port, native_port = free_port(), free_port(), free_port()
        backend = start([os.path.join(PEERS, "http-backend"), str(backend_port)], backend_port, 1)
        url = f"http://127.0.0.1:{backend_port}/echo"
        routes = os.path.join(work, "routes.toml")
        with open(routes, "w") as f:
            f.write(f'[server]\nworkers = 1\n\n[[route]]\npath = "/fetch"\nguest = "{GUEST}"\n'
                    f'allow_outbound = ["http://127.0.0.1:{backend_port}/"]\n'
                    f'outbound_max_concurrent = 1024\nenv = {{ BACKEND_URL = "{url}" }}\n')
        weir = start([WEIR, "serve", routes, "--listen", f"127.0.0.1:{weir_port}",
                      "--workers", "1"], weir_port, 0)
        native = start([os.path.join(PEERS, "fetch-native"), str(native_port)], native_port, 0,
                       {"BACKEND_URL": url})
        servers = {"weir": (weir_port, weir.pid), "native": (native_port, native.pid)}
        print(f"load: {os.getloadavg()}  ({work})", flush=True)
        fetch = {s: [] for s in servers}
        timers = {s: [] for s in servers}
        for r in range(args.rounds):
            order = ("weir", "native") if r % 2 == 0 else ("native", "weir")
            for name in order:
                port, pid = servers[name]
                fetch[name].append(fetch_round(port, pid, backend.pid, args))
                f = fetch[name][-1]
                print(f"round {r + 1} {name:6} fetch: {f[0]:8.0f} ns/msg server, {f[1]:8.0f} "
                      f"msg/s, p99 {f[2]:7.0f} us, backend ~{f[3]:6.0f} ns/msg", flush=True)
            for name in order:
                port, pid = servers[name]
                timers[name].append(timer_round(port, pid, args))
                t = timers[name][-1]
                print(f"round {r + 1} {name:6} timers: {t[0] / 1e6:7.2f} ms CPU per 10,000, "
                      f"{t[1] * 1e3:7.1f} ms wall per set", flush=True)
        print(f"load: {os.getloadavg()}\n")
        med = lambda xs: statistics.median(xs)
        ratio = lambda table, i: med([w[i] / n[i] for w, n in zip(table["weir"], table["native"])])
        print(f"fetch: 64 B binary, {args.c} connections x 1 in flight, {args.rounds} rounds "
              f"of {args.duration} s\n")
        print("| server | server CPU ns/msg | msg/s | p99 µs | backend CPU ns/msg (est.) |")
        print("|---|---|---|---|---|")
        for name in servers:
            cols = list(zip(*fetch[name]))
            print(f"| {name} | {med(cols[0]):,.0f} | {med(cols[1]):,.0f} | {med(cols[2]):,.0f} "
                  f"| {med(cols[3]):,.0f} |")
        print(f"\nweir/native (median of per-round ratios): CPU/msg {ratio(fetch, 0):.2f}x, "
              f"msg/s {ratio(fetch, 1):.2f}x, p99 {ratio(fetch, 2):.2f}x\n")
        print(f"timers: {args.sets} sets of 10,000 x {args.timer_ms} ms per round\n")
        print("| server | CPU ms per 10,000 timers | ns per timer | wall ms per set |")
        print("|---|---|---|---|")
        for name in servers:
            cols = list(zip(*timers[name]))
            print(f"| {name} | {med(cols[0]) / 1e6:.2f} | {med(cols[0]) / 1e4:,.0f} "
                  f"| {med(cols[1]) * 1e3:.1f} |")
        print(f"\nweir/native CPU per timer: {ratio(timers, 0):.2f}x")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=20)
        log.close()


if __name__ == "__main__":
    main()
