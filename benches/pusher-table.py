#!/usr/bin/env python3
"""pusher-table.py RAW.jsonl: the markdown table of benches/pusher.sh.

One row per setup and figure: each server's median over its ok runs (with
the range), how many runs were ok, and the ratio weir ÷ sockudo taken per
run (both ok in that run), as a median and a range. Lower is better for
every figure but deliveries/s.
"""
import json
import statistics
import sys

FIGURES = [
    ("fanout", "server_cpu_ns_per_msg", "fanout: server CPU ns per delivered event", 0),
    ("fanout", "msgs_per_s", "fanout: deliveries/s (server on one core)", 0),
    ("client", "server_cpu_ns_per_client_event", "presence client events: server CPU ns per client event", 0),
    ("client", "server_cpu_ns_per_msg", "presence client events: server CPU ns per delivery", 0),
    ("idle", "bytes_per_conn", "idle subscribed connection: server RSS bytes", 0),
    ("storm", "secs", "presence storm: s until all know all members", 2),
    ("storm", "subscribed_secs", "presence storm: s until the last subscription_succeeded", 2),
    ("storm", "server_cpu_s", "presence storm: server CPU s", 2),
]
SERVERS = ["weir", "sockudo"]


def fmt(x, d):
    return "n/a" if x is None else f"{x:,.{d}f}"


def spread(xs, d):
    if not xs:
        return "n/a"
    m = statistics.median(xs)
    return f"{fmt(m, d)} ({fmt(min(xs), d)}–{fmt(max(xs), d)})" if len(xs) > 1 else fmt(m, d)


def main(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    by = {(r["setup"], r["scenario"], r["server"], r["run"]): r for r in rows}
    setups = list(dict.fromkeys(r["setup"] for r in rows))
    runs = sorted({r["run"] for r in rows})
    print()
    print("| figure | setup | weir median (range) | sockudo median (range) | ok runs weir / sockudo | weir ÷ sockudo per run: median (range) |")
    print("|---|---|---|---|---|---|")
    for scen, key, label, d in FIGURES:
        for setup in setups:
            vals, oks, ratios = {}, {}, []
            for s in SERVERS:
                rs = [by.get((setup, scen, s, n)) for n in runs]
                rs = [r for r in rs if r is not None]
                if not rs:
                    continue
                ok = [r for r in rs if r.get("ok") and r.get(key) is not None]
                vals[s] = [r[key] for r in ok]
                oks[s] = f"{len(ok)}/{len(rs)}"
            if not vals:
                continue
            for n in runs:
                a, b = by.get((setup, scen, "weir", n)), by.get((setup, scen, "sockudo", n))
                if a and b and a.get("ok") and b.get("ok") and a.get(key) and b.get(key):
                    ratios.append(a[key] / b[key])
            print(f"| {label} | {setup} | {spread(vals.get('weir', []), d)} | {spread(vals.get('sockudo', []), d)} | "
                  f"{oks.get('weir', '0/0')} / {oks.get('sockudo', '0/0')} | {spread(ratios, 2)} |")


if __name__ == "__main__":
    main(sys.argv[1])
