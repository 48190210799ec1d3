// Times the gated delta rule kernels side by side in one run: chunked (gdn_chunked) vs
// token-by-token (gdn_recurrent) prefill at one geometry on 1 and 2 threads, and the T = 1
// decode step (AVX2 vs scalar). Prints the FLOP count of both forms and the measured FMA peak
// of this machine next to the times, so the ratios can be read against the speed of light.
//
//   build/bench_gdn                       # Qwen3.5-35B-A3B geometry: T=4096 n_v=32 n_k=16 dk=dv=128
//   build/bench_gdn --T 1024 --reps 3     # shorter
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/gdn.h"
#include "kernels/cpu/gdn_chunked.h"

using namespace weft;

namespace {

// The dev VMs are shared and often loaded: wall time then measures the neighbours. Process CPU
// time counts only while our threads run (it includes the pool's spin-waits on 2 threads), so the
// tables give both and the ratios are read from CPU time.
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// FMA throughput of one core: 12 independent chains of 8-lane fused multiply-adds.
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) double peak_gflops_one_core() {
  typedef float v8 __attribute__((vector_size(32)));
  v8 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = v8{} + float(i) * 1e-3f;
  const v8 m = v8{} + 0.999999f, a = v8{} + 1e-7f;
  const int64_t iters = 20'000'000;
  const double t0 = cpu_s();
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = __builtin_ia32_vfmaddps256(acc[i], m, a);
  }
  const double dt = cpu_s() - t0;
  float sink = 0;
  for (int i = 0; i < 12; ++i) sink += acc[i][0];
  if (sink == 12345.0f) std::printf(" ");
  return double(iters) * 12 * 16 / dt * 1e-9;
}
#else
double peak_gflops_one_core() { return 0.0; }
#endif

// FLOPs (multiply-add = 2) of one value head over T tokens.
double flops_recurrent(int64_t T, int64_t dk, int64_t dv) {
  // decay (1), kv (2), update (2), output (2) per state element; delta per column.
  return double(T) * (7.0 * dk * dv + 3.0 * dv);
}
double flops_chunked(int64_t T, int64_t dk, int64_t dv) {
  double f = 0;
  for (int64_t t0 = 0; t0 < T; t0 += kGdnChunk) {
    const int64_t L = std::min(kGdnChunk, T - t0);
    // Slabs of 6 rows (gdn_chunked_driver.h): K Kᵀ and Q Kᵀ take columns up to the slab end
    // rounded up to 16, M δ a depth up to the slab end.
    double tri_g = 0, tri_m = 0;
    for (int64_t i0 = 0; i0 < L; i0 += 6) {
      const double rows = double(std::min<int64_t>(6, L - i0));
      tri_g += rows * double(std::min(L, (i0 + 6 + 15) & ~int64_t(15)));
      tri_m += rows * double(std::min(L, i0 + 6));
    }
    f += 2 * 2 * tri_g * dk;                // K Kᵀ and Q Kᵀ
    f += 3 * 2.0 * L * dk * dv;             // K S0, Q S0, state update
    f += 2.0 * dv * (L * (L - 1) / 2);      // forward substitution
    f += 2 * tri_m * dv;                    // M δ
    f += double(dk) * dv + 3.0 * L * dk + 2.0 * L * L + L * dv;  // scalings
  }
  return f;
}

struct Inputs {
  int64_t T, n_k, n_v, dk, dv, stride;
  std::vector<float> qkv, g, beta, state0;
};

