// The key-parallel split attention kernel's host side and merge (issue 11, rounds 6-8): picks the
// compiled kernel of a call (attention_qkeys_kernel.cuh, instantiated per K type in
// attention_qkeys_k{f16,q8,q4}.cu), sizes its launch, and folds the partials (a row's split tree:
// attention_qkeys.cuh).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/attention_qkeys.cuh"
#include "kernels/cuda/attention_qkeys_kernel.cuh"
#include "kernels/cuda/common.cuh"

namespace weft::cuda::detail {

using namespace qkeys;

namespace {

// -1: not set by set_qkeys_long_splits (the environment's choice holds).
std::atomic<int> g_long_splits{-1};

// The partial cap of the calls made now (0: round 7's tree).
int part_cap_now() { return qkeys_long_splits() ? kQMaxParts : 0; }

// ---- The merge of the partials ----
// merge_kernel's fold (attention_split.cu: the same two-level order and arithmetic) over a row's
// partials, however many sub-splits each covers, launched with programmatic dependent launch so its
// launch and block set-up overlap the split kernel's tail; pdl_begin waits for the split kernel's
// completion before any partial is read. W warps fold W groups of kFoldGroup partials side by
// side, then warp 0 folds the groups in order: 8 with the long splits (at most 128 partials, so 8
// groups), 32 with round 7's tree (up to 512 partials at 128K).
constexpr int kMergeWarpsLong = kQMaxParts / kFoldGroup;
constexpr int kMergeWarpsFixed = 32;

struct QMergeCall {
  const float* part;
  float* out;
  int64_t pos0;
  int n_heads, n_parts, part_cap, hd, block_begin;
};
struct QMergeLaunch {
  QMergeCall calls[kMaxCalls];
  int n_calls;
};

template <int kMergeWarps>
__global__ void __launch_bounds__(32 * kMergeWarps) qmerge_kernel(const __grid_constant__ QMergeLaunch launch) {
  pdl_begin();
  __shared__ float slot_acc[kMergeWarps][32], slot_m[kMergeWarps], slot_l[kMergeWarps];
  const int bid = int(blockIdx.x);
  int ci = 0;
  while (ci + 1 < launch.n_calls && launch.calls[ci + 1].block_begin <= bid) ++ci;
  const QMergeCall& c = launch.calls[ci];
  const int chunks = c.hd / 32, local = bid - c.block_begin;
  const int row = local / chunks, d = (local % chunks) * 32 + threadIdx.x % 32, w = threadIdx.x / 32;
  const int t = row / c.n_heads;
  const int ns = qkeys_parts(int(c.pos0) + t + 1, c.part_cap);  // this row's partials
  const int ng = (ns + kFoldGroup - 1) / kFoldGroup;
  const float* p = c.part + int64_t(row) * c.n_parts * (c.hd + 2);
  float acc = 0, m = 0, l = 0;  // warp 0: the running total
  for (int base = 0; base < ng; base += kMergeWarps) {
    const int gi = base + w;
    if (gi < ng) {
      const int s0 = gi * kFoldGroup, n = min(kFoldGroup, ns - s0);
      float xa[kFoldGroup], xm[kFoldGroup], xl[kFoldGroup];
#pragma unroll
      for (int k = 0; k < kFoldGroup; ++k)
        if (k < n) {
          const float* ps = p + int64_t(s0 + k) * (c.hd + 2);
          xa[k] = ps[d];
          xm[k] = ps[c.hd];
          xl[k] = ps[c.hd + 1];
        }
      float ga = xa[0], gm = xm[0], gl = xl[0];
#pragma unroll
      for (int k = 1; k < kFoldGroup; ++k)
        if (k < n) {
          float fm, fa, fb;
          fold_scales(gm, xm[k], &fm, &fa, &fb);
          ga = fold_value(ga, fa, xa[k], fb);
          gl = fold_value(gl, fa, xl[k], fb);
          gm = fm;
        }
      slot_acc[w][threadIdx.x % 32] = ga;
      if (threadIdx.x % 32 == 0) {
        slot_m[w] = gm;
        slot_l[w] = gl;
      }
    }
    __syncthreads();
    if (w == 0) {
      for (int k = 0; k < kMergeWarps && base + k < ng; ++k) {
        const float ga = slot_acc[k][threadIdx.x], gm = slot_m[k], gl = slot_l[k];
        if (base + k == 0) {
          acc = ga;
          m = gm;
          l = gl;
        } else {
          float fm, fa, fb;
          fold_scales(m, gm, &fm, &fa, &fb);
          acc = fold_value(acc, fa, ga, fb);
          l = fold_value(l, fa, gl, fb);
          m = fm;
        }
      }
    }
    __syncthreads();
  }
  if (w == 0) c.out[int64_t(row) * c.hd + d] = acc * (1.0f / l);
}

// ---- Host side ----


// Blocks per SM the pipelined loop is compiled for: 2, or with SplitTuning::qkeys_pipe3 3 where
// its head_dim-256 code fits 168 registers without spilling (a quantized K with a q8_0 V: 157-168
// registers, by ptxas -v; q4_0 V and f16 K need ~220).
int pipelined_blocks_of(int kt, int vt, const SplitTuning& t) {
  return t.qkeys_pipe3 && kt != kKvF16 && vt == kKvQ8 ? 3 : 2;
}

Config config_of(const AttentionCall& call) {
  const int64_t rows = call.args.T * (call.args.n_heads / call.kv.n_kv_heads);
  const int hd = int(call.kv.head_dim), kt = kv_type_of(call.kv.k_type), vt = kv_type_of(call.kv.v_type);
  if (rows > kMaxRowsPartial) return {hd, 1, kt, vt, true, 0, false};  // prefill: fold in-block
  // The pipelined loop for one n-tile of rows (decode); two n-tiles (verify) keep the plain one
  // (their registers leave no room for two sub-tiles in flight).
  const SplitTuning t = split_tuning();
  const bool pipe = rows <= 8 && t.qkeys_pipelined;
  const int blocks = !pipe ? 0 : pipelined_blocks_of(kt, vt, t);
  const bool vw = blocks == 2 && t.qkeys_vwords && hd == 256 && kt != kKvF16 && vt == kKvQ8;
  return {hd, rows <= 8 ? 1 : 2, kt, vt, false, blocks, vw};
}

// 256-key sub-splits of the call's longest row, and partial slots per row (an upper bound of every
// row's partials: the cap, or the sub-splits when fewer).
int n_sub_of(const AttentionCall& call) { return qkeys_sub_splits(int(call.args.pos0 + call.args.T)); }
int n_parts_of(const AttentionCall& call, int cap) { return cap > 0 ? std::min(cap, n_sub_of(call)) : n_sub_of(call); }

size_t layout_bytes(const Config& cfg, int stages) {
  return make_layout(cfg.hd, cfg.nt, cfg.fold, cfg.kt, cfg.vt, stages).total;
}

// Ring depth: as deep as the shared-memory target allows (2..max_stages); at least 2 whatever
// the target.
int stages_of(const Config& cfg) {
  if (cfg.pipe != 0) return 2;  // the pipelined loop's two K and two V slots
  const SplitTuning t = split_tuning();
  int stages = std::max(2, std::min(4, t.max_stages));
  while (stages > 2 && layout_bytes(cfg, stages) > t.keys_smem_target) --stages;
  return stages;
}

int sm_count() {
  static int cached[64] = {};
  int dev = 0;
  check(cudaGetDevice(&dev), "attention: device");
  if (dev < 0 || dev >= 64) return 132;
  if (cached[dev] == 0) check(cudaDeviceGetAttribute(&cached[dev], cudaDevAttrMultiProcessorCount, dev), "attention: SMs");
  return cached[dev];
}

KernelFn kernel_of(const Config& cfg) {
  KernelFn k = nullptr;
  if (cfg.kt == kKvF16) k = kernel_for_k<kKvF16>(cfg);
  else if (cfg.kt == kKvQ8) k = kernel_for_k<kKvQ8>(cfg);
  else if (cfg.kt == kKvQ4) k = kernel_for_k<kKvQ4>(cfg);
  if (!k) throw std::logic_error("attention: no quantized key-parallel kernel for this configuration");
  return k;
}

// Blocks of kernel k with `smem` bytes that one SM holds (registers and shared memory), after
// lifting the kernel's dynamic shared-memory limit once per device. Cached: one query per
// (device, kernel, size).
int resident_blocks(KernelFn k, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, size_t>, int> cache;
  int dev = 0;
  check(cudaGetDevice(&dev), "attention: device");
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(dev, reinterpret_cast<const void*>(k), smem);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  check(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024),
        "attention: shared memory limit");
  int n = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, kThreads, smem), "attention: occupancy");
  n = std::max(1, n);
  cache[key] = n;
  return n;
}

}  // namespace

