// Decode-attention microbenchmark on the GPU (issue 11): Qwen3.5-35B-A3B attention geometry
// (16 query heads, 2 KV heads, head_dim 256, pages of 256 tokens), depths 8K..256K, per KV type.
// Reports the bytes the kernel must read (K and V at their storage type) over the kernel time
// (CUDA events around split + merge, median of repeats, L2 flushed before each repeat), against
// the device-to-device copy bandwidth measured in the same run ((read + write bytes) / time),
// as a Markdown table with the q8_0/f16 and q4_0/f16 time ratios (default kernel per KV type),
// and the times of the tiled kernels forced (dim-parallel: attention_split.cu, the f16 kernel and
// the quantized one of round 3; key-parallel: attention_qkeys.cu, the quantized default; and
// attention_qkeys.cu with round 7's fixed 256-key splits, the before of round 8's long splits) on
// the same cache in the same run, and for the quantized types where a call's time goes (its split
// kernel alone, its merge alone, both: each tree). Every repeat is queued behind
// its L2 flush before anything is waited for, so the events time the GPU work, not the host's
// launch overhead (as in a decode step captured in a CUDA graph).
// --sweep adds a table of launch shapes (cuda::detail::SplitTuning) at 32K and 128K.
//
//   attention_cuda_bench [--repeats N] [--max-depth TOKENS] [--verify T] [--sweep] [--type f16|q8_0|q4_0]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/attention_qkeys.cuh"

namespace {

using namespace weft;

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "attention_cuda_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Deterministic pseudo-random N(0,1)-ish values (sum of uniforms), generated on the device.
__global__ void fill_random(float* x, int64_t n, uint64_t seed) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint64_t h = (uint64_t(i) + seed) * 0x9E3779B97F4A7C15ull;
  float s = 0;
  for (int k = 0; k < 4; ++k) {
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    s += float(h >> 40) / float(1 << 24);
  }
  x[i] = (s - 2.0f) * 1.7320508f;
}

