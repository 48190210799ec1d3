#!/usr/bin/env python3
"""Per-kernel GPU time of one decode step from `ncu --metrics gpu__time_duration.sum --csv`.

Reads ncu's CSV on stdin (one row per kernel launch) and prints a markdown table of the kernels
grouped by name (template arguments dropped): launches, microseconds, share; divided by the
number of steps the window covers (argument 1, default 1), so a window of whole steps reads as
one step.
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
total = defaultdict(float)
count = defaultdict(int)
for r in body:
    name = r[name_col].replace("(anonymous namespace)::", "")
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"<.*", "", name).split("(")[0]
    name = re.sub(r"^.*::", "", name)
    total[name] += float(r[value_col].replace(",", "")) * scale.get(r[unit_col], 1.0)
    count[name] += 1
steps = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
for name in total:
    total[name] /= steps
s = sum(total.values())
print(f"{len(body)} kernels over {steps:g} steps: {len(body) / steps:.1f} kernels and {s:.1f} us of GPU time "
      f"(sum of kernel durations) per step")
print("| kernel | launches | us | us per launch | share |\n|---|---:|---:|---:|---:|")
for name, us in sorted(total.items(), key=lambda kv: -kv[1]):
    print(f"| {name} | {count[name] / steps:.1f} | {us:.1f} | {us * steps / count[name]:.2f} | {100 * us / s:.1f}% |")
