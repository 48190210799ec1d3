#!/usr/bin/env python3
"""Draw the training curve of tools/train/train.py as a standalone SVG (standard library only).

  python3 tools/train/plot_loss.py tools/train/results/train_log.csv docs/img/loss.svg \
      [--compare tools/train/results/attempt1_train_log.csv --compare-label "..."]

x axis: tokens seen (millions); y axis: cross-entropy (nats/token). Solid: training loss (mean of
each logging interval); dots + line: in-domain validation loss; the optional --compare run is
drawn in grey.
"""
import argparse
import csv
import math


def read(path):
    tr, va = [], []
    with open(path) as f:
        for r in csv.DictReader(f):
            x = float(r["tokens"]) / 1e6
            if r.get("train_loss"):
                tr.append((x, float(r["train_loss"])))
            if r.get("val_loss"):
                va.append((x, float(r["val_loss"])))
    return tr, va


def nice_ticks(lo, hi, n=6):
    span = hi - lo
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    t = math.ceil(lo / step) * step
    out = []
    while t <= hi + 1e-9:
        out.append(round(t, 10))
        t += step
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("svg")
    ap.add_argument("--title", default="weft-tiny-hybrid (20.5M params) — training on 2.73M tokens, ctx 4096")
    ap.add_argument("--compare", default=None)
    ap.add_argument("--compare-label", default="first attempt")
    ap.add_argument("--skip-first", type=int, default=2, help="leave out the first N training points (loss ~9)")
    a = ap.parse_args()

    tr, va = read(a.csv)
    tr = tr[a.skip_first:]
    series = [tr, va]
    ctr, cva = ([], [])
    if a.compare:
        ctr, cva = read(a.compare)
        ctr = ctr[a.skip_first:]
        series += [ctr, cva]
    xs = [p[0] for s in series for p in s]
    ys = [p[1] for s in series for p in s]
    x0, x1 = 0.0, max(xs)
    y0, y1 = math.floor(min(ys) * 2) / 2, math.ceil(min(max(ys), 8.0) * 2) / 2

    W, H = 760, 440
    L, R, T, B = 64, 20, 40, 56
    pw, ph = W - L - R, H - T - B

    def X(x):
        return L + (x - x0) / (x1 - x0) * pw

    def Y(y):
        y = min(max(y, y0), y1)
        return T + (1 - (y - y0) / (y1 - y0)) * ph

    def path(pts):
        return " ".join(f"{'M' if i == 0 else 'L'}{X(x):.1f},{Y(y):.1f}" for i, (x, y) in enumerate(pts))

    o = []
    o.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
             f'font-family="Helvetica, Arial, sans-serif" font-size="12">')
    o.append(f'<rect width="{W}" height="{H}" fill="white"/>')
    o.append(f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="14">{a.title}</text>')
    for t in nice_ticks(y0, y1):
        o.append(f'<line x1="{L}" x2="{L + pw}" y1="{Y(t):.1f}" y2="{Y(t):.1f}" stroke="#e5e5e5"/>')
        o.append(f'<text x="{L - 6}" y="{Y(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    for t in nice_ticks(x0, x1, 8):
        o.append(f'<line x1="{X(t):.1f}" x2="{X(t):.1f}" y1="{T}" y2="{T + ph}" stroke="#f0f0f0"/>')
        o.append(f'<text x="{X(t):.1f}" y="{T + ph + 18}" text-anchor="middle">{t:g}</text>')
    o.append(f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    o.append(f'<text x="{L + pw / 2}" y="{H - 14}" text-anchor="middle">tokens seen (millions)</text>')
    o.append(f'<text transform="translate(18,{T + ph / 2}) rotate(-90)" text-anchor="middle">'
             f'cross-entropy (nats/token)</text>')
    if ctr:
        o.append(f'<path d="{path(ctr)}" fill="none" stroke="#bbbbbb" stroke-width="1.2"/>')
    if cva:
        o.append(f'<path d="{path(cva)}" fill="none" stroke="#bbbbbb" stroke-width="1.2" stroke-dasharray="5,3"/>')
        for x, y in cva:
            o.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="2.5" fill="#bbbbbb"/>')
    o.append(f'<path d="{path(tr)}" fill="none" stroke="#1f77b4" stroke-width="1.6"/>')
    if va:
        o.append(f'<path d="{path(va)}" fill="none" stroke="#d62728" stroke-width="1.6" stroke-dasharray="5,3"/>')
        for x, y in va:
            o.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="3" fill="#d62728"/>')
    # legend
    items = [("#1f77b4", "train loss", False), ("#d62728", "validation loss (held-back 1% of each file)", True)]
    if a.compare:
        items += [("#bbbbbb", f"{a.compare_label}: train / validation", True)]
    ly = T + 14
    for color, label, dashed in items:
        dash = ' stroke-dasharray="5,3"' if dashed else ""
        o.append(f'<line x1="{L + pw - 330}" x2="{L + pw - 300}" y1="{ly}" y2="{ly}" stroke="{color}" '
                 f'stroke-width="2"{dash}/>')
        o.append(f'<text x="{L + pw - 294}" y="{ly + 4}">{label}</text>')
        ly += 18
    if va:
        bx, by = va[-1]
        o.append(f'<text x="{X(bx) - 6:.1f}" y="{Y(by) - 8:.1f}" text-anchor="end" fill="#d62728">'
                 f'final val {by:.3f}</text>')
    o.append("</svg>")
    with open(a.svg, "w") as f:
        f.write("\n".join(o) + "\n")


if __name__ == "__main__":
    main()