// Reads `n` 16-byte words and keeps the result out of reach of the optimiser: an L2 flush that
// leaves only clean lines behind (a memset flush leaves ~50 MB of dirty lines whose write-back
// would compete with the timed kernel's reads).
__global__ void flush_read(const uint4* x, int64_t n, unsigned* sink) {
  unsigned acc = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = x[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // practically never; the loads cannot be dropped
}

// Median GPU time (µs) of `repeats` runs of `run`, each behind a read-only L2 flush of `flush_bytes`.
template <typename Fn>
double time_us(cudaStream_t stream, void* flush, size_t flush_bytes, int repeats, const Fn& run) {
  std::vector<cudaEvent_t> ev(size_t(2 * repeats));
  for (auto& e : ev) ck(cudaEventCreate(&e), "event");
  run();  // warm-up (and first-use setup)
  for (int r = 0; r < repeats; ++r) {
    flush_read<<<1056, 512, 0, stream>>>(static_cast<const uint4*>(flush), int64_t(flush_bytes / 16),
                                         static_cast<unsigned*>(flush));
    ck(cudaGetLastError(), "flush");
    ck(cudaEventRecord(ev[size_t(2 * r)], stream), "record");
    run();
    ck(cudaEventRecord(ev[size_t(2 * r + 1)], stream), "record");
  }
  ck(cudaStreamSynchronize(stream), "sync");
  std::vector<double> us;
  for (int r = 0; r < repeats; ++r) {
    float ms = 0;
    ck(cudaEventElapsedTime(&ms, ev[size_t(2 * r)], ev[size_t(2 * r + 1)]), "elapsed");
    us.push_back(double(ms) * 1e3);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    ck(cudaEventCreate(&a), "event");
    ck(cudaEventCreate(&b), "event");
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  void start(cudaStream_t s) { ck(cudaEventRecord(a, s), "record"); }
  float stop_ms(cudaStream_t s) {
    ck(cudaEventRecord(b, s), "record");
    ck(cudaEventSynchronize(b), "sync");
    float ms = 0;
    ck(cudaEventElapsedTime(&ms, a, b), "elapsed");
    return ms;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

const char* type_name(DType t) { return t == DType::kF16 ? "f16" : t == DType::kQ8_0 ? "q8_0" : "q4_0"; }

}  // namespace

int main(int argc, char** argv) {
  int repeats = 31, verify_T = 0;
  bool sweep = false;
  std::string only_type;
  int64_t max_depth = 256 * 1024;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> long long {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "attention_cuda_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      char* end = nullptr;
      const long long v = std::strtoll(argv[++i], &end, 10);
      if (!end || *end || v <= 0) {
        std::fprintf(stderr, "attention_cuda_bench: bad value for %s\n", a.c_str());
        std::exit(2);
      }
      return v;
    };
    if (a == "--repeats") repeats = int(next());
    else if (a == "--max-depth") max_depth = next();
    else if (a == "--verify") verify_T = int(next());
    else if (a == "--sweep") sweep = true;
    else if (a == "--type" && i + 1 < argc) {
      only_type = argv[++i];
      if (only_type != "f16" && only_type != "q8_0" && only_type != "q4_0") {
        std::fprintf(stderr, "attention_cuda_bench: --type must be f16, q8_0 or q4_0\n");
        return 2;
      }
    }
    else {
      std::fprintf(stderr,
                   "usage: attention_cuda_bench [--repeats N] [--max-depth TOKENS] [--verify T] [--sweep] "
                   "[--type f16|q8_0|q4_0]\n");
      return 2;
    }
  }
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::fprintf(stderr, "attention_cuda_bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  ck(cudaGetDeviceProperties(&prop, 0), "properties");
  cudaStream_t stream;
  ck(cudaStreamCreate(&stream), "stream");

  const int64_t n_heads = 16, n_kv = 2, hd = 256, page_tokens = 256;
  const int64_t depths_all[] = {8192, 32768, 65536, 131072, 262144};
  std::vector<int64_t> depths;
  for (int64_t d : depths_all)
    if (d <= max_depth) depths.push_back(d);
  if (depths.empty()) depths.push_back(max_depth);
  const int64_t cap = *std::max_element(depths.begin(), depths.end());

  // Copy bandwidth: a 1 GiB device-to-device copy, (read + write bytes) / time, median.
  const size_t copy_bytes = size_t(1) << 30;
  void *src = nullptr, *dst = nullptr;
  ck(cudaMalloc(&src, copy_bytes), "malloc");
  ck(cudaMalloc(&dst, copy_bytes), "malloc");
  ck(cudaMemset(src, 1, copy_bytes), "memset");
  Timer timer;
  std::vector<double> copy_ms;
  for (int r = 0; r < 11; ++r) {
    timer.start(stream);
    ck(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, stream), "copy");
    copy_ms.push_back(timer.stop_ms(stream));
  }
  const double copy_gbs = 2.0 * double(copy_bytes) / (median(copy_ms) * 1e-3) / 1e9;
  ck(cudaFree(dst), "free");
  // src stays as the L2 flush buffer (read before each timed repeat).

  // Query, output.
  const int T = verify_T > 0 ? verify_T : 1;
  float *q = nullptr, *out = nullptr;
  ck(cudaMalloc(&q, size_t(T * n_heads * hd) * 4), "malloc");
  ck(cudaMalloc(&out, size_t(T * n_heads * hd) * 4), "malloc");
  fill_random<<<unsigned((T * n_heads * hd + 255) / 256), 256, 0, stream>>>(q, T * n_heads * hd, 7);

  std::map<std::pair<int64_t, int>, double> us;  // (depth, type index) -> median µs
  std::string sweep_rows, parts_rows;
  const bool long_default = cuda::detail::qkeys_long_splits();
  const DType types[] = {DType::kF16, DType::kQ8_0, DType::kQ4_0};
  std::printf("# attention_cuda_bench on %s (%d SMs): %lld Q heads, %lld KV heads, head_dim %lld, T = %d, "
              "median of %d, L2 flushed by a read\n\n",
              prop.name, prop.multiProcessorCount, (long long)n_heads, (long long)n_kv, (long long)hd, T, repeats);
  std::printf("Device-to-device copy bandwidth (read + write): %.0f GB/s\n\n", copy_gbs);
  std::printf("| depth | KV type | KV bytes read (MiB) | time (µs) | GB/s | %% of copy BW | time / f16 | "
              "dim-parallel kernel (µs) | key-parallel kernel (µs) | key-parallel, 256-key splits (round 7) (µs) |\n");
  std::printf("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int ti = 0; ti < 3; ++ti) {
    const DType t = types[ti];
    if (!only_type.empty() && only_type != type_name(t)) continue;
    // One layer of `cap` tokens in device pages, filled with the GPU append from random rows.
    KvLayerView view;
    view.n_kv_heads = n_kv;
    view.head_dim = hd;
    view.page_tokens = page_tokens;
    view.k_type = view.v_type = t;
    view.k_row_bytes = view.v_row_bytes = kv_row_bytes(t, hd);
    const size_t page_bytes = size_t(n_kv * page_tokens) * (view.k_row_bytes + view.v_row_bytes);
    const int64_t n_pages = (cap + page_tokens - 1) / page_tokens;
    uint8_t* pool = nullptr;
    ck(cudaMalloc(&pool, page_bytes * size_t(n_pages)), "malloc pages");
    std::vector<const uint8_t*> table(static_cast<size_t>(n_pages));
    for (int64_t p = 0; p < n_pages; ++p) table[size_t(p)] = pool + size_t(p) * page_bytes;
    const uint8_t** dtable = nullptr;
    ck(cudaMalloc(&dtable, table.size() * sizeof(void*)), "malloc table");
    ck(cudaMemcpy(dtable, table.data(), table.size() * sizeof(void*), cudaMemcpyHostToDevice), "table");
    view.pages = dtable;
    view.n_pages = n_pages;
    view.length = cap;
    const int64_t chunk = 8192;
    float *k = nullptr, *v = nullptr;
    ck(cudaMalloc(&k, size_t(chunk * n_kv * hd) * 4), "malloc");
    ck(cudaMalloc(&v, size_t(chunk * n_kv * hd) * 4), "malloc");
    for (int64_t p0 = 0; p0 < cap; p0 += chunk) {
      const int64_t n = std::min(chunk, cap - p0), vals = n * n_kv * hd;
      fill_random<<<unsigned((vals + 255) / 256), 256, 0, stream>>>(k, vals, uint64_t(p0) * 2 + 1);
      fill_random<<<unsigned((vals + 255) / 256), 256, 0, stream>>>(v, vals, uint64_t(p0) * 2 + 2);
      cuda::kv_append(view, p0, k, v, n, stream);
    }
    ck(cudaStreamSynchronize(stream), "fill");

    for (int64_t depth : depths) {
      AttentionCall c;
      c.kv = view;
      c.kv.length = depth;
      c.args = {q, T, depth - T, n_heads, 1.0f / 16.0f, out};
      void* ws = nullptr;
      // Sized for both split trees (round 7's fixed splits have the most partials).
      cuda::detail::set_qkeys_long_splits(false);
      const size_t ws_fixed = cuda::attention_workspace_bytes(&c, 1);
      cuda::detail::set_qkeys_long_splits(long_default);
      ck(cudaMalloc(&ws, std::max<size_t>(std::max(ws_fixed, cuda::attention_workspace_bytes(&c, 1)), 1)), "malloc ws");
      const double t_us = time_us(stream, src, size_t(256) << 20, repeats, [&] { cuda::attention(&c, 1, ws, stream); });
      ck(cudaGetLastError(), "attention");
      // The same call on each tiled kernel (same workspace: both write the same partials).
      const cuda::detail::SplitTuning saved = cuda::detail::split_tuning();
      double forced_us[3];
      for (int keys = 0; keys < 3; ++keys) {  // dim-parallel, key-parallel, key-parallel with 256-key splits
        cuda::detail::SplitTuning f = saved;
        f.keys_quant = f.keys_f16 = keys >= 1;
        cuda::detail::set_split_tuning(f);
        cuda::detail::set_qkeys_long_splits(keys == 2 ? false : long_default);
        forced_us[keys] = time_us(stream, src, size_t(256) << 20, repeats, [&] { cuda::attention(&c, 1, ws, stream); });
      }
      cuda::detail::set_split_tuning(saved);
      cuda::detail::set_qkeys_long_splits(long_default);
      // Quantized types: the key-parallel call's split kernel alone, its merge alone (on the
      // partials the split kernel left; L2 flushed before it too, so they come from DRAM, where
      // inside a call they are mostly still in L2) and both, per split tree.
      if (t != DType::kF16) {
        const size_t off = 0;
        double part_us[2][3];
        for (int tree = 0; tree < 2; ++tree) {  // long splits (round 8), fixed 256-key splits (round 7)
          cuda::detail::set_qkeys_long_splits(tree == 0);
          for (int what = 0; what < 3; ++what)
            part_us[tree][what] = time_us(stream, src, size_t(256) << 20, repeats, [&] {
              cuda::detail::attention_qkeys_parts(&c, &off, 1, static_cast<uint8_t*>(ws), stream, what != 1, what != 0);
            });
        }
        cuda::detail::set_qkeys_long_splits(long_default);
        char line[240];
        std::snprintf(line, sizeof line, "| %lldK | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n",
                      (long long)(depth / 1024), type_name(t), part_us[0][0], part_us[0][1], part_us[0][2],
                      part_us[1][0], part_us[1][1], part_us[1][2]);
        parts_rows += line;
      }
      const double bytes = double(depth) * double(n_kv) * double(view.k_row_bytes + view.v_row_bytes);
      const double gbs = bytes / (t_us * 1e-6) / 1e9;
      us[{depth, ti}] = t_us;
      char ratio[32] = "1.00";
      if (ti > 0) std::snprintf(ratio, sizeof ratio, "%.2f", t_us / us[{depth, 0}]);
      std::printf("| %lldK | %s | %.1f | %.1f | %.0f | %.0f%% | %s | %.1f | %.1f | %.1f |\n",
                  (long long)(depth / 1024), type_name(t), bytes / 1048576.0, t_us, gbs, 100.0 * gbs / copy_gbs,
                  ratio, forced_us[0], forced_us[1], forced_us[2]);
      std::fflush(stdout);
      ck(cudaFree(ws), "free");
    }
    if (sweep) {
      // Launch shapes: default; the key-parallel kernel, with the deepest ring (fewer blocks per
      // SM), with runs of splits for 2 blocks per SM, with a 2-stage ring; the dim-parallel
      // kernel, with four warps, without direct fragments.
      struct Shape {
        const char* name;
        cuda::detail::SplitTuning t;
      };
      const cuda::detail::SplitTuning d = cuda::detail::split_tuning();
      std::vector<Shape> shapes = {{"default", d}};
      shapes.push_back({"key-parallel, 256-key splits (round 7)", d});  // long splits off below
      shapes.back().t.keys_quant = shapes.back().t.keys_f16 = true;
      shapes.push_back({"key-parallel, 256-key splits (round 7), merge without PDL", d});
      shapes.back().t.keys_quant = shapes.back().t.keys_f16 = true;
      shapes.back().t.qkeys_pdl_merge = false;
      shapes.push_back({"key-parallel kernel", d});
      shapes.back().t.keys_quant = shapes.back().t.keys_f16 = true;
      shapes.push_back({"key-parallel, 4 stages, 227 KiB", d});
      shapes.back().t.keys_quant = shapes.back().t.keys_f16 = true;
      shapes.back().t.keys_smem_target = 227 * 1024;
      shapes.push_back({"key-parallel, runs for 2 blocks/SM", d});
      shapes.back().t.keys_quant = shapes.back().t.keys_f16 = true;
      shapes.back().t.keys_blocks_per_sm = 2;
      shapes.push_back({"key-parallel, 2 stages", d});
      shapes.back().t.keys_quant = shapes.back().t.keys_f16 = true;
      shapes.back().t.max_stages = 2;
      shapes.push_back({"key-parallel, plain loop (not pipelined)", d});
      shapes.back().t.keys_quant = shapes.back().t.keys_f16 = true;
      shapes.back().t.qkeys_pipelined = false;
      shapes.push_back({"key-parallel, plain loop, 3 stages within 100 KiB", d});
      shapes.back().t.keys_quant = shapes.back().t.keys_f16 = true;
      shapes.back().t.qkeys_pipelined = false;
      shapes.back().t.max_stages = 3;
      shapes.back().t.keys_smem_target = 100 * 1024;
      shapes.push_back({"key-parallel, merge without PDL", d});
      shapes.back().t.keys_quant = shapes.back().t.keys_f16 = true;
      shapes.back().t.qkeys_pdl_merge = false;
      shapes.push_back({"key-parallel, V as words", d});
      shapes.back().t.keys_quant = shapes.back().t.keys_f16 = true;
      shapes.back().t.qkeys_vwords = true;
      shapes.push_back({"key-parallel, query loaded before the first copies (early_query)", d});
      shapes.back().t.keys_quant = shapes.back().t.keys_f16 = true;
      shapes.back().t.qkeys_early_query = true;
      shapes.push_back({"key-parallel, pipelined for 3 blocks/SM", d});
      shapes.back().t.keys_quant = shapes.back().t.keys_f16 = true;
      shapes.back().t.qkeys_pipe3 = true;
      shapes.push_back({"dim-parallel kernel", d});
      shapes.back().t.keys_quant = shapes.back().t.keys_f16 = false;
      shapes.push_back({"dim-parallel, 4 warps", d});
      shapes.back().t.keys_quant = shapes.back().t.keys_f16 = false;
      shapes.back().t.wide = false;
      shapes.push_back({"dim-parallel, no direct fragments", d});  // quantized K/V through an f16 tile
      shapes.back().t.keys_quant = shapes.back().t.keys_f16 = false;
      shapes.back().t.direct = false;
      for (int64_t depth : {int64_t(32768), int64_t(131072)}) {
        if (depth > cap) continue;
        AttentionCall c;
        c.kv = view;
        c.kv.length = depth;
        c.args = {q, T, depth - T, n_heads, 1.0f / 16.0f, out};
        void* ws = nullptr;
        cuda::detail::set_qkeys_long_splits(false);
        const size_t ws_fixed = cuda::attention_workspace_bytes(&c, 1);
        cuda::detail::set_qkeys_long_splits(long_default);
        ck(cudaMalloc(&ws, std::max<size_t>(std::max(ws_fixed, cuda::attention_workspace_bytes(&c, 1)), 1)), "malloc ws");
        for (const Shape& sh : shapes) {
          cuda::detail::set_split_tuning(sh.t);
          cuda::detail::set_qkeys_long_splits(std::strstr(sh.name, "round 7") ? false : long_default);
          const double t_us =
              time_us(stream, src, size_t(256) << 20, 11, [&] { cuda::attention(&c, 1, ws, stream); });
          const double bytes = double(depth) * double(n_kv) * double(view.k_row_bytes + view.v_row_bytes);
          char line[200];
          std::snprintf(line, sizeof line, "| %lldK | %s | %s | %.1f | %.0f%% |\n", (long long)(depth / 1024),
                        type_name(t), sh.name, t_us, 100.0 * bytes / (t_us * 1e-6) / 1e9 / copy_gbs);
          sweep_rows += line;
        }
        cuda::detail::set_split_tuning(d);
        cuda::detail::set_qkeys_long_splits(long_default);
        ck(cudaFree(ws), "free");
      }
    }
    ck(cudaFree(k), "free");
    ck(cudaFree(v), "free");
    ck(cudaFree(dtable), "free");
    ck(cudaFree(pool), "free");
  }
  std::printf("\nTime ratios (lower is faster): ");
  if (only_type.empty())
    for (int64_t depth : depths)
    std::printf("%lldK q8_0/f16 %.2f q4_0/f16 %.2f; ", (long long)(depth / 1024), us[{depth, 1}] / us[{depth, 0}],
                us[{depth, 2}] / us[{depth, 0}]);
  std::printf("\n");
  if (!parts_rows.empty()) {
    std::printf("\nWhere a quantized call's time goes (key-parallel kernel; µs, median; merge alone reads its "
                "partials from DRAM):\n\n| depth | KV type | long splits: split kernel | merge | call | "
                "256-key splits (round 7): split kernel | merge | call |\n|---:|---|---:|---:|---:|---:|---:|---:|\n%s",
                parts_rows.c_str());
  }
  if (sweep) {
    std::printf("\nLaunch shapes (median of 11):\n\n| depth | KV type | shape | time (µs) | %% of copy BW |\n"
                "|---:|---|---|---:|---:|\n%s",
                sweep_rows.c_str());
  }
  return 0;
}
