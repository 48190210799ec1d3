// quant_bench: decode (T = 1) matrix-vector throughput of every weight type, side by side in one
// run, against the existing bf16 matmul. A command, not a test: numbers depend on the machine
// and its load.
//
//   build/quant_bench [--n 4096] [--k 4096] [--threads 1,2] [--rounds 30] [--mib 128] [--t 1]
//                     [--ggml-cpu PATH/libggml-cpu-haswell.so]... [--paths scalar,avx2,avx512]
//                     [--pages huge|4k]
//
// --pages: the weight copies live on 2 MiB transparent huge pages (default; the CPU backend reads
// a model's weights from such a copy, host_weight_copy.h) or on plain 4 KiB pages (as before it
// did, and as a memory-mapped file mostly is). On this VM one thread streams ~32 GB/s from huge
// pages and ~17 GB/s from 4 KiB pages, so the two answer different questions: huge pages show
// what the kernel itself can do, 4k what the page walks leave of it.
//
// --paths adds weft's named kernel paths (quant_matmul_scalar / _avx2 / _avx512, called
// directly whatever WEFT_SIMD says) as extra arms on the same weight copies, so the paths are
// timed side by side in one run; the unnamed arms run quant_matmul's own dispatch.
//
// --ggml-cpu (repeatable) adds llama.cpp's own dot products (ggml_vec_dot_<w>_q8_<a> from a
// prebuilt ggml CPU backend, e.g. node-llama-cpp 3.21.1's, and its libggml-base.so beside it)
// as extra arms on the same matrices and the same quantized activations (ggml's block_q8_0 /
// block_q8_K have our layouts), threaded by our pool in the same row tasks: a kernel-to-kernel
// comparison. Decode only (T = 1).
//
// Each type's matrix is copied until the copies total --mib MiB, and calls cycle over the
// copies, so weights come from DRAM rather than the last-level cache. Types are interleaved
// round by round (every round times one call of each type), so load from other processes hits
// all of them alike. GB/s = weight bytes of one matrix / time of one call; the ratio column is
// that GB/s over bf16's, and "x bf16 speed" is bf16's time over the type's time (what decode
// gains per matrix).
#include <dlfcn.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/quant_types.h"
#include "core/thread_pool.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/quant_repack.h"

using namespace weft;

namespace {

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return v;
}

using QuantMatmulFn = void (*)(GgmlType, const void*, int64_t, int64_t, const float*, int64_t, int64_t, float*,
                               int64_t, ThreadPool*);

// ggml's vec_dot signature (ggml-cpu/quants.h): n values, one result, nrc = 1.
using GgmlVecDot = void (*)(int n, float* s, size_t bs, const void* vx, size_t bx, const void* vy, size_t by, int nrc);

// Weight copies on 2 MiB-aligned anonymous memory, advised to transparent huge pages before
// the first touch when g_huge_pages (--pages huge).
bool g_huge_pages = true;
template <typename T>
struct PageAllocator {
  using value_type = T;
  PageAllocator() = default;
  template <typename U>
  PageAllocator(const PageAllocator<U>&) {}
  static std::map<T*, std::pair<void*, size_t>>& maps() {
    static std::map<T*, std::pair<void*, size_t>> m;
    return m;
  }
  T* allocate(size_t n) {
    const size_t huge = size_t(2) << 20, bytes = n * sizeof(T) + huge;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    T* a = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(p) + huge - 1) & ~(huge - 1));
    madvise(a, n * sizeof(T), g_huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    maps()[a] = {p, bytes};
    return a;
  }
  void deallocate(T* a, size_t) {
    auto it = maps().find(a);
    munmap(it->second.first, it->second.second);
    maps().erase(it);
  }
  template <typename U>
  bool operator==(const PageAllocator<U>&) const { return true; }
};

