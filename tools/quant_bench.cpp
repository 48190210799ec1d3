// quant_bench: decode (T = 1) matrix-vector throughput of every weight type, side by side in one
// run, against the existing bf16 matmul. A command, not a test: numbers depend on the machine
// and its load.
//
//   build/quant_bench [--n 4096] [--k 4096] [--threads 1,2] [--rounds 30] [--mib 128] [--t 1]
//
// Each type's matrix is copied until the copies total --mib MiB, and calls cycle over the
// copies, so weights come from DRAM rather than the last-level cache. Types are interleaved
// round by round (every round times one call of each type), so load from other processes hits
// all of them alike. GB/s = weight bytes of one matrix / time of one call; the ratio column is
// that GB/s over bf16's, and "x bf16 speed" is bf16's time over the type's time (what decode
// gains per matrix).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/quant_types.h"
#include "core/thread_pool.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_matmul.h"

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

struct Arm {
  GgmlType type;
  size_t matrix_bytes = 0;
  int64_t copies = 0;
  std::vector<uint8_t> data;
  std::vector<double> times;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t N = 4096, K = 4096, T = 1;
  int rounds = 30, mib = 128;
  std::vector<int> threads = {1, 2};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--n") N = std::atoll(argv[i + 1]);
    else if (a == "--k") K = std::atoll(argv[i + 1]);
    else if (a == "--t") T = std::atoll(argv[i + 1]);
    else if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (a == "--mib") mib = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = parse_list(argv[i + 1]);
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
    a.matrix_bytes = ggml_row_bytes(t, K) * size_t(N);
    a.copies = std::max<int64_t>(1, int64_t((size_t(mib) << 20) / a.matrix_bytes));
    a.data.resize(a.matrix_bytes * size_t(a.copies));
    for (int64_t n = 0; n < N; ++n)
      quantize_row(t, wf.data() + n * K, a.data.data() + size_t(n) * ggml_row_bytes(t, K), K);
    for (int64_t c = 1; c < a.copies; ++c)
      std::memcpy(a.data.data() + size_t(c) * a.matrix_bytes, a.data.data(), a.matrix_bytes);
    arms.push_back(std::move(a));
  }
  std::printf("N=%lld K=%lld T=%lld, %d rounds, weights cycled over %d MiB per type\n", (long long)N,
              (long long)K, (long long)T, rounds, mib);
  for (int th : threads) {
    ThreadPool pool(th);
    for (auto& a : arms) a.times.clear();
    int64_t call = 0;
    for (int r = -3; r < rounds; ++r) {  // 3 warm-up rounds page everything in
      for (auto& a : arms) {
        const int64_t copy = (call++) % a.copies;
        auto t0 = std::chrono::steady_clock::now();
        quant_matmul(a.type, a.data.data() + size_t(copy) * a.matrix_bytes, N, K, x.data(), K, T,
                     out.data(), N, &pool);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r >= 0) a.times.push_back(s);
      }
      if (r < 0) {  // warm-up: touch every copy once
        for (auto& a : arms)
          for (int64_t c = 0; c < a.copies; ++c)
            quant_matmul(a.type, a.data.data() + size_t(c) * a.matrix_bytes, N, K, x.data(), K, T,
                         out.data(), N, &pool);
      }
    }
    double bf16_med = 0, bf16_best = 0;
    std::printf("\nthreads=%d\n%-5s %9s %9s %9s %9s %10s %12s\n", th, "type", "MiB", "best ms", "med ms",
                "best GB/s", "med GB/s", "GB/s / bf16", "x bf16 speed");
    for (auto& a : arms) {
      std::sort(a.times.begin(), a.times.end());
      const double best = a.times.front(), med = a.times[a.times.size() / 2];
      if (a.type == GgmlType::kBF16) { bf16_med = med; bf16_best = best; }
      const double gbs_best = double(a.matrix_bytes) / best / 1e9, gbs_med = double(a.matrix_bytes) / med / 1e9;
      const double bf16_gbs_med = double(ggml_row_bytes(GgmlType::kBF16, K) * size_t(N)) / bf16_med / 1e9;
      std::printf("%-5s %9.2f %9.3f %9.3f %9.2f %9.2f %10.2f %12.2f\n", ggml_type_name(a.type),
                  double(a.matrix_bytes) / (1 << 20), best * 1e3, med * 1e3, gbs_best, gbs_med,
                  gbs_med / bf16_gbs_med, bf16_med / med);
      (void)bf16_best;
    }
  }
  return 0;
}
