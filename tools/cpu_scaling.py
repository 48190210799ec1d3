#!/usr/bin/env python3
"""Decode and prefill speed against thread count, weft beside llama.cpp, on one GGUF file.

The CPU-scaling comparison of issue 9 (the 16-core CPU of the GPU machine): for each thread count,
`weft bench` (f16 KV, interleaved repeats) and, when a llama-bench binary is given, llama.cpp's
llama-bench on the same file at the same depths, one after the other in one run. Prints a
Markdown table of decode tok/s (mean, relative spread = (max - min) / mean over the repeats) and
the weft / llama.cpp ratio, then prefill tok/s at the largest thread count.

  python3 tools/cpu_scaling.py --weft build/weft --model m.gguf --threads 2,4,8,16 \
      --depths 1,4096,16384 [--llama-bench /path/to/llama-bench] [--json out.json]

Depth 1 stands for "near depth 0" (weft bench needs a positive depth; llama-bench's -d 0 is
used for it). llama-bench runs once per depth over all thread counts, most threads first, so it
fills each depth once (it restores the filled state for the other thread counts); weft bench
fills the deepest depth once per thread count, at that thread count, unless --weft-tile-fill N is
given: then weft prefills N tokens and repeats their KV pages up to each depth (`weft bench
--tile-fill`: the decode reads the bytes of a real cache of that depth), and its prefill speed is
measured by one more run at the most threads that fills --prefill-depth tokens for real. This
script only runs binaries it is given; it builds nothing.
"""
import argparse
import json
import subprocess
import sys
import time


def run_json(cmd):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.time()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    print(f"  ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    return json.loads(out)


def spread(xs):
    m = sum(xs) / len(xs)
    return m, (max(xs) - min(xs)) / m if m > 0 else 0.0


def weft_bench(args, threads, depths, extra):
    return run_json([args.weft, "bench", "-m", args.model, "--ctx", depths, "--arms", "f16",
                     "--threads", str(threads), "--repeats", str(args.repeats), "--gen", str(args.gen),
                     "--bandwidth-mib", "64", "--json", "-q"] + extra)


def weft_prefill(args, threads):
    """Prefill tok/s filling --prefill-depth tokens for real (one repeat of a short decode)."""
    d = run_json([args.weft, "bench", "-m", args.model, "--ctx", str(args.prefill_depth), "--arms", "f16",
                  "--threads", str(threads), "--repeats", "1", "--gen", "4", "--bandwidth-mib", "64",
                  "--json", "-q"])
    return d["depths"][0].get("prefill_tok_s")


def weft_runs(args, threads):
    extra = ["--tile-fill", str(args.weft_tile_fill)] if args.weft_tile_fill else []
    d = weft_bench(args, threads, args.depths, extra)
    decode = {dep["ctx"]: dep["arms"]["f16"]["tok_s_runs"] for dep in d["depths"]}
    prefill = {dep["ctx"]: dep.get("prefill_tok_s") for dep in d["depths"]}
    print(f"  weft at {threads} threads: probe {d.get('bandwidth_gb_s', 0):.1f} GB/s", file=sys.stderr, flush=True)
    return decode, prefill


def llama_runs(args, threads, depths):
    """{threads: {depth: samples}}. One llama-bench per depth, thread counts in descending order:
    llama-bench keeps the state of the last depth it filled and restores it for the next test at
    the same depth, so each depth is prefilled once, at the most threads, instead of once per
    thread count (a 4K or 16K fill at 2 threads costs minutes)."""
    out = {t: {} for t in threads}
    order = ",".join(str(t) for t in sorted(threads, reverse=True))
    for depth in depths:
        rows = run_json([args.llama_bench, "-m", args.model, "-t", order, "-d", "0" if depth == 1 else str(depth),
                         "-p", "0", "-n", str(args.gen), "-r", str(args.repeats), "-o", "json"])
        for r in rows:
            out[int(r["n_threads"])][max(1, int(r.get("n_depth", 0)))] = r.get("samples_ts") or [r["avg_ts"]]
    return out


def llama_prefill(args, threads, n_prompt):
    rows = run_json([args.llama_bench, "-m", args.model, "-t", str(threads), "-p", str(n_prompt), "-n", "0",
                     "-r", "2", "-o", "json"])
    return rows[0]["avg_ts"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weft", required=True)
    ap.add_argument("--model", required=True, help="a GGUF file both engines load")
    ap.add_argument("--threads", default="2,4,8,16")
    ap.add_argument("--depths", default="1,4096,16384")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--gen", type=int, default=16)
    ap.add_argument("--llama-bench", default=None)
    ap.add_argument("--prefill-depth", type=int, default=4096,
                    help="compare prefill filling this depth (one of --depths) with llama-bench -p N")
    ap.add_argument("--weft-tile-fill", type=int, default=0,
                    help="weft: prefill this many tokens and tile their KV pages to each depth")
    ap.add_argument("--json", default=None, help="also write every sample here")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    depths = [int(d) for d in args.depths.split(",")]

    results = []
    llama = llama_runs(args, threads, depths) if args.llama_bench else {}
    for t in threads:
        wd, wp = weft_runs(args, t)
        ld = llama.get(t, {})
        results.append({"threads": t, "weft": {str(k): v for k, v in wd.items()},
                        "weft_prefill_tok_s": wp.get(args.prefill_depth),
                        "llama": {str(k): v for k, v in ld.items()}})

    print("| threads | depth | weft tok/s (spread) | llama.cpp tok/s (spread) | weft / llama.cpp |")
    print("|---|---|---|---|---|")
    for r in results:
        for d in depths:
            wm, ws = spread(r["weft"][str(d)])
            cell_l, ratio = "-", "-"
            if str(d) in r["llama"]:
                lm, ls = spread(r["llama"][str(d)])
                cell_l, ratio = f"{lm:.2f} ({100 * ls:.1f}%)", f"{wm / lm:.2f}"
            print(f"| {r['threads']} | {0 if d == 1 else d} | {wm:.2f} ({100 * ws:.1f}%) | {cell_l} | {ratio} |")
    top = max(results, key=lambda r: r["threads"])
    if args.weft_tile_fill:
        top["weft_prefill_tok_s"] = weft_prefill(args, top["threads"])
    wp = top["weft_prefill_tok_s"]
    line = f"prefill at {top['threads']} threads, filling depth {args.prefill_depth}: weft {wp or 0:.1f} tok/s"
    if args.llama_bench:
        lp = llama_prefill(args, top["threads"], args.prefill_depth)
        top["llama_prefill_tok_s"] = lp
        line += f", llama.cpp {lp:.1f} tok/s (pp{args.prefill_depth})"
        if wp:
            line += f": {wp / lp:.2f}x"
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
