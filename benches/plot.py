#!/usr/bin/env python3
"""benches/plot.py — SVG charts from benches/compare.sh raw results.

Usage: python3 benches/plot.py RAW.jsonl [RAW.jsonl ...] [--out DIR]

Reads the raw lines compare.sh keeps (/tmp/weir-compare.*.jsonl, one JSON
object per measurement) and writes, with no third-party packages:

  DIR/payload-sweep.svg  server CPU per message against payload size (the
                         sizeN echo scenarios), log-log, one line per server,
                         and below it weir/peer CPU per message (within-run
                         ratios, median), log x axis.
  DIR/native-vs-guest.svg  server CPU per message and msg/s for native /echo
                         and the guest routes (the `guest` scenario).

Only runs weir-load marked ok count; each point is the median of the runs.
DIR defaults to benches/charts.
"""
import json
import math
import os
import statistics
import sys
from collections import defaultdict

COLORS = {
    "weir": "#d62728", "uws": "#1f77b4", "bun": "#ff7f0e", "fastws": "#2ca02c",
    "tungstenite": "#9467bd", "ws": "#8c564b", "deno": "#17becf",
}
UNITS = {"KiB": 1024, "MiB": 1024 * 1024, "k": 1024, "m": 1024 * 1024}


def size_of(scenario):
    """size16k -> 16384; None for anything that is not a payload sweep point."""
    if not scenario.startswith("size"):
        return None
    tail = scenario[4:]
    for suffix, mult in UNITS.items():
        if tail.endswith(suffix) and tail[: -len(suffix)].isdigit():
            return int(tail[: -len(suffix)]) * mult
    return int(tail) if tail.isdigit() else None


def label_size(n):
    if n >= 1 << 20:
        return f"{n >> 20} MiB"
    if n >= 1 << 10:
        return f"{n >> 10} KiB"
    return f"{n} B"


def fmt_ns(v):
    if v >= 1e6:
        return f"{v / 1e6:g} ms"
    if v >= 1e3:
        return f"{v / 1e3:g} µs"
    return f"{v:g} ns"


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def load(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


class Svg:
    def __init__(self, w, h):
        self.w, self.h, self.parts = w, h, []

    def add(self, s):
        self.parts.append(s)

    def text(self, x, y, s, size=12, anchor="start", color="#222", weight="normal", rotate=None):
        rot = f' transform="rotate({rotate} {x:.1f} {y:.1f})"' if rotate is not None else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
                 f'fill="{color}" font-weight="{weight}"{rot}>{esc(s)}</text>')

    def line(self, x1, y1, x2, y2, color="#ccc", width=1, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                 f'stroke="{color}" stroke-width="{width}"{d}/>')

    def save(self, path):
        with open(path, "w") as f:
            f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.w}" height="{self.h}" '
                    f'viewBox="0 0 {self.w} {self.h}" font-family="sans-serif">\n')
            f.write(f'<rect width="{self.w}" height="{self.h}" fill="white"/>\n')
            f.write("\n".join(self.parts))
            f.write("\n</svg>\n")


def log_ticks(lo, hi):
    """Powers of ten (and 2, 5 between them when the range is short) in [lo, hi]."""
    ticks = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in ((1, 2, 5) if math.log10(hi / lo) < 3 else (1,)):
            v = m * 10 ** e
            if lo <= v <= hi:
                ticks.append(v)
    return ticks


