#!/usr/bin/env python3
"""benches/fleet-deploy.py — fleet deploy time: from the deploy request to
every node serving the new version (issue 41), for 2 and 3 local nodes,
with and without the compile cache, against a local deploy to one node
without `[cluster]` (the peer, measured in the same run).

Each configuration starts a redis-server (fleet only; flushed between
configurations) and N `weir serve` nodes (1 worker each) serving the
guest route /g (examples/wasm/echo.wasm) with an admin listener. Every
node has one open WebSocket connection on /g. A deploy is `PUT
/routes/%2Fg/component` to node A, alternating json.wasm and echo.wasm;
from the moment the request is sent, each node's connection is probed
(`{"number": k}`: echo sends it back, json answers the next even number)
until every node answers with the new component. "all serving" is that
time; "PUT answered" is when node A answered the deploy.

Cache: `WEIR_CACHE_DIR` per node, warmed by deploying both components once
before measuring (so each measured deploy reads its compiled code back);
without: `WEIR_CACHE_DIR=""`, so every node compiles every deploy.

Configurations alternate within each run (order reversed every other run);
the ratio fleet ÷ local is computed within each run, then the median.

Usage: python3 benches/fleet-deploy.py [--runs 3] [--deploys 8] [--nodes 2,3]
Environment: WEIR_BIN (default $CARGO_TARGET_DIR/release/weir); redis-server
on PATH (scripts/redis.sh installs it).
"""

import argparse
import base64
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/weir-target"))
WEIR = os.environ.get("WEIR_BIN", os.path.join(TARGET, "release/weir"))
WASM = os.path.join(ROOT, "examples/wasm")
TOKEN = "fleet-bench-admin-token-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc):
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return
        except OSError:
            assert time.time() < deadline and proc.poll() is None, f"nothing on {port}"
            time.sleep(0.02)