Inputs make_inputs(int64_t T, int64_t n_k, int64_t n_v, int64_t dk, int64_t dv) {
  Inputs in{T, n_k, n_v, dk, dv, 2 * n_k * dk + n_v * dv, {}, {}, {}, {}};
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  in.qkv.resize(size_t(T * in.stride));
  for (auto& x : in.qkv) x = nd(rng);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < 2 * n_k; ++h) {
      float* x = in.qkv.data() + t * in.stride + h * dk;
      double ss = 0;
      for (int64_t i = 0; i < dk; ++i) ss += double(x[i]) * x[i];
      const float s = float(1.0 / std::sqrt(ss)) * (h < n_k ? 1.0f / std::sqrt(float(dk)) : 1.0f);
      for (int64_t i = 0; i < dk; ++i) x[i] *= s;
    }
  in.g.resize(size_t(T * n_v));
  in.beta.resize(size_t(T * n_v));
  for (auto& x : in.g) x = -2.0f * u01(rng);  // a model's decays are mostly mild
  for (auto& x : in.beta) x = u01(rng);
  in.state0.assign(size_t(n_v * dk * dv), 0.0f);
  return in;
}

GdnRecurrentArgs args_of(Inputs& in, float* state, float* out, int64_t t0, int64_t T) {
  GdnRecurrentArgs a;
  a.state = state;
  a.q = in.qkv.data() + t0 * in.stride;
  a.k = a.q + in.n_k * in.dk;
  a.v = a.q + 2 * in.n_k * in.dk;
  a.q_stride = a.v_stride = in.stride;
  a.g = in.g.data() + t0 * in.n_v;
  a.beta = in.beta.data() + t0 * in.n_v;
  a.out = out + t0 * in.n_v * in.dv;
  a.T = T;
  a.n_k = in.n_k;
  a.n_v = in.n_v;
  a.dk = in.dk;
  a.dv = in.dv;
  return a;
}

using Kernel = void (*)(const GdnRecurrentArgs&, ThreadPool*);

struct Timing {
  double wall = 1e30, cpu = 1e30;  // best of the repetitions, each
};

// One full prefill from a zero state, best of reps.
Timing time_prefill(Kernel k, Inputs& in, ThreadPool* pool, int reps, std::vector<float>* out) {
  std::vector<float> state;
  out->assign(size_t(in.T * in.n_v * in.dv), 0.0f);
  Timing best;
  for (int r = 0; r < reps; ++r) {
    state = in.state0;
    const double w0 = now_s(), c0 = cpu_s();
    k(args_of(in, state.data(), out->data(), 0, in.T), pool);
    best.cpu = std::min(best.cpu, cpu_s() - c0);
    best.wall = std::min(best.wall, now_s() - w0);
  }
  return best;
}

