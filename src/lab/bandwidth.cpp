// The bandwidth probe: array sizing from the last-level cache, the copy/triad/read passes over a
// ThreadPool, and the scalar read kernel (the AVX2 one is in bandwidth_avx2.cpp).
#include "lab/bandwidth.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <new>
#include <vector>

#include "backend/host_weight_copy.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"

namespace weft::lab {
namespace {

// 4 MiB of 8-byte words per task: large enough that task dispatch is noise, small enough to balance.
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

// n doubles of anonymous memory, 2 MiB-aligned and advised to huge pages when `huge`.
class ProbeArray {
 public:
  ProbeArray(size_t n, bool huge) : bytes_(n * sizeof(double) + (size_t(2) << 20)) {
    map_ = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map_ == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t align = uintptr_t(2) << 20;
    data_ = reinterpret_cast<double*>((reinterpret_cast<uintptr_t>(map_) + align - 1) & ~(align - 1));
    madvise(data_, n * sizeof(double), huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  }
  ~ProbeArray() { munmap(map_, bytes_); }
  ProbeArray(const ProbeArray&) = delete;
  ProbeArray& operator=(const ProbeArray&) = delete;
  double* get() const { return data_; }

 private:
  size_t bytes_;
  void* map_ = nullptr;
  double* data_ = nullptr;
};

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string read_line(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::string s;
  std::getline(f, s);
  return s;
}

}  // namespace

size_t parse_cache_size(const std::string& text) {
  if (text.empty()) return 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) return 0;
  const std::string unit(end);
  if (unit.empty()) return size_t(v);
  if (unit == "K") return size_t(v) << 10;
  if (unit == "M") return size_t(v) << 20;
  if (unit == "G") return size_t(v) << 30;
  return 0;
}

size_t last_level_cache_bytes(const std::string& cache_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int best_level = 0;
  size_t best = 0;
  for (const auto& e : fs::directory_iterator(cache_dir, ec)) {
    if (e.path().filename().string().rfind("index", 0) != 0) continue;
    if (read_line(e.path() / "type") == "Instruction") continue;
    const int level = std::atoi(read_line(e.path() / "level").c_str());
    const size_t size = parse_cache_size(read_line(e.path() / "size"));
    if (size > 0 && (level > best_level || (level == best_level && size > best))) {
      best_level = level;
      best = size;
    }
  }
  return best;
}

size_t probe_array_bytes(size_t requested, size_t llc_bytes) {
  return std::max({requested, 8 * llc_bytes, kMinProbeArrayBytes});
}

uint64_t read_xor_scalar(const uint64_t* p, size_t n) {
  uint64_t x0 = 0, x1 = 0, x2 = 0, x3 = 0;  // four chains, as the AVX2 kernel
  size_t i = 0;
  for (; i + 4 <= n; i += 4) { x0 ^= p[i]; x1 ^= p[i + 1]; x2 ^= p[i + 2]; x3 ^= p[i + 3]; }
  for (; i < n; ++i) x0 ^= p[i];
  return x0 ^ x1 ^ x2 ^ x3;
}

BandwidthResult measure_bandwidth(size_t requested_bytes, int trials, ThreadPool* pool) {
  BandwidthResult r;
  r.llc_bytes = last_level_cache_bytes();
  const size_t n = (probe_array_bytes(requested_bytes, r.llc_bytes) + kChunk * 8 - 1) / (kChunk * 8) * kChunk;
  r.buffer_bytes = n * sizeof(double);
  r.threads = pool ? pool->size() : 1;
  r.trials = std::max(trials, 1);
  const bool avx2 = use_avx2();  // the same dispatch as the decode kernels (WEFT_FORCE_SCALAR too)
  r.read_kernel = avx2 ? "avx2" : "scalar";
  // The arrays live on the pages the CPU backend reads weights from: 2 MiB transparent huge pages
  // unless WEFT_CPU_WEIGHTS=mmap (backend/host_weight_copy.h). On 4 KiB pages one thread of this
  // VM streams ~17-24 GB/s, on huge pages ~32: a 4 KiB probe under huge-page weights would put
  // decode above its own roofline.
  ProbeArray a(n, host_weight_copy_enabled()), b(n, host_weight_copy_enabled()), c(n, host_weight_copy_enabled());
  double* pa = a.get(); double* pb = b.get(); double* pc = c.get();
  // First touch in parallel, so pages land where the threads that stream them run.
  run(pool, n, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) { pa[i] = 1.0; pb[i] = 2.0 + double(i & 7); pc[i] = 0.5; }
  });
  const double s = 3.0;
  std::vector<uint64_t> part(size_t((n + kChunk - 1) / kChunk));
  uint64_t seen = 0;
  for (int t = 0; t < r.trials; ++t) {
    auto t0 = std::chrono::steady_clock::now();
    run(pool, n, [&](size_t lo, size_t hi) { std::copy(pa + lo, pa + hi, pc + lo); });
    r.copy_gb_s = std::max(r.copy_gb_s, 2.0 * double(r.buffer_bytes) / seconds(t0) / 1e9);
    t0 = std::chrono::steady_clock::now();
    run(pool, n, [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    });
    r.triad_gb_s = std::max(r.triad_gb_s, 3.0 * double(r.buffer_bytes) / seconds(t0) / 1e9);
    // Read-only: one XOR per task, stored per task so no two threads share a result.
    const auto* words = reinterpret_cast<const uint64_t*>(pb);
    t0 = std::chrono::steady_clock::now();
    run(pool, n, [&](size_t lo, size_t hi) {
      part[lo / kChunk] = avx2 ? read_xor_avx2(words + lo, hi - lo) : read_xor_scalar(words + lo, hi - lo);
    });
    r.read_gb_s = std::max(r.read_gb_s, double(r.buffer_bytes) / seconds(t0) / 1e9);
    for (uint64_t p : part) seen ^= p;
  }
  volatile uint64_t sink = seen;  // keeps the reads observable
  (void)sink;
  r.gb_s = std::max({r.copy_gb_s, r.triad_gb_s, r.read_gb_s});
  return r;
}

}  // namespace weft::lab
