#!/usr/bin/env python3
"""Achieved DRAM bandwidth of the one-token product kernels, from
`ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__registers_per_thread --csv`.

Reads ncu's CSV on stdin (one row per kernel launch and metric) and prints a markdown table per
(kernel name without template arguments, grid size): launches, mean microseconds, mean MB read
from DRAM, GB/s (bytes over time), registers per thread. Sorted by total time.
"""
import csv
import re
import sys
from collections import defaultdict

rows = [r for r in csv.reader(line for line in sys.stdin if line.startswith('"'))]
if not rows:
    sys.exit("no ncu CSV rows on stdin")
head, body = rows[0], rows[1:]
col = {k: head.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")}
scale_t = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "ns": 1e-3, "us": 1.0, "ms": 1e3}
scale_b = {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3, "KB": 1e-3, "MB": 1.0, "GB": 1e3, "B": 1e-6}
launch = defaultdict(dict)
for r in body:
    name = re.sub(r"<.*", "", r[col["Kernel Name"]]).split("(")[0].split("::")[-1]
    v = float(r[col["Metric Value"]].replace(",", ""))
    unit, metric = r[col["Metric Unit"]], r[col["Metric Name"]]
    d = launch[r[col["ID"]]]
    d["name"] = name
    if metric == "gpu__time_duration.sum":
        d["us"] = v * scale_t.get(unit, 1.0)
    elif metric == "dram__bytes_read.sum":
        d["mb"] = v * scale_b.get(unit, 1e-6)
    elif metric == "launch__grid_size":
        d["grid"] = int(v)
    elif metric == "launch__registers_per_thread":
        d["regs"] = int(v)
groups = defaultdict(list)
for d in launch.values():
    if "us" in d and "mb" in d:
        groups[(d["name"], d.get("grid", 0))].append(d)
print("| kernel | grid | launches | us (mean) | MB read (mean) | GB/s | regs |")
print("|---|---:|---:|---:|---:|---:|---:|")
for (name, grid), ds in sorted(groups.items(), key=lambda kv: -sum(d["us"] for d in kv[1])):
    us = sum(d["us"] for d in ds) / len(ds)
    mb = sum(d["mb"] for d in ds) / len(ds)
    print(f"| {name} | {grid} | {len(ds)} | {us:.2f} | {mb:.2f} | {mb / us * 1e3 if us else 0:.0f} | {ds[0].get('regs', '')} |")