def ws_connect(port, path):
    s = socket.create_connection(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(
        (f"GET {path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        assert chunk, "handshake failed"
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    s.settimeout(30)
    return [s, head.split(b"\r\n\r\n", 1)[1]]


def text_frame(payload):
    mask = os.urandom(4)
    assert len(payload) < 126
    return (bytes([0x81, 0x80 | len(payload)]) + mask
            + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def ask(conn, n):
    """Which component answered {"number": n} on `conn`."""
    s, buf = conn
    request = json.dumps({"number": n}).encode()
    s.sendall(text_frame(request))
    while len(buf) < 2 or len(buf) < 2 + (buf[1] & 0x7F):
        chunk = s.recv(4096)
        assert chunk, "connection closed"
        buf += chunk
    size = buf[1] & 0x7F
    assert buf[0] == 0x81 and size < 126, buf[:8]
    reply, conn[1] = buf[2:2 + size], buf[2 + size:]
    return "echo" if reply == request else "json"


def admin(port, method, path, body=b""):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request(method, path, body=body, headers={"Authorization": f"Bearer {TOKEN}"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


class Cluster:
    def __init__(self, dir, nodes, fleet, cache, redis_port):
        self.procs, self.ports, self.admins = [], [], []
        for i in range(nodes):
            port, admin_port = free_port(), free_port()
            ndir = os.path.join(dir, f"node{i}")
            os.makedirs(ndir, exist_ok=True)
            shutil.copy(os.path.join(WASM, "echo.wasm"), ndir)
            cluster = f'[cluster]\nredis = "redis://127.0.0.1:{redis_port}"\n\n' if fleet else ""
            with open(os.path.join(ndir, "routes.toml"), "w") as f:
                f.write(f'[server]\nlisten = "127.0.0.1:{port}"\nworkers = 1\n\n'
                        f'[admin]\nlisten = "127.0.0.1:{admin_port}"\ntoken_env = "WEIR_ADMIN_TOKEN"\n\n'
                        f'{cluster}[[route]]\npath = "/g"\nguest = "echo.wasm"\n')
            env = dict(os.environ, WEIR_ADMIN_TOKEN=TOKEN, RUST_LOG="error",
                       WEIR_CACHE_DIR=os.path.join(ndir, "cache") if cache else "")
            proc = subprocess.Popen([WEIR, "serve", os.path.join(ndir, "routes.toml")], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs.append(proc)
            self.ports.append(port)
            self.admins.append(admin_port)
        for proc, port, admin_port in zip(self.procs, self.ports, self.admins):
            wait_port(port, proc)
            wait_port(admin_port, proc)
        self.conns = [ws_connect(p, "/g") for p in self.ports]
        self.serving = "echo"
        self.n = 1

    def deploy(self, name):
        """Deploys `name` through node A; (PUT answered, all serving) in ms."""
        with open(os.path.join(WASM, f"{name}.wasm"), "rb") as f:
            wasm = f.read()
        answered = {}

        def put():
            t = time.perf_counter()
            status, body = admin(self.admins[0], "PUT", "/routes/%2Fg/component", wasm)
            assert status == 200, body
            answered["at"] = time.perf_counter() - t

        t0 = time.perf_counter()
        thread = threading.Thread(target=put)
        thread.start()
        pending = set(range(len(self.conns)))
        while pending:
            for i in list(pending):
                self.n += 2
                if ask(self.conns[i], self.n) == name:
                    pending.discard(i)
            assert time.perf_counter() - t0 < 60, f"nodes {pending} never served {name}"
        all_serving = time.perf_counter() - t0
        thread.join()
        self.serving = name
        return answered["at"] * 1000, all_serving * 1000

    def stop(self):
        for conn in self.conns:
            conn[0].close()
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def measure(config, redis_port, deploys):
    nodes, fleet, cache = config
    if fleet:
        subprocess.run(["redis-cli", "-p", str(redis_port), "FLUSHALL"], check=True,
                       stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="weir-fleet-bench.") as dir:
        c = Cluster(dir, nodes, fleet, cache, redis_port)
        try:
            if cache:
                c.deploy("json")
                c.deploy("echo")
            rows = [c.deploy("json" if k % 2 == 0 else "echo") for k in range(deploys)]
        finally:
            c.stop()
    return [r[0] for r in rows], [r[1] for r in rows]


def name(config):
    nodes, fleet, cache = config
    what = f"fleet, {nodes} nodes" if fleet else "local, 1 node"
    return f"{what}, {'cache' if cache else 'no cache'}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--deploys", type=int, default=8)
    ap.add_argument("--nodes", default="2,3")
    args = ap.parse_args()
    assert os.access(WEIR, os.X_OK), f"{WEIR}: build first (cargo build --release -p weir)"
    nodes = [int(n) for n in args.nodes.split(",")]
    configs = []
    for cache in (True, False):
        configs.append((1, False, cache))
        configs += [(n, True, cache) for n in nodes]
    redis_dir = tempfile.mkdtemp(prefix="weir-fleet-redis.")
    redis_port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no", "--dir", redis_dir],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = {c: {"put": [], "all": [], "ratio": []} for c in configs}
    try:
        wait_port(redis_port, redis)
        for run in range(args.runs):
            order = configs if run % 2 == 0 else configs[::-1]
            medians = {}
            for config in order:
                put, all_serving = measure(config, redis_port, args.deploys)
                results[config]["put"] += put
                results[config]["all"] += all_serving
                medians[config] = statistics.median(all_serving)
                print(f"run {run + 1} {name(config)}: all serving median "
                      f"{medians[config]:.1f} ms (PUT {statistics.median(put):.1f} ms)", flush=True)
            for config in configs:
                peer = (1, False, config[2])
                results[config]["ratio"].append(medians[config] / medians[peer])
    finally:
        redis.terminate()
        redis.wait()
        shutil.rmtree(redis_dir, ignore_errors=True)

    def p90(xs):
        return sorted(xs)[max(0, int(round(0.9 * len(xs))) - 1)]

    print()
    print("| configuration | PUT answered, median | all nodes serving, median | p90 | ÷ local (same cache), median of runs |")
    print("|---|---:|---:|---:|---:|")
    for config in configs:
        r = results[config]
        print(f"| {name(config)} | {statistics.median(r['put']):.1f} ms | "
              f"{statistics.median(r['all']):.1f} ms | {p90(r['all']):.1f} ms | "
              f"{statistics.median(r['ratio']):.2f}× |")


if __name__ == "__main__":
    main()
