#!/usr/bin/env python3
"""stamp.py LOG -- CMD...: runs CMD, copies its stdout through, writes its stderr lines to LOG,
each prefixed with the seconds since CMD started; at the end appends the wall time and the peak
resident set of CMD and its descendants (getrusage of the waited-for children)."""
import resource, subprocess, sys, time

def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    log, cmd = sys.argv[1], sys.argv[3:]
    t0 = time.monotonic()
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, errors="replace")
        for line in p.stderr:
            out.write(f"[{time.monotonic() - t0:7.2f}s] {line}")
            out.flush()
        rc = p.wait()
        wall = time.monotonic() - t0
        rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        out.write(f"wall_s {wall:.2f} rc {rc}\npeak_rss_kib {rss_kib} ({rss_kib / 2**20:.2f} GiB)\n")
    return rc

if __name__ == "__main__":
    sys.exit(main())