// Mean per decode step over n steps (state stays hot), best of 3 rounds.
Timing time_decode(Kernel k, Inputs& in, ThreadPool* pool, int64_t steps) {
  std::vector<float> state = in.state0, out(size_t(in.n_v * in.dv));
  k(args_of(in, state.data(), out.data(), 0, 1), pool);  // warm
  Timing best;
  for (int round = 0; round < 3; ++round) {
    const double w0 = now_s(), c0 = cpu_s();
    for (int64_t s = 0; s < steps; ++s) {
      GdnRecurrentArgs a = args_of(in, state.data(), out.data(), s % in.T, 1);
      a.out = out.data();
      k(a, pool);
    }
    best.cpu = std::min(best.cpu, (cpu_s() - c0) / double(steps));
    best.wall = std::min(best.wall, (now_s() - w0) / double(steps));
  }
  return best;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double n = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    n += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    d += double(b[i]) * b[i];
  }
  return std::sqrt(n / d);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t T = 4096, n_v = 32, n_k = 16, dk = 128, dv = 128;
  int reps = 3;
  bool chunked_only = false;  // skip the slow token-by-token arms (profiling)
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (f == "--T") T = v;
    else if (f == "--n_v") n_v = v;
    else if (f == "--n_k") n_k = v;
    else if (f == "--dk") dk = v;
    else if (f == "--dv") dv = v;
    else if (f == "--reps") reps = int(v);
    else if (f == "--chunked-only") chunked_only = v != 0;
    else {
      std::fprintf(stderr, "usage: bench_gdn [--T N] [--n_v N] [--n_k N] [--dk N] [--dv N] [--reps N] [--chunked-only 1]\n");
      return 2;
    }
  }
  std::printf("gated delta rule, T=%lld n_v=%lld n_k=%lld dk=%lld dv=%lld, %s path, best of %d\n", (long long)T,
              (long long)n_v, (long long)n_k, (long long)dk, (long long)dv,
              use_avx512() ? "AVX-512" : use_avx2() ? "AVX2" : "scalar", reps);
  const bool avx2 = cpu_features().has_avx2_fma_f16c();
  const double peak = avx2 ? peak_gflops_one_core() : 0.0;
  const double f_rec = flops_recurrent(T, dk, dv) * double(n_v), f_chk = flops_chunked(T, dk, dv) * double(n_v);
  std::printf("FLOPs: token-by-token %.2f GFLOP (%.0f per token-head = %.2f·dk·dv), chunked %.2f GFLOP (%.0f per "
              "token-head = %.2f·dk·dv)\n",
              f_rec * 1e-9, f_rec / double(T * n_v), f_rec / double(T * n_v * dk * dv), f_chk * 1e-9,
              f_chk / double(T * n_v), f_chk / double(T * n_v * dk * dv));
  if (avx2)
    std::printf("measured FMA peak: %.1f GFLOP/s per core -> at peak, chunked %.3f s on 1 core, %.3f s on 2\n", peak,
                f_chk / (peak * 1e9), f_chk / (2 * peak * 1e9));

  Inputs in = make_inputs(T, n_k, n_v, dk, dv);
  // Token-by-token: the scalar code (what prefill ran before the AVX2 path) and the AVX2 path.
  std::printf("\nprefill, seconds as CPU time (wall time)\n");
  std::printf("threads  tbt scalar        tbt AVX2          chunked           chunked speed-up vs  "
              "GFLOP/s per CPU-second             rel diff\n");
  std::printf("                                                                scalar    AVX2      "
              "scalar / AVX2 / chunked\n");
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    std::vector<float> out_s, out_r, out_c;
    const Timing tc = time_prefill(gdn_chunked, in, &pool, reps, &out_c);
    if (chunked_only) {
      std::printf("%7d  %-16s  %-16s  %6.3f (%6.3f)  %20s %7.1f GFLOP/s\n", threads, "-", "-", tc.cpu, tc.wall, "",
                  f_chk / tc.cpu * 1e-9);
      continue;
    }
    const Timing tr = time_prefill(avx2 ? gdn_recurrent_avx2 : gdn_recurrent_scalar, in, &pool, reps, &out_r);
    const Timing ts = time_prefill(gdn_recurrent_scalar, in, &pool, 1, &out_s);
    std::printf("%7d  %6.3f (%6.3f)   %6.3f (%6.3f)   %6.3f (%6.3f)   %6.2fx   %6.2fx    %5.1f / %5.1f / %5.1f"
                "            %.1e\n",
                threads, ts.cpu, ts.wall, tr.cpu, tr.wall, tc.cpu, tc.wall, ts.cpu / tc.cpu, tr.cpu / tc.cpu,
                f_rec / ts.cpu * 1e-9, f_rec / tr.cpu * 1e-9, f_chk / tc.cpu * 1e-9, rel_diff(out_c, out_r));
  }

  std::printf("\ndecode (T=1), microseconds per step as CPU time (wall time)\n");
  std::printf("threads  scalar              AVX2                speed-up   state GB/s per CPU-second (AVX2)\n");
  const double state_bytes = 2.0 * double(n_v * dk * dv) * sizeof(float);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    const int64_t steps = 200;
    const Timing ts = time_decode(gdn_recurrent_scalar, in, &pool, steps);
    const Timing tv = avx2 ? time_decode(gdn_recurrent_avx2, in, &pool, steps) : ts;
    std::printf("%7d  %7.1f (%7.1f)   %7.1f (%7.1f)   %6.2fx    %.1f\n", threads, ts.cpu * 1e6, ts.wall * 1e6,
                tv.cpu * 1e6, tv.wall * 1e6, ts.cpu / tv.cpu, state_bytes / tv.cpu * 1e-9);
  }
  return 0;
}