struct Arm {
  GgmlType type;
  std::string label;
  GgmlVecDot ggml_dot = nullptr;  // set for llama.cpp arms
  QuantMatmulFn fn = quant_matmul;  // weft arms: the dispatcher or one named path
  QuantLayout layout;               // an x8 arm: its copies repacked (quant_repack.h)
  size_t matrix_bytes = 0;
  int64_t copies = 0;
  std::vector<uint8_t, PageAllocator<uint8_t>> data;
  const Arm* shared = nullptr;  // llama.cpp arms read the weights of this arm
  std::vector<double> times;
  const uint8_t* weights() const { return shared ? shared->data.data() : data.data(); }
};

// One decode call of a llama.cpp arm: activations quantized by us (same layout as ggml's),
// rows split into the tasks quant_matmul uses, one ggml_vec_dot per row.
void run_ggml(const Arm& a, const uint8_t* w, int64_t N, int64_t K, const float* x, float* out,
              ThreadPool* pool) {
  static std::vector<uint8_t> xq;
  xq.resize(ggml_row_bytes(activation_type(a.type), K));
  quantize_activations(a.type, x, K, xq.data());
  const size_t row_bytes = ggml_row_bytes(a.type, K);
  int64_t rows_per_task = kQuantRowsPerTask;
  while (size_t(rows_per_task) * row_bytes < size_t(kQuantDecodeTaskBytes)) rows_per_task *= 2;
  const uint8_t* xqp = xq.data();
  auto task = [&](int64_t i) {
    const int64_t n1 = std::min(N, (i + 1) * rows_per_task);
    for (int64_t n = i * rows_per_task; n < n1; ++n)
      a.ggml_dot(int(K), out + n, 0, w + size_t(n) * row_bytes, 0, xqp, 0, 1);
  };
  pool->parallel_for(ceil_div(N, rows_per_task), task);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t N = 4096, K = 4096, T = 1;
  int rounds = 30, mib = 128;
  std::vector<int> threads = {1, 2};
  std::vector<std::string> ggml_libs;
  std::vector<std::string> paths;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--n") N = std::atoll(argv[i + 1]);
    else if (a == "--k") K = std::atoll(argv[i + 1]);
    else if (a == "--t") T = std::atoll(argv[i + 1]);
    else if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (a == "--mib") mib = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = parse_list(argv[i + 1]);
    else if (a == "--ggml-cpu") ggml_libs.push_back(argv[i + 1]);
    else if (a == "--pages") {
      const std::string v = argv[i + 1];
      if (v != "huge" && v != "4k") { std::fprintf(stderr, "--pages must be huge or 4k\n"); return 2; }
      g_huge_pages = v == "huge";
    }
    else if (a == "--paths") {
      for (const char* p = argv[i + 1]; *p;) {
        const char* e = std::strchr(p, ',');
        paths.emplace_back(p, e ? size_t(e - p) : std::strlen(p));
        p = e ? e + 1 : p + std::strlen(p);
      }
    }
    else { std::fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
  }
  if (K % 256 != 0) { std::fprintf(stderr, "--k must be a multiple of 256\n"); return 2; }
  const GgmlType types[] = {GgmlType::kBF16, GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kQ6_K,
                            GgmlType::kQ5_K, GgmlType::kQ4_K, GgmlType::kQ4_0};
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::vector<float> wf(size_t(N * K));
  for (auto& v : wf) v = g(rng);
  std::vector<float> x(size_t(T * K)), out(size_t(T * N));
  for (auto& v : x) v = g(rng) * 50.0f;

  std::vector<Arm> arms;
  for (GgmlType t : types) {
    Arm a;
    a.type = t;
    a.label = ggml_type_name(t);
    a.matrix_bytes = ggml_row_bytes(t, K) * size_t(N);
    a.copies = std::max<int64_t>(1, int64_t((size_t(mib) << 20) / a.matrix_bytes));
    a.data.resize(a.matrix_bytes * size_t(a.copies));
    for (int64_t n = 0; n < N; ++n)
      quantize_row(t, wf.data() + n * K, a.data.data() + size_t(n) * ggml_row_bytes(t, K), K);
    for (int64_t c = 1; c < a.copies; ++c)
      std::memcpy(a.data.data() + size_t(c) * a.matrix_bytes, a.data.data(), a.matrix_bytes);
    arms.push_back(std::move(a));
  }
  // The x8 arms (every type with groups): the copies repacked into 8-row groups, as the CPU backend's weight copy
  // stores them (where the CPU has the grouped kernel), through quant_matmul's dispatch.
  if (use_avx512_vnni()) {
    const size_t own = arms.size();
    for (size_t i = 0; i < own; ++i) {
      const Arm& plain = arms[i];
      if (quant_dot_groups_avx512(plain.type) == nullptr) continue;
      Arm a;
      a.type = plain.type;
      a.label = std::string(ggml_type_name(plain.type)) + "@x8";
      a.layout = QuantLayout{N / kX8GroupRows * kX8GroupRows};
      a.matrix_bytes = plain.matrix_bytes;
      a.copies = plain.copies;
      a.data.resize(plain.data.size());
      for (int64_t c = 0; c < a.copies; ++c)
        repack_matrix_x8(a.type, arms[i].data.data() + size_t(c) * a.matrix_bytes, N, K,
                         a.data.data() + size_t(c) * a.matrix_bytes);
      arms.push_back(std::move(a));
    }
  }
  // llama.cpp arms: the same weight copies (shared by pointer), ggml's dot per row.
  const size_t n_own = arms.size();
  arms.reserve(n_own * (1 + ggml_libs.size() + paths.size()));  // `shared` points into arms: no reallocation
  for (const auto& path : paths) {
    QuantMatmulFn fn = nullptr;
    const CpuFeatures& f = cpu_features();
    if (path == "scalar") fn = quant_matmul_scalar;
    else if (path == "avx2" && f.has_avx2_fma_f16c()) fn = quant_matmul_avx2;
    else if (path == "avx512" && f.has_avx512_core() && f.avx512_vnni) fn = quant_matmul_avx512;
    if (!fn) { std::fprintf(stderr, "--paths: '%s' is unknown or this CPU cannot run it\n", path.c_str()); return 2; }
    for (size_t i = 0; i < n_own; ++i) {
      if (arms[i].type == GgmlType::kBF16 || arms[i].type == GgmlType::kF16 || arms[i].layout.grouped_rows > 0) continue;
      Arm a;
      a.type = arms[i].type;
      a.label = std::string(ggml_type_name(a.type)) + "@weft-" + path;
      a.fn = fn;
      a.matrix_bytes = arms[i].matrix_bytes;
      a.copies = arms[i].copies;
      a.shared = &arms[i];
      arms.push_back(std::move(a));
    }
  }
  for (const auto& lib : ggml_libs) {
    void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) { std::fprintf(stderr, "cannot load %s: %s\n", lib.c_str(), dlerror()); return 1; }
    if (auto init = reinterpret_cast<void (*)()>(dlsym(h, "ggml_cpu_init"))) init();
    std::string tag = lib.substr(lib.find_last_of('/') + 1);
    if (tag.rfind("libggml-cpu-", 0) == 0) tag = tag.substr(12);
    if (tag.size() > 3 && tag.substr(tag.size() - 3) == ".so") tag.resize(tag.size() - 3);
    for (size_t i = 0; i < n_own; ++i) {
      const GgmlType t = arms[i].type;
      if (t == GgmlType::kBF16 || t == GgmlType::kF16 || arms[i].layout.grouped_rows > 0) continue;
      const std::string sym = std::string("ggml_vec_dot_") + ggml_type_name(t) + "_" +
                              ggml_type_name(activation_type(t));
      auto fn = reinterpret_cast<GgmlVecDot>(dlsym(h, sym.c_str()));
      if (!fn) { std::fprintf(stderr, "%s has no %s\n", lib.c_str(), sym.c_str()); return 1; }
      Arm a;
      a.type = t;
      a.label = std::string(ggml_type_name(t)) + "@" + tag;
      a.ggml_dot = fn;
      a.matrix_bytes = arms[i].matrix_bytes;
      a.copies = arms[i].copies;
      a.shared = &arms[i];
      arms.push_back(std::move(a));
    }
  }
  if (!ggml_libs.empty() && T != 1) { std::fprintf(stderr, "--ggml-cpu needs --t 1\n"); return 2; }
  {  // the llama.cpp arms must compute the same products (up to float rounding order)
    ThreadPool pool(1);
    std::vector<float> ours(static_cast<size_t>(N));
    for (const auto& a : arms) {
      if (!a.ggml_dot) continue;
      run_ggml(a, a.weights(), N, K, x.data(), out.data(), &pool);
      quant_matmul(a.type, a.weights(), N, K, x.data(), K, 1, ours.data(), N, &pool);
      double maxdiff = 0, maxabs = 0;
      for (int64_t n = 0; n < N; ++n) {
        maxdiff = std::max(maxdiff, double(std::fabs(out[size_t(n)] - ours[size_t(n)])));
        maxabs = std::max(maxabs, double(std::fabs(ours[size_t(n)])));
      }
      std::printf("%-16s max |ggml - weft| / max |y| = %.2e\n", a.label.c_str(), maxdiff / maxabs);
    }
  }
  std::printf("N=%lld K=%lld T=%lld, %d rounds, weights cycled over %d MiB per type on %s pages, dispatch: %s\n",
              (long long)N, (long long)K, (long long)T, rounds, mib, g_huge_pages ? "huge" : "4k",
              kernel_path_description().c_str());
  for (int th : threads) {
    ThreadPool pool(th);
    for (auto& a : arms) a.times.clear();
    int64_t call = 0;
    for (int r = -3; r < rounds; ++r) {  // 3 warm-up rounds page everything in
      for (auto& a : arms) {
        const int64_t copy = (call++) % a.copies;
        auto t0 = std::chrono::steady_clock::now();
        const uint8_t* wc = a.weights() + size_t(copy) * a.matrix_bytes;
        if (a.ggml_dot) run_ggml(a, wc, N, K, x.data(), out.data(), &pool);
        else if (a.layout.grouped_rows > 0) quant_matmul_with_layout(a.type, wc, N, K, x.data(), K, T, out.data(), N, &pool, a.layout);
        else a.fn(a.type, wc, N, K, x.data(), K, T, out.data(), N, &pool);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r >= 0) a.times.push_back(s);
      }
      if (r < 0) {  // warm-up: touch every copy once
        for (auto& a : arms)
          for (int64_t c = 0; c < a.copies && a.shared == nullptr; ++c)
            quant_matmul_with_layout(a.type, a.data.data() + size_t(c) * a.matrix_bytes, N, K, x.data(), K, T,
                                     out.data(), N, &pool, a.layout);
      }
    }
    double bf16_med = 0, bf16_best = 0;
    std::printf("\nthreads=%d\n%-16s %9s %9s %9s %9s %10s %12s\n", th, "type", "MiB", "best ms", "med ms",
                "best GB/s", "med GB/s", "GB/s / bf16", "x bf16 speed");
    for (auto& a : arms) {
      std::sort(a.times.begin(), a.times.end());
      const double best = a.times.front(), med = a.times[a.times.size() / 2];
      if (a.type == GgmlType::kBF16) { bf16_med = med; bf16_best = best; }
      const double gbs_best = double(a.matrix_bytes) / best / 1e9, gbs_med = double(a.matrix_bytes) / med / 1e9;
      const double bf16_gbs_med = double(ggml_row_bytes(GgmlType::kBF16, K) * size_t(N)) / bf16_med / 1e9;
      std::printf("%-16s %9.2f %9.3f %9.3f %9.2f %9.2f %10.2f %12.2f\n", a.label.c_str(),
                  double(a.matrix_bytes) / (1 << 20), best * 1e3, med * 1e3, gbs_best, gbs_med,
                  gbs_med / bf16_gbs_med, bf16_med / med);
      (void)bf16_best;
    }
  }
  return 0;
}
