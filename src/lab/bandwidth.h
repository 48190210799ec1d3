// Memory-bandwidth probe (STREAM-style copy and triad) run in the bench's own process, so the
// byte roofline of a decode is judged against what this machine sustains right now.
#pragma once

#include <cstddef>

namespace weft {
class ThreadPool;
}

namespace weft::lab {

// Bytes are counted as STREAM counts them (McCalpin 1995): copy c[i] = a[i] moves 2 words per
// element (read a, write c); triad a[i] = b[i] + s*c[i] moves 3 (read b, c; write a). The
// write-allocate read of the destination is not counted, as in STREAM, so copy and triad
// understate what the memory bus moves. A decode almost only reads (weights, KV rows), so a
// read-only pass (sum of a[i]: 1 word per element) is also timed, and the roofline uses the
// largest of the three: the best this machine was seen to sustain.
struct BandwidthResult {
  double copy_gb_s = 0;   // best trial, 1e9 bytes/s
  double triad_gb_s = 0;  // best trial
  double read_gb_s = 0;   // best trial
  double gb_s = 0;        // max(copy, triad, read): the roofline's bandwidth
  size_t buffer_bytes = 0;  // per array (3 arrays)
  int threads = 0;
  int trials = 0;
};

// Three arrays of buffer_bytes each (choose >> last-level cache; 512 MiB is the default of the
// bench), first touched in parallel, then `trials` timed passes of copy and triad each; the best
// pass counts (the least disturbed by other processes). pool may be nullptr (one thread).
BandwidthResult measure_bandwidth(size_t buffer_bytes, int trials, ThreadPool* pool);

}  // namespace weft::lab
