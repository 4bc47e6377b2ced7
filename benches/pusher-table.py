#!/usr/bin/env python3
"""pusher-table.py RAW.jsonl: the markdown table of benches/pusher.sh.

One row per setup and figure: each server's median over its ok runs (with
the range), how many runs were ok, and the ratio weir ÷ each peer taken per
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
    servers = ["weir"] + [s for s in dict.fromkeys(r["server"] for r in rows) if s != "weir"]
    peers = servers[1:]
    runs = sorted({r["run"] for r in rows})
    print()
    print("| figure | setup | " + " | ".join(f"{s} median (range)" for s in servers)
          + " | ok runs " + " / ".join(servers) + " | "
          + " | ".join(f"weir ÷ {p} per run: median (range)" for p in peers) + " |")
    print("|---|---|" + "---|" * (len(servers) + 1 + len(peers)))
    for scen, key, label, d in FIGURES:
        for setup in setups:
            vals, oks = {}, {}
            for s in servers:
                rs = [by.get((setup, scen, s, n)) for n in runs]
                rs = [r for r in rs if r is not None]
                ok = [r for r in rs if r.get("ok") and r.get(key) is not None]
                vals[s] = [r[key] for r in ok]
                oks[s] = f"{len(ok)}/{len(rs)}"
            if not any(by.get((setup, scen, s, n)) for s in servers for n in runs):
                continue
            ratios = {}
            for p in peers:
                ratios[p] = []
                for n in runs:
                    a, b = by.get((setup, scen, "weir", n)), by.get((setup, scen, p, n))
                    if a and b and a.get("ok") and b.get("ok") and a.get(key) and b.get(key):
                        ratios[p].append(a[key] / b[key])
            print(f"| {label} | {setup} | " + " | ".join(spread(vals[s], d) for s in servers)
                  + " | " + " / ".join(oks[s] for s in servers) + " | "
                  + " | ".join(spread(ratios[p], 2) for p in peers) + " |")
    failed = [r for r in rows if not r.get("ok")]
    if failed:
        print()
        print("Failed measurements (no figure in the table):")
        for r in failed:
            what = {k: r.get(k) for k in ("subscribed", "complete", "missing_members", "lost", "wrong", "secs", "server_cpu_s") if k in r}
            errs = "; ".join(r.get("errors") or [])[:300]
            print(f"- run {r['run']} {r['setup']} {r['scenario']} {r['server']}: {json.dumps(what)} {errs}")


if __name__ == "__main__":
    main(sys.argv[1])
