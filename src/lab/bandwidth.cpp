// STREAM-style copy/triad probe over a ThreadPool; fixed chunks so every thread streams its own
// contiguous ranges.
#include "lab/bandwidth.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "core/thread_pool.h"

namespace weft::lab {
namespace {

// 4 MiB of doubles per task: large enough that task dispatch is noise, small enough to balance.
constexpr size_t kChunk = size_t(4) << 20 >> 3;

void run(ThreadPool* pool, size_t n, const std::function<void(size_t, size_t)>& fn) {
  const int64_t tasks = int64_t((n + kChunk - 1) / kChunk);
  auto task = [&](int64_t t) {
    const size_t b = size_t(t) * kChunk;
    fn(b, std::min(n, b + kChunk));
  };
  if (pool) pool->parallel_for(tasks, task);
  else for (int64_t t = 0; t < tasks; ++t) task(t);
}

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

BandwidthResult measure_bandwidth(size_t buffer_bytes, int trials, ThreadPool* pool) {
  BandwidthResult r;
  const size_t n = std::max<size_t>(buffer_bytes / sizeof(double), kChunk);
  r.buffer_bytes = n * sizeof(double);
  r.threads = pool ? pool->size() : 1;
  r.trials = std::max(trials, 1);
  std::unique_ptr<double[]> a(new double[n]), b(new double[n]), c(new double[n]);
  double* pa = a.get(); double* pb = b.get(); double* pc = c.get();
  // First touch in parallel, so pages land where the threads that stream them run.
  run(pool, n, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) { pa[i] = 1.0; pb[i] = 2.0; pc[i] = 0.5; }
  });
  const double s = 3.0;
  for (int t = 0; t < r.trials; ++t) {
    auto t0 = std::chrono::steady_clock::now();
    run(pool, n, [&](size_t lo, size_t hi) { std::copy(pa + lo, pa + hi, pc + lo); });
    r.copy_gb_s = std::max(r.copy_gb_s, 2.0 * double(r.buffer_bytes) / seconds(t0) / 1e9);
    t0 = std::chrono::steady_clock::now();
    run(pool, n, [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    });
    r.triad_gb_s = std::max(r.triad_gb_s, 3.0 * double(r.buffer_bytes) / seconds(t0) / 1e9);
    // Read-only: per-task partial sums (4 independent chains so the adds do not bound it).
    std::vector<double> part(size_t((n + kChunk - 1) / kChunk));
    t0 = std::chrono::steady_clock::now();
    run(pool, n, [&](size_t lo, size_t hi) {
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      size_t i = lo;
      for (; i + 4 <= hi; i += 4) { s0 += pb[i]; s1 += pb[i + 1]; s2 += pb[i + 2]; s3 += pb[i + 3]; }
      for (; i < hi; ++i) s0 += pb[i];
      part[lo / kChunk] = s0 + s1 + s2 + s3;
    });
    r.read_gb_s = std::max(r.read_gb_s, double(r.buffer_bytes) / seconds(t0) / 1e9);
    volatile double sink = 0;
    for (double p : part) sink = sink + p;  // keeps the reads observable
  }
  r.gb_s = std::max({r.copy_gb_s, r.triad_gb_s, r.read_gb_s});
  return r;
}

}  // namespace weft::lab
