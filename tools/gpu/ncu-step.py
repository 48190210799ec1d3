#!/usr/bin/env python3
"""Per-kernel GPU time of whole decode steps from `ncu --metrics gpu__time_duration.sum --csv`.

Reads ncu's CSV on stdin (one row per kernel launch, in launch order) and keeps the launches from
the first `rope_tables_kernel` (the first kernel of every forward pass) up to, not including, the
last one: whole steps only. Prints a markdown table of those kernels grouped by name (template
arguments dropped), per step: launches, microseconds, share.
"""
import csv
import re
import sys
from collections import defaultdict

rows = [r for r in csv.reader(line for line in sys.stdin if line.startswith('"'))]
if not rows:
    sys.exit("no ncu CSV rows on stdin")
head, body = rows[0], rows[1:]
name_col, value_col, unit_col = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "ns": 1e-3, "us": 1.0, "ms": 1e3}


def short(name):
    name = name.replace("(anonymous namespace)::", "")
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"<.*", "", name).split("(")[0]
    return re.sub(r"^.*::", "", name) or "(unnamed)"


names = [short(r[name_col]) for r in body]
starts = [i for i, n in enumerate(names) if n == "rope_tables_kernel"]
if len(starts) < 2:
    sys.exit(f"fewer than two forward passes in the window ({len(starts)} rope_tables_kernel launches)")
steps = len(starts) - 1
total = defaultdict(float)
count = defaultdict(int)
for i in range(starts[0], starts[-1]):
    r = body[i]
    total[names[i]] += float(r[value_col].replace(",", "")) * scale.get(r[unit_col], 1.0) / steps
    count[names[i]] += 1
s = sum(total.values())
n = starts[-1] - starts[0]
print(f"{steps} whole steps: {n / steps:.1f} kernels and {s:.1f} us of GPU time (sum of kernel durations) per step")
print("| kernel | launches per step | us per step | us per launch | share |\n|---|---:|---:|---:|---:|")
for name, us in sorted(total.items(), key=lambda kv: -kv[1]):
    print(f"| {name} | {count[name] / steps:.1f} | {us:.1f} | {us * steps / count[name]:.2f} | {100 * us / s:.1f}% |")