bool qkeys_supports(const AttentionCall& call) {
  const KvLayerView& kv = call.kv;
  const int kt = kv_type_of(kv.k_type), vt = kv_type_of(kv.v_type);
  const bool types = (kt == kKvF16 || kt == kKvQ8 || kt == kKvQ4) && (vt == kKvF16 || vt == kKvQ8 || vt == kKvQ4);
  const bool hd = kv.head_dim == 64 || kv.head_dim == 128 || kv.head_dim == 256;
  return types && hd && kv.k_row_bytes == row_bytes_of(kt, int(kv.head_dim)) &&
         kv.v_row_bytes == row_bytes_of(vt, int(kv.head_dim)) && kv.page_tokens % 32 == 0 &&
         kv.page_tokens <= int64_t(1) << 30 && call.args.pos0 + call.args.T <= int64_t(1) << 30 &&
         call.args.T * call.args.n_heads <= int64_t(1) << 24;
}

size_t qkeys_workspace_bytes(const AttentionCall& call) {
  if (config_of(call).fold) return 0;
  return size_t(call.args.T * call.args.n_heads) * size_t(n_parts_of(call, part_cap_now())) *
         size_t(call.kv.head_dim + 2) * sizeof(float);
}

bool qkeys_long_splits() {
  static const bool by_env = [] {
    const char* e = std::getenv("WEFT_CUDA_ATTN_LONG_SPLITS");
    return !(e && std::string(e) == "0");
  }();
  const int set = g_long_splits.load();
  return set < 0 ? by_env : set != 0;
}

