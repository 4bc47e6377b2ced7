#!/usr/bin/env python3
"""benches/rt-history.py: the read side of recovery (issue 37), through the
server API's `history` with `since` (the read a recovering subscribe makes):
publications returned per second and server CPU per publication, from a
channel holding N publications, on one node (memory) and on two nodes'
Redis (the stream, read by node B after node A published).

Not the centrifuge client's recovery itself (subscribe with `recover`):
this times the history read under it. One keep-alive HTTP/1.1 client, one
call in flight; its own CPU is printed so a client-bound run shows.

Usage: benches/rt-history.py [--pubs 1000] [--limit 300] [--seconds 4] [--rounds 3]
Environment: CARGO_TARGET_DIR (weir built in release).
"""
import argparse, http.client, json, os, resource, socket, subprocess, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("--pubs", type=int, default=1000)
ap.add_argument("--limit", type=int, default=300)  # the API answers at most 300 a call
ap.add_argument("--seconds", type=float, default=4.0)
ap.add_argument("--rounds", type=int, default=3)
args = ap.parse_args()
target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/weir-target"))
weir = os.environ.get("WEIR_BIN", f"{target}/release/weir")
KEY = "bench-api-key-0123456789abcdef"
HZ = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(p):
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", p), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens on {p}")


def cpu_ns(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) * 1_000_000_000 // HZ


def self_ns():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return int((r.ru_utime + r.ru_stime) * 1e9)


def start(tmp, name, api, redis=None):
    path = f"{tmp}/{name}.toml"
    with open(path, "w") as f:
        f.write(f"""[server]
workers = 1

[[route]]
path = "/rt/{{topic}}"
native = "pubsub"
realtime = true

[api]
listen = "127.0.0.1:{api}"
key_env = "WEIR_API_KEY"

[[namespaces]]
name = "hist"
history_size = {max(args.pubs, 1)}
history_ttl = "5m"
""")
        if redis:
            f.write(f'\n[cluster]\nredis = "redis://127.0.0.1:{redis}"\n')
    port = free_port()
    env = dict(os.environ, WEIR_API_KEY=KEY)
    p = subprocess.Popen(["taskset", "-c", "0", weir, "serve", path, "--listen", f"127.0.0.1:{port}"],
                         env=env, stdout=open(f"{tmp}/{name}.log", "w"), stderr=subprocess.STDOUT)
    wait_port(port)
    wait_port(api)
    return p


def call(conn, method, body):
    conn.request("POST", f"/api/{method}", json.dumps(body),
                 {"X-API-Key": KEY, "Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise SystemExit(f"{method}: {r.status} {data[:200]!r}")
    out = json.loads(data)
    if "error" in out:
        raise SystemExit(f"{method}: {out['error']}")
    return out["result"]


def measure(label, pub_api, read_api, pid, channel):
    c = http.client.HTTPConnection("127.0.0.1", pub_api)
    top = None
    for i in range(args.pubs):
        top = call(c, "publish", {"channel": channel, "data": f"{i:08x}" + "x" * 54})
    r = http.client.HTTPConnection("127.0.0.1", read_api)
    since = {"offset": 0, "epoch": top["epoch"]}
    want = min(args.pubs, args.limit)
    # Warm-up call, and the check that the read returns what was published.
    got = call(r, "history", {"channel": channel, "limit": args.limit, "since": since})
    pubs = got.get("publications", [])
    assert len(pubs) == want and pubs[0]["data"].startswith("00000000"), (len(pubs), pubs[:1])
    n = calls = 0
    s0, c0, t0 = cpu_ns(pid), self_ns(), time.monotonic()
    while time.monotonic() - t0 < args.seconds:
        got = call(r, "history", {"channel": channel, "limit": args.limit, "since": since})
        k = len(got.get("publications", []))
        if k != want:
            raise SystemExit(f"history returned {k} publications, expected {want}")
        n += k
        calls += 1
    secs = time.monotonic() - t0
    s1, c1 = cpu_ns(pid), self_ns()
    row = {"label": label, "calls": calls, "pubs_per_s": n / secs,
           "server_ns_per_pub": (s1 - s0) / n, "client_ns_per_pub": (c1 - c0) / n}
    print(f"  {label:<22} {row['pubs_per_s']:>11,.0f} publications/s  server {row['server_ns_per_pub']:7.0f} ns/pub"
          f"  client {row['client_ns_per_pub']:7.0f} ns/pub  ({calls} calls)", flush=True)
    return row


tmp = tempfile.mkdtemp(prefix="weir-rt-history.")
procs = []
rows = []
try:
    a1 = free_port()
    procs.append(start(tmp, "single", a1))
    for i in range(args.rounds):
        rows.append(measure("one node (memory)", a1, a1, procs[-1].pid, f"hist:one{i}"))
    procs.pop().terminate()
    subprocess.run(["bash", os.path.join(os.path.dirname(__file__), "..", "scripts", "redis.sh")], check=True)
    rport = free_port()
    redis = subprocess.Popen(["taskset", "-c", "0", "redis-server", "--port", str(rport), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no", "--dir", tmp],
                             stdout=open(f"{tmp}/redis.log", "w"), stderr=subprocess.STDOUT)
    procs.append(redis)
    wait_port(rport)
    aa, ab = free_port(), free_port()
    procs.append(start(tmp, "a", aa, rport))
    b = start(tmp, "b", ab, rport)
    procs.append(b)
    for i in range(args.rounds):
        rows.append(measure("node B (Redis stream)", aa, ab, b.pid, f"hist:two{i}"))
finally:
    for p in procs:
        p.terminate()
        p.wait()

print()
print(f"| history read (limit {args.limit}, {args.pubs} stored) | rounds | publications/s | server CPU ns/publication | client CPU ns/publication |")
print("|---|---|---|---|---|")
for label in dict.fromkeys(r["label"] for r in rows):
    rs = [r for r in rows if r["label"] == label]
    med = lambda k: sorted(r[k] for r in rs)[len(rs) // 2]
    print(f"| {label} | {len(rs)} | {med('pubs_per_s'):,.0f} | {med('server_ns_per_pub'):,.0f} | {med('client_ns_per_pub'):,.0f} |")
