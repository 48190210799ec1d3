// attention_quant_bench: one layer's decode attention (T = 1) over a KV cache of a given depth,
// the strict f16 kernel the CPU backend runs (attention_f16_strict), the frozen f16 kernel it
// must equal bit for bit, and the quantized-KV kernel (q8_0 K and V), alternated call by call,
// so a busy neighbour hits all alike. A command, not a test.
//
//   build/attention_quant_bench [--depth 32768] [--heads 16] [--kv-heads 2] [--head-dim 256]
//                               [--threads 1] [--rounds 20] [--layers 8]
//
// The KV cache of --layers layers is filled with N(0,1) rows (so a call reads from DRAM, not from
// the cache the previous call left warm: calls cycle over the layers); the f16 and q8_0 caches
// hold the same values. Prints, per arm, best and median ms per call and GB/s of KV bytes, then
// the speed ratio q8_0 / f16 against the byte ratio (the ceiling a bytes-bound kernel would
// reach: what `weft bench` calls the KV share ceiling, here with KV only).
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
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_f16_prefill.h"
#include "kernels/cpu/attention_quant.h"
#include "kernels/cpu/kv_quant.h"

using namespace weft;

namespace {

struct Cache {
  DType type;
  size_t row_bytes = 0;
  int64_t page_tokens = 0;
  std::vector<uint8_t> storage;              // one page per layer: [K heads][V heads] rows
  std::vector<const uint8_t*> page;          // page table of one layer (a single page)
  KvLayerView view(int layer, int64_t depth, int64_t n_kv, int64_t hd) {
    page[size_t(layer)] = storage.data() + size_t(layer) * size_t(2 * n_kv * page_tokens) * row_bytes;
    KvLayerView v;
    v.pages = &page[size_t(layer)];
    v.n_pages = 1;
    v.length = depth;
    v.page_tokens = page_tokens;
    v.n_kv_heads = n_kv;
    v.head_dim = hd;
    v.k_type = v.v_type = type;
    v.k_row_bytes = v.v_row_bytes = row_bytes;
    return v;
  }
};

}  // namespace

int main(int argc, char** argv) {
  int64_t depth = 32768, heads = 16, n_kv = 2, hd = 256;
  int threads = 1, rounds = 20, layers = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> long long {
      if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n", a.c_str()); std::exit(2); }
      return std::atoll(argv[++i]);
    };
    if (a == "--depth") depth = next();
    else if (a == "--heads") heads = next();
    else if (a == "--kv-heads") n_kv = next();
    else if (a == "--head-dim") hd = next();
    else if (a == "--threads") threads = int(next());
    else if (a == "--rounds") rounds = int(next());
    else if (a == "--layers") layers = int(next());
    else { std::fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
  }
  if (depth < 1 || n_kv < 1 || heads % n_kv != 0 || hd % 32 != 0 || layers < 1 || rounds < 1 || threads < 1) {
    std::fprintf(stderr, "need depth >= 1, heads a multiple of kv-heads, head-dim a multiple of 32\n");
    return 2;
  }
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0, 1);
  Cache caches[2] = {{DType::kF16}, {DType::kQ8_0}};
  for (Cache& c : caches) {
    c.row_bytes = dtype_bytes(c.type, size_t(hd));
    c.page_tokens = depth;
    c.storage.resize(size_t(layers) * size_t(2 * n_kv * depth) * c.row_bytes);
    c.page.resize(size_t(layers));
  }
  std::vector<float> row(static_cast<size_t>(hd));
  for (size_t r = 0; r < size_t(layers) * size_t(2 * n_kv * depth); ++r) {
    for (auto& v : row) v = g(rng);
    for (Cache& c : caches) encode_kv_row(c.type, row.data(), c.storage.data() + r * c.row_bytes, hd);
  }
  std::vector<float> q(size_t(heads * hd)), out(q.size()), out_frozen(q.size());
  for (auto& v : q) v = g(rng);
  AttentionArgs args;
  args.q = q.data();
  args.T = 1;
  args.pos0 = depth - 1;
  args.n_heads = heads;
  args.scale = 1.0f / std::sqrt(float(hd));
  args.out = out.data();
  ThreadPool pool(threads);
  // Arms: 0 = f16 as the backend runs it, 1 = the frozen f16 kernel, 2 = q8_0.
  constexpr int kArms = 3;
  const char* names[kArms] = {"f16", "frozen", "q8_0"};
  std::vector<double> times[kArms];
  bool same_bits = true;
  for (int r = -2; r < rounds; ++r) {
    for (int arm = 0; arm < kArms; ++arm) {
      const KvLayerView v = caches[arm == 2 ? 1 : 0].view((r + 2) % layers, depth, n_kv, hd);
      args.out = arm == 1 ? out_frozen.data() : out.data();
      const auto t0 = std::chrono::steady_clock::now();
      if (arm == 0) attention_f16_strict(v, args, &pool);
      else if (arm == 1) attention_f16(v, args, &pool);
      else attention_quant(v, args, &pool);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r >= 0) times[arm].push_back(s);
      if (arm == 1) same_bits = same_bits && std::memcmp(out.data(), out_frozen.data(), out.size() * 4) == 0;
    }
  }
  std::printf("depth %lld, %lld heads / %lld kv heads, head_dim %lld, %d thread(s), %d rounds over %d layers, %s\n",
              (long long)depth, (long long)heads, (long long)n_kv, (long long)hd, threads, rounds, layers,
              kernel_path_description().c_str());
  double med[kArms];
  for (int arm = 0; arm < kArms; ++arm) {
    std::sort(times[arm].begin(), times[arm].end());
    const double bytes = double(2 * n_kv * depth) * double(caches[arm == 2 ? 1 : 0].row_bytes);
    med[arm] = times[arm][times[arm].size() / 2];
    std::printf("%-6s KV %7.1f MiB  best %7.3f ms  median %7.3f ms  %6.2f GB/s (median)\n", names[arm],
                bytes / (1 << 20), times[arm].front() * 1e3, med[arm] * 1e3, bytes / med[arm] / 1e9);
  }
  std::printf("f16 / frozen: speed %.3f (median), outputs %s\n", med[1] / med[0],
              same_bits ? "bit-identical" : "DIFFER (a defect)");
  const double byte_ratio = double(caches[0].row_bytes) / double(caches[1].row_bytes);
  std::printf("speed q8_0 / f16 = %.3f (median), byte ceiling %.3f, ratio / ceiling %.3f\n", med[0] / med[2],
              byte_ratio, med[0] / med[2] / byte_ratio);
  return same_bits ? 0 : 1;
}