void set_qkeys_long_splits(bool on) { g_long_splits.store(on ? 1 : 0); }

void attention_qkeys(const AttentionCall* calls, const size_t* offsets, int64_t n, uint8_t* workspace,
                     cudaStream_t stream) {
  attention_qkeys_parts(calls, offsets, n, workspace, stream, true, true);
}

void attention_qkeys_parts(const AttentionCall* calls, const size_t* offsets, int64_t n, uint8_t* workspace,
                           cudaStream_t stream, bool run_split, bool run_merge) {
  const SplitTuning tuning = split_tuning();
  const int cap = part_cap_now();
  std::vector<bool> done(size_t(n), false);
  std::vector<int64_t> merge_calls;
  for (int64_t first = 0; first < n; ++first) {
    if (done[size_t(first)]) continue;
    const Config cfg = config_of(calls[first]);
    QLaunch l{};
    int blocks = 0;
    size_t smem = 0;
    const KernelFn kernel = kernel_of(cfg);
    auto flush = [&]() {
      if (l.n_calls == 0 || !run_split) return;
      resident_blocks(kernel, smem);  // the shared-memory limit is lifted before the first launch
      kernel<<<unsigned(blocks), kThreads, smem, stream>>>(l);
      check(cudaGetLastError(), "attention (quantized key-parallel) launch");
      l = QLaunch{};
      blocks = 0;
      smem = 0;
    };
    for (int64_t i = first; i < n; ++i) {
      if (done[size_t(i)] || !(config_of(calls[i]) == cfg)) continue;
      done[size_t(i)] = true;
      const AttentionCall& call = calls[i];
      const KvLayerView& kv = call.kv;
      QCall& kc = l.calls[l.n_calls++];
      kc.pages = kv.pages;
      kc.q = call.args.q;
      kc.out = call.args.out;
      kc.part = reinterpret_cast<float*>(workspace + offsets[i]);
      kc.pos0 = int(call.args.pos0);
      kc.page_tokens = int(kv.page_tokens);
      kc.T = int(call.args.T);
      kc.n_heads = int(call.args.n_heads);
      kc.n_kv = int(kv.n_kv_heads);
      kc.group = int(call.args.n_heads / kv.n_kv_heads);
      kc.n_rowgroups = int((int64_t(kc.T) * kc.group + 8 * cfg.nt - 1) / (8 * cfg.nt));
      kc.n_sub = n_sub_of(call);
      kc.part_cap = cap;
      kc.n_parts = n_parts_of(call, cap);
      kc.stages = stages_of(cfg);
      const size_t bytes = layout_bytes(cfg, kc.stages);
      // Runs of sub-splits sized so a long call fills the GPU once with the blocks that fit per SM
      // (registers and shared memory), in whole split groups of the call's longest row (so no run
      // cuts a row's partial; the result does not depend on the run length).
      const int fit = resident_blocks(kernel, bytes);
      const int64_t target = int64_t(std::max(1, std::min(tuning.keys_blocks_per_sm, fit))) * sm_count();
      const int64_t at_one = int64_t(kc.n_kv) * kc.n_rowgroups * kc.n_sub;
      const int group = qkeys_split_group(int(call.args.pos0 + call.args.T), cap);
      const int64_t run = std::max<int64_t>(1, std::min<int64_t>(kc.n_sub, (at_one + target - 1) / target));
      kc.splits_per_block = cfg.fold ? kc.n_sub : int((run + group - 1) / group * group);
      kc.scale = call.args.scale;
      kc.early_query = tuning.qkeys_early_query ? 1 : 0;
      kc.block_begin = blocks;
      const int runs = (kc.n_sub + kc.splits_per_block - 1) / kc.splits_per_block;
      blocks += kc.n_kv * kc.n_rowgroups * (cfg.fold ? 1 : runs);
      smem = std::max(smem, bytes);
      if (!cfg.fold) merge_calls.push_back(i);
      if (l.n_calls == kMaxCalls) flush();
    }
    flush();
  }
  if (!run_merge) return;
  QMergeLaunch m{};
  int blocks = 0;
  auto flush_merge = [&]() {
    if (m.n_calls == 0) return;
    // SplitTuning::qkeys_pdl_merge = false, or the legacy default stream: a plain launch
    // (pdl_begin's wait is then a no-op).
    const bool pdl = tuning.qkeys_pdl_merge && stream != nullptr;
    auto launch = [&](auto kernel, int warps) {
      if (pdl) {
        launch_pdl(kernel, dim3(unsigned(blocks)), dim3(32 * warps), 0, stream, m);
      } else {
        kernel<<<unsigned(blocks), 32 * warps, 0, stream>>>(m);
        check(cudaGetLastError(), "attention (merge) launch");
      }
    };
    if (cap > 0) launch(qmerge_kernel<kMergeWarpsLong>, kMergeWarpsLong);
    else launch(qmerge_kernel<kMergeWarpsFixed>, kMergeWarpsFixed);
    m = QMergeLaunch{};
    blocks = 0;
  };
  for (const int64_t i : merge_calls) {
    const AttentionCall& call = calls[i];
    QMergeCall& mc = m.calls[m.n_calls++];
    mc.part = reinterpret_cast<const float*>(workspace + offsets[i]);
    mc.out = call.args.out;
    mc.pos0 = call.args.pos0;
    mc.n_heads = int(call.args.n_heads);
    mc.n_parts = n_parts_of(call, cap);
    mc.part_cap = cap;
    mc.hd = int(call.kv.head_dim);
    mc.block_begin = blocks;
    blocks += int(call.args.T * call.args.n_heads) * (mc.hd / 32);
    if (m.n_calls == kMaxCalls) flush_merge();
  }
  flush_merge();
}

}  // namespace weft::cuda::detail