def payload_sweep(rows, out):
    per = defaultdict(list)           # (size, server) -> cpu ns/msg of ok runs
    runs = defaultdict(dict)          # (size, run) -> server -> cpu
    for x in rows:
        n = size_of(x["scenario"])
        r = x["r"]
        if n is None or not r.get("ok") or not r.get("server_cpu_ns_per_msg"):
            continue
        per[(n, x["server"])].append(r["server_cpu_ns_per_msg"])
        runs[(n, x["run"], x.get("session", ""))][x["server"]] = r["server_cpu_ns_per_msg"]
    if not per:
        print("no payload sweep results (sizeN scenarios)", file=sys.stderr)
        return
    sizes = sorted({n for n, _ in per})
    servers = [s for s in COLORS if any((n, s) in per for n in sizes)]
    servers += sorted({s for _, s in per} - set(servers))
    med = {k: statistics.median(v) for k, v in per.items()}
    ratios = defaultdict(list)        # (size, peer) -> weir/peer within a run
    for (n, _, _), res in runs.items():
        if "weir" in res:
            for s, v in res.items():
                if s != "weir":
                    ratios[(n, s)].append(res["weir"] / v)
    rmed = {k: statistics.median(v) for k, v in ratios.items()}

    W, H = 820, 760
    L, R = 90, 150
    top = (60, 400)                   # y range of the upper panel
    bot = (470, 700)
    svg = Svg(W, H)
    svg.text(W / 2, 28, "Echo, 16 connections, 1 in flight: server CPU per message vs payload size",
             14, "middle", weight="bold")
    xlo, xhi = math.log2(sizes[0]), math.log2(sizes[-1])
    span = max(xhi - xlo, 1)
    X = lambda n: L + (math.log2(n) - xlo) / span * (W - L - R)
    vals = list(med.values())
    ylo, yhi = min(vals) / 1.3, max(vals) * 1.3
    Y = lambda v: top[1] - (math.log10(v) - math.log10(ylo)) / (math.log10(yhi) - math.log10(ylo)) * (top[1] - top[0])
    for t in log_ticks(ylo, yhi):
        svg.line(L, Y(t), W - R, Y(t), "#e5e5e5")
        svg.text(L - 6, Y(t) + 4, fmt_ns(t), 11, "end")
    for n in sizes:
        svg.line(X(n), top[0], X(n), top[1], "#f0f0f0")
        svg.text(X(n), top[1] + 16, label_size(n), 11, "middle")
        svg.line(X(n), bot[0], X(n), bot[1], "#f0f0f0")
        svg.text(X(n), bot[1] + 16, label_size(n), 11, "middle")
    svg.line(L, top[1], W - R, top[1], "#444")
    svg.line(L, top[0], L, top[1], "#444")
    svg.text(22, (top[0] + top[1]) / 2, "server CPU per message (log)", 12, "middle", rotate=-90)
    for i, s in enumerate(servers):
        pts = [(X(n), Y(med[(n, s)])) for n in sizes if (n, s) in med]
        c = COLORS.get(s, "#555")
        w = 3 if s == "weir" else 1.6
        svg.add(f'<polyline fill="none" stroke="{c}" stroke-width="{w}" points="'
                + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>')
        for x, y in pts:
            svg.add(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{c}"/>')
        ly = top[0] + 10 + i * 20
        svg.line(W - R + 14, ly, W - R + 38, ly, c, w)
        svg.text(W - R + 44, ly + 4, s, 12)

    # Lower panel: weir/peer CPU per message (< 1: weir cheaper).
    peers = [s for s in servers if s != "weir" and any((n, s) in rmed for n in sizes)]
    if peers:
        rv = [v for k, v in rmed.items() if k[1] in peers]
        rlo, rhi = min(min(rv), 0.5) / 1.15, max(max(rv), 2.0) * 1.15
        RY = lambda v: bot[1] - (math.log(v) - math.log(rlo)) / (math.log(rhi) - math.log(rlo)) * (bot[1] - bot[0])
        for t in (0.1, 0.2, 0.5, 1, 2, 5, 10):
            if rlo <= t <= rhi:
                svg.line(L, RY(t), W - R, RY(t), "#999" if t == 1 else "#e5e5e5", 1.5 if t == 1 else 1)
                svg.text(L - 6, RY(t) + 4, f"{t:g}×", 11, "end")
        svg.line(L, bot[1], W - R, bot[1], "#444")
        svg.line(L, bot[0], L, bot[1], "#444")
        svg.text(22, (bot[0] + bot[1]) / 2, "weir / peer CPU (log)", 12, "middle", rotate=-90)
        svg.text(L + 4, bot[0] - 8, "weir CPU per message ÷ peer's, same run (below 1: weir cheaper)", 12)
        for s in peers:
            pts = [(X(n), RY(rmed[(n, s)])) for n in sizes if (n, s) in rmed]
            c = COLORS.get(s, "#555")
            svg.add(f'<polyline fill="none" stroke="{c}" stroke-width="1.6" points="'
                    + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>')
            for x, y in pts:
                svg.add(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{c}"/>')
    svg.text(W / 2 - R / 2 + L / 2, H - 20, "payload size (log scale); median of the runs", 12, "middle")
    svg.save(out)
    print(f"wrote {out}")


def native_vs_guest(rows, out):
    per = defaultdict(lambda: defaultdict(list))   # label -> field -> values
    order = []
    args = {}
    for x in rows:
        if x["scenario"] != "guest" or not x["r"].get("ok"):
            continue
        lab = x["server"]
        if lab not in order:
            order.append(lab)
        r = x["r"]
        what = {"json": '{"number":n}', "binary": "4 B int32"}.get(
            r.get("mode"), "%s B %s" % (r.get("size"), "text" if r.get("text") else "binary"))
        args[lab] = "%s conns x %s in flight, %s" % (r.get("connections"), r.get("depth"), what)
        for f in ("server_cpu_ns_per_msg", "msgs_per_s", "p99_us"):
            if x["r"].get(f):
                per[lab][f].append(x["r"][f])
    if not order:
        print("no guest scenario results", file=sys.stderr)
        return
    med = {lab: {f: statistics.median(v) for f, v in d.items()} for lab, d in per.items()}
    W, H = 860, 120 + 46 * len(order)
    L, R = 240, 250
    svg = Svg(W, H)
    svg.text(W / 2, 28, "weir: native /echo vs guest routes — server CPU per message", 14, "middle", weight="bold")
    svg.text(W / 2, 46, "bars: server CPU ns/msg (median of the runs); right: msg/s", 12, "middle", "#555")
    vmax = max(m["server_cpu_ns_per_msg"] for m in med.values()) * 1.1
    X = lambda v: L + v / vmax * (W - L - R)
    y0 = 70
    step = 10 ** math.floor(math.log10(vmax / 2))
    t = 0
    while t <= vmax:
        svg.line(X(t), y0 - 6, X(t), y0 + 46 * len(order), "#eee")
        svg.text(X(t), y0 + 46 * len(order) + 16, fmt_ns(t) if t else "0", 11, "middle")
        t += step * (2 if vmax / step > 12 else 1)
    for i, lab in enumerate(order):
        m = med[lab]
        y = y0 + i * 46
        native = "native" in lab
        c = "#d62728" if native else "#1f77b4"
        v = m["server_cpu_ns_per_msg"]
        svg.add(f'<rect x="{L}" y="{y:.1f}" width="{X(v) - L:.1f}" height="30" fill="{c}"/>')
        svg.text(L - 8, y + 13, lab.replace("weir ", ""), 12, "end")
        svg.text(L - 8, y + 27, args.get(lab, ""), 10, "end", "#777")
        svg.text(X(v) + 6, y + 20, f"{v:,.0f} ns", 12)
        svg.text(W - R + 60, y + 20, f"{m.get('msgs_per_s', 0):,.0f} msg/s", 12)
    svg.save(out)
    print(f"wrote {out}")


def main(argv):
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "charts")
    paths = []
    i = 0
    while i < len(argv):
        if argv[i] == "--out":
            out_dir = argv[i + 1]
            i += 2
            continue
        paths.append(argv[i])
        i += 1
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    rows = []
    for k, p in enumerate(paths):
        for x in load([p]):
            x["session"] = k          # runs of different files are not paired
            rows.append(x)
    os.makedirs(out_dir, exist_ok=True)
    payload_sweep(rows, os.path.join(out_dir, "payload-sweep.svg"))
    native_vs_guest(rows, os.path.join(out_dir, "native-vs-guest.svg"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
