// Memory-bandwidth probe run in the bench's own process, so the byte roofline of a decode is
// judged against what this machine sustains right now, from DRAM, with the decode's threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace weft {
class ThreadPool;
}

namespace weft::lab {

// Three passes, bytes counted as STREAM counts them (McCalpin 1995):
//   copy   c[i] = a[i]            2 words per element (read a, write c);
//   triad  a[i] = b[i] + s·c[i]   3 words per element (read b, c; write a);
//   read   x ^= b[i]              1 word per element — the pass that looks like a decode, which
//          almost only reads (weights, KV rows). It is an AVX2 loop of 256-bit loads into four
//          independent accumulators (a scalar twin without AVX2), so the core's issue rate is
//          not what it measures; a scalar one-chain loop measured below copy.
// The write-allocate read of a destination is not counted (as in STREAM), so copy and triad
// understate what the bus moves. The roofline uses the largest of the three: the best this
// machine was seen to sustain.
struct BandwidthResult {
  double copy_gb_s = 0;     // best trial, 1e9 bytes/s
  double triad_gb_s = 0;    // best trial
  double read_gb_s = 0;     // best trial
  double gb_s = 0;          // max(copy, triad, read): the roofline's bandwidth
  size_t buffer_bytes = 0;  // per array (3 arrays), after the floor of probe_array_bytes
  size_t llc_bytes = 0;     // last-level cache of cpu0 (0: unknown)
  const char* read_kernel = "scalar";  // "avx2" or "scalar"; "cuda" for a GPU's own probe (no triad)
  int threads = 0;
  int trials = 0;
};

// Floor of a probe array: far beyond any last-level cache, so every pass streams from DRAM.
inline constexpr size_t kMinProbeArrayBytes = size_t(256) << 20;
// max(requested, 8 × llc_bytes, kMinProbeArrayBytes): callers (and tests) cannot undercut it.
size_t probe_array_bytes(size_t requested, size_t llc_bytes);

// Size of the highest-level data or unified cache listed under cache_dir (sysfs layout:
// index*/level, index*/type, index*/size such as "32768K"); 0 when it cannot be read.
size_t last_level_cache_bytes(const std::string& cache_dir = "/sys/devices/system/cpu/cpu0/cache");
// "32768K" -> 33554432, "1M" -> 1048576, "512" -> 512; 0 when malformed.
size_t parse_cache_size(const std::string& text);

// Three arrays of probe_array_bytes(requested_bytes, LLC) each, first touched in parallel, then
// `trials` timed rounds of copy, triad and read; the best round of each counts (the least
// disturbed by other processes). All passes run on pool (nullptr: the calling thread only), in
// fixed 4 MiB tasks, so every thread streams its own contiguous ranges.
BandwidthResult measure_bandwidth(size_t requested_bytes, int trials, ThreadPool* pool);

// The read pass's kernel: XOR of the n 64-bit words at p. Both give the same value; the AVX2 one
// needs cpu_features().avx2 (measure_bandwidth picks it with use_avx2(), as the kernels do).
uint64_t read_xor_scalar(const uint64_t* p, size_t n);
uint64_t read_xor_avx2(const uint64_t* p, size_t n);

}  // namespace weft::lab
