// The tiled split attention kernel (flash-decoding) for f16, q8_0 and q4_0 KV caches.
//
// Work split. The keys of a call are cut into splits of kAttnSplitKeys (fixed). One thread block
// (4 warps) takes one kv head, one group of up to 16·MT query rows of that head's GQA group
// (row r = t·G + i: query token t, head i of the group) and one split, and walks it in tiles of
// kTileKeys keys. So each K/V byte of a tile is loaded from global memory once per block and
// serves every query head of the group (and, for a verify call of T ≤ 64/G rows, every row):
// the GQA sharing the byte model counts on.
//
// Per tile:
//  1. Load: the tile's K and V bytes are contiguous inside one page (page_tokens % 32 == 0), so
//     they are copied with 16-byte cp.async, several tiles ahead (a multi-stage pipeline), whatever
//     the row size (q8_0 blocks are 34 bytes: the copy ignores block boundaries). f16 rows land
//     straight in the padded f16 tile; quantized rows land raw and are dequantized to f16 in
//     registers by all threads (q·d rounded to f16), then stored padded.
//  2. Scores on tensor cores (mma m16n8k16, f16 in, f32 accumulate): each warp multiplies a
//     quarter of head_dim; the four partial score tiles are added in warp order. The query is
//     split into f16 hi + lo parts (q = hi + lo to ~22 bits), two products per step, so the
//     scores keep near-f32 accuracy.
//  3. Online softmax per row in f32 (a warp per row, a lane per key).
//  4. P·V on tensor cores, P split into hi + lo as well; each warp owns a quarter of head_dim of
//     the output accumulator (registers), rescaled by the row's alpha each tile.
//
// Results: a decode or verify call writes each (row, split) partial (m, l, unnormalised acc) to
// the workspace and merge_kernel folds a row's splits left to right; a prefill call (many rows)
// folds its splits inside the block in the same order with the same arithmetic (fold_* in
// attention_common.cuh). Masked keys add exact zeros. Hence a row's bits depend only on its
// position and its sequence's cache: decode, verify and prefill agree bit for bit, and nothing
// depends on the batch.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_kernels.cuh"

namespace weft::cuda::detail {

namespace {

constexpr int kTileKeys = 32;    // keys per tile (= lanes of the softmax warp)
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxCallsPerLaunch = 16;
constexpr int kMaxRowsPartial = 64;       // rows of one kv head a split-partial call may have
constexpr size_t kSmemTarget = 113 * 1024;  // two blocks per SM

// ---- Call descriptors (kernel parameters by value: no host->device copies, graph-capturable) ----

struct SplitCall {
  const uint8_t* const* pages;
  const float* q;
  float* out;
  float* part;  // partials [T·n_heads][n_splits][hd + 2] (split-partial mode)
  int64_t pos0, page_tokens;
  int T, n_heads, n_kv, group;
  int k_type, v_type, k_row_bytes, v_row_bytes;
  int n_rowgroups, n_splits, stages;
  float scale;
  int block_begin;  // first block of this call in the launch
};

struct SplitLaunch {
  SplitCall calls[kMaxCallsPerLaunch];
  int n_calls;
};

__host__ __device__ inline int rows_per_block(int mt) { return 16 * mt; }
__host__ __device__ inline size_t align16(size_t n) { return (n + 15) & ~size_t(15); }
__host__ __device__ inline bool is_quant(int t) { return t == kKvQ8 || t == kKvQ4; }

// Shared-memory layout of one block (bytes from the start of dynamic shared memory).
struct Layout {
  size_t q_hi, q_lo, s_part, p_hi, p_lo, stat, merged, k_raw, v_raw, k_f, v_f, total;
  size_t raw_k_tile, raw_v_tile, f_tile;
};

__host__ __device__ inline Layout make_layout(int hd, int mt, bool fold_in_block, int k_type, int v_type,
                                              int k_rb, int v_rb, int stages) {
  const size_t rb = size_t(rows_per_block(mt)), qstr = size_t(hd + 8);
  Layout L{};
  size_t o = 0;
  auto take = [&](size_t bytes) {
    const size_t at = o;
    o += align16(bytes);
    return at;
  };
  L.q_hi = take(rb * qstr * 2);
  L.q_lo = take(rb * qstr * 2);
  L.s_part = take(size_t(kWarps) * rb * (kTileKeys + 4) * 4);
  L.p_hi = take(rb * (kTileKeys + 8) * 2);
  L.p_lo = take(rb * (kTileKeys + 8) * 2);
  L.stat = take(5 * rb * 4);  // m_run, l_run, alpha, m_merged, l_merged
  L.merged = fold_in_block ? take(rb * size_t(hd) * 4) : o;
  L.f_tile = size_t(kTileKeys) * qstr * 2;
  L.raw_k_tile = align16(size_t(kTileKeys) * size_t(k_rb));
  L.raw_v_tile = align16(size_t(kTileKeys) * size_t(v_rb));
  L.k_raw = is_quant(k_type) ? take(size_t(stages) * L.raw_k_tile) : o;
  L.v_raw = is_quant(v_type) ? take(size_t(stages) * L.raw_v_tile) : o;
  L.k_f = take((is_quant(k_type) ? 1 : size_t(stages)) * L.f_tile);
  L.v_f = take((is_quant(v_type) ? 1 : size_t(stages)) * L.f_tile);
  L.total = o;
  return L;
}

// ---- PTX helpers ----

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; src_bytes = 0 writes zeros (rows past the keys).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait(int pending) {
  switch (pending) {  // the operand must be an immediate
    case 0: asm volatile("cp.async.wait_group 0;\n" ::); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::); break;
    default: asm volatile("cp.async.wait_group 3;\n" ::); break;
  }
}

// D += A·B, m16n8k16, f16 inputs, f32 accumulators (PTX fragment layouts).
__device__ __forceinline__ void mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

__device__ __forceinline__ uint32_t pack_half2(uint16_t lo, uint16_t hi) { return uint32_t(lo) | uint32_t(hi) << 16; }

__device__ __forceinline__ uint32_t lds32(const uint16_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// ---- Per-block context ----

struct Block {
  const SplitCall* c;
  int g, rg, split;        // kv head, row group, split (split-partial mode)
  int rows;                // query rows of this kv head (T·G)
  int64_t key_end;         // keys the block's last row sees (exclusive)
  uint8_t* smem;
  Layout L;
};

// Keys that row r (of this kv head) sees: [0, pos0 + t + 1); none for padding rows.
__device__ __forceinline__ int64_t row_keys(const Block& b, int r) {
  return r < b.rows ? b.c->pos0 + r / b.c->group + 1 : 0;
}

// Issues the cp.async copies of tile `k0` (keys [k0, k0 + kTileKeys) of kv head g) into `slot`.
__device__ void issue_tile(const Block& b, int hd, int64_t k0, int slot) {
  const SplitCall& c = *b.c;
  const int valid = int(min64(kTileKeys, b.key_end - k0));
  const uint8_t* page = c.pages[k0 / c.page_tokens];
  const size_t row0 = size_t(b.g) * size_t(c.page_tokens) + size_t(k0 % c.page_tokens);
  const uint8_t* ksrc = page + row0 * size_t(c.k_row_bytes);
  const uint8_t* vsrc = page + size_t(c.n_kv) * size_t(c.page_tokens) * size_t(c.k_row_bytes) + row0 * size_t(c.v_row_bytes);
  for (int which = 0; which < 2; ++which) {
    const int type = which ? c.v_type : c.k_type;
    const uint8_t* src = which ? vsrc : ksrc;
    if (type == kKvF16) {
      // Straight into the padded f16 tile; rows past the keys are zero-filled.
      uint8_t* dst = b.smem + (which ? b.L.v_f : b.L.k_f) + size_t(slot) * b.L.f_tile;
      const int per_row = hd / 8, n = kTileKeys * per_row;
      for (int ch = threadIdx.x; ch < n; ch += kThreads) {
        const int row = ch / per_row, col = ch % per_row;
        const bool ok = row < valid;
        cp_async16(dst + size_t(row) * (hd + 8) * 2 + col * 16, ok ? src + size_t(ch) * 16 : page, ok ? 16 : 0);
      }
    } else {
      // Raw bytes of the whole tile (inside the page), decoded later; rows past the keys are
      // ignored by the decoder.
      const size_t tile = which ? b.L.raw_v_tile : b.L.raw_k_tile;
      uint8_t* dst = b.smem + (which ? b.L.v_raw : b.L.k_raw) + size_t(slot) * tile;
      const int rbytes = which ? c.v_row_bytes : c.k_row_bytes;
      const int n = kTileKeys * rbytes / 16;
      for (int ch = threadIdx.x; ch < n; ch += kThreads) cp_async16(dst + ch * 16, src + size_t(ch) * 16, 16);
    }
  }
}

// Decodes a raw q8_0 / q4_0 tile into the padded f16 tile: value q·d rounded to f16 (rows past
// `valid`: zeros). One thread per (row, 32-value block), in registers, 16-byte stores.
__device__ void dequant_tile(const uint8_t* raw, int type, int rbytes, int hd, int valid, uint16_t* f) {
  const int nb = hd / 32, n = kTileKeys * nb;
  for (int it = threadIdx.x; it < n; it += kThreads) {
    const int row = it / nb, blk = it % nb;
    uint32_t packed[16];
    if (row >= valid) {
      for (int j = 0; j < 16; ++j) packed[j] = 0;
    } else if (type == kKvQ8) {
      const uint8_t* p = raw + size_t(row) * rbytes + blk * 34;
      const uint16_t* p16 = reinterpret_cast<const uint16_t*>(p);  // 2-byte aligned
      const float d = f16_bits_to_f32(p16[0]);
      for (int j = 0; j < 16; ++j) {
        const uint16_t two = p16[1 + j];
        const float x0 = float(int8_t(two & 0xff)) * d, x1 = float(int8_t(two >> 8)) * d;
        packed[j] = pack_half2(__half_as_ushort(__float2half_rn(x0)), __half_as_ushort(__float2half_rn(x1)));
      }
    } else {
      const uint8_t* p = raw + size_t(row) * rbytes + blk * 18;
      const uint16_t* p16 = reinterpret_cast<const uint16_t*>(p);
      const float d = f16_bits_to_f32(p16[0]);
      for (int j = 0; j < 8; ++j) {  // bytes 2j, 2j+1: elements 2j, 2j+1 (low) and 2j+16, 2j+17 (high)
        const uint16_t two = p16[1 + j];
        const int b0 = two & 0xff, b1 = two >> 8;
        const float lo0 = float((b0 & 15) - 8) * d, lo1 = float((b1 & 15) - 8) * d;
        const float hi0 = float((b0 >> 4) - 8) * d, hi1 = float((b1 >> 4) - 8) * d;
        packed[j] = pack_half2(__half_as_ushort(__float2half_rn(lo0)), __half_as_ushort(__float2half_rn(lo1)));
        packed[8 + j] = pack_half2(__half_as_ushort(__float2half_rn(hi0)), __half_as_ushort(__float2half_rn(hi1)));
      }
    }
    uint4* dst = reinterpret_cast<uint4*>(f + size_t(row) * (hd + 8) + blk * 32);
    for (int j = 0; j < 4; ++j)
      dst[j] = make_uint4(packed[4 * j], packed[4 * j + 1], packed[4 * j + 2], packed[4 * j + 3]);
  }
}

// Finds the call of block `bid` in the launch.
__device__ __forceinline__ int find_call(const SplitLaunch& l, int bid) {
  int c = 0;
  while (c + 1 < l.n_calls && l.calls[c + 1].block_begin <= bid) ++c;
  return c;
}

template <int HD, int MT, bool FOLD>
__global__ void __launch_bounds__(kThreads) split_kernel(const __grid_constant__ SplitLaunch launch) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int RB = 16 * MT, QSTR = HD + 8, PSTR = kTileKeys + 8, SSTR = kTileKeys + 4;
  constexpr int KS_W = HD / 4 / 16;  // k-steps of 16 dims per warp (QK)
  constexpr int NT_W = HD / 4 / 8;   // n-tiles of 8 dims per warp (PV)
  const int bid = int(blockIdx.x);
  const SplitCall& c = launch.calls[find_call(launch, bid)];
  const int local = bid - c.block_begin;

  Block b;
  b.c = &c;
  b.smem = smem;
  if (FOLD) {
    b.split = 0;
    b.rg = local % c.n_rowgroups;
    b.g = local / c.n_rowgroups;
  } else {
    b.split = local % c.n_splits;
    b.rg = (local / c.n_splits) % c.n_rowgroups;
    b.g = local / (c.n_splits * c.n_rowgroups);
  }
  b.rows = c.T * c.group;
  const int r_first = b.rg * RB, r_last = min(b.rows, r_first + RB) - 1;
  b.key_end = c.pos0 + r_last / c.group + 1;
  b.L = make_layout(HD, MT, FOLD, c.k_type, c.v_type, c.k_row_bytes, c.v_row_bytes, c.stages);
  const Layout& L = b.L;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  uint16_t* q_hi = reinterpret_cast<uint16_t*>(smem + L.q_hi);
  uint16_t* q_lo = reinterpret_cast<uint16_t*>(smem + L.q_lo);
  float* s_part = reinterpret_cast<float*>(smem + L.s_part);
  uint16_t* p_hi = reinterpret_cast<uint16_t*>(smem + L.p_hi);
  uint16_t* p_lo = reinterpret_cast<uint16_t*>(smem + L.p_lo);
  float* m_run = reinterpret_cast<float*>(smem + L.stat);
  float* l_run = m_run + RB;
  float* alpha_s = l_run + RB;
  float* m_mrg = alpha_s + RB;
  float* l_mrg = m_mrg + RB;
  float* merged = reinterpret_cast<float*>(smem + L.merged);

  // Queries of the block's rows as f16 hi + lo (padding rows: zeros).
  for (int i = tid; i < RB * HD; i += kThreads) {
    const int r = i / HD, d = i % HD, row = r_first + r;
    float x = 0.0f;
    if (row < b.rows) {
      const int t = row / c.group, h = b.g * c.group + row % c.group;
      x = c.q[(int64_t(t) * c.n_heads + h) * HD + d];
    }
    const __half hi = __float2half_rn(x);
    q_hi[r * QSTR + d] = __half_as_ushort(hi);
    q_lo[r * QSTR + d] = __half_as_ushort(__float2half_rn(x - __half2float(hi)));
  }

  const int64_t n_splits_block = (b.key_end + kAttnSplitKeys - 1) / kAttnSplitKeys;
  const int s_begin = FOLD ? 0 : b.split;
  const int s_end = FOLD ? int(n_splits_block) : b.split + 1;
  if (!FOLD && b.split >= n_splits_block) return;  // no keys here for any row of the block

  float o[MT][NT_W][4];
  for (int s = s_begin; s < s_end; ++s) {
    // ---- one split: fresh softmax state ----
    for (int r = tid; r < RB; r += kThreads) {
      m_run[r] = -INFINITY;
      l_run[r] = 0.0f;
    }
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      #pragma unroll
      for (int nt = 0; nt < NT_W; ++nt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) o[mt][nt][e] = 0.0f;
    const int64_t k_begin = int64_t(s) * kAttnSplitKeys;
    const int64_t k_end = min64(k_begin + kAttnSplitKeys, b.key_end);
    const int n_tiles = int((k_end - k_begin + kTileKeys - 1) / kTileKeys);
    const int stages = c.stages;
    for (int p = 0; p < stages - 1; ++p) {
      if (p < n_tiles) issue_tile(b, HD, k_begin + int64_t(p) * kTileKeys, p % stages);
      cp_async_commit();
    }
    for (int j = 0; j < n_tiles; ++j) {
      const int jn = j + stages - 1;
      if (jn < n_tiles) issue_tile(b, HD, k_begin + int64_t(jn) * kTileKeys, jn % stages);
      cp_async_commit();
      cp_async_wait(stages - 1);
      __syncthreads();
      const int64_t k0 = k_begin + int64_t(j) * kTileKeys;
      const int slot = j % stages;
      const int valid = int(min64(kTileKeys, b.key_end - k0));
      const uint16_t* kf = reinterpret_cast<const uint16_t*>(smem + L.k_f);
      const uint16_t* vf = reinterpret_cast<const uint16_t*>(smem + L.v_f);
      if (is_quant(c.k_type))
        dequant_tile(smem + L.k_raw + slot * L.raw_k_tile, c.k_type, c.k_row_bytes, HD, valid, const_cast<uint16_t*>(kf));
      else
        kf += size_t(slot) * L.f_tile / 2;
      if (is_quant(c.v_type))
        dequant_tile(smem + L.v_raw + slot * L.raw_v_tile, c.v_type, c.v_row_bytes, HD, valid, const_cast<uint16_t*>(vf));
      else
        vf += size_t(slot) * L.f_tile / 2;
      if (is_quant(c.k_type) || is_quant(c.v_type)) __syncthreads();

      // ---- scores: warp `warp` multiplies dims [warp·HD/4, (warp+1)·HD/4) for all 32 keys ----
      {
        float acc[MT][4][4];
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          #pragma unroll
          for (int nt = 0; nt < 4; ++nt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
        #pragma unroll
        for (int ks = 0; ks < KS_W; ++ks) {
          const int d0 = warp * (HD / 4) + ks * 16;
          uint32_t bk[4][2];
          #pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            const uint16_t* kr = kf + (nt * 8 + gid) * QSTR + d0 + 2 * tig;
            bk[nt][0] = lds32(kr);
            bk[nt][1] = lds32(kr + 8);
          }
          #pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            uint32_t ah[4], al[4];
            const int r0 = (mt * 16 + gid) * QSTR + d0 + 2 * tig;
            ah[0] = lds32(q_hi + r0);
            ah[1] = lds32(q_hi + r0 + 8 * QSTR);
            ah[2] = lds32(q_hi + r0 + 8);
            ah[3] = lds32(q_hi + r0 + 8 * QSTR + 8);
            al[0] = lds32(q_lo + r0);
            al[1] = lds32(q_lo + r0 + 8 * QSTR);
            al[2] = lds32(q_lo + r0 + 8);
            al[3] = lds32(q_lo + r0 + 8 * QSTR + 8);
            #pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
              mma16816(acc[mt][nt], ah, bk[nt][0], bk[nt][1]);
              mma16816(acc[mt][nt], al, bk[nt][0], bk[nt][1]);
            }
          }
        }
        float* sp = s_part + warp * RB * SSTR;
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          #pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            const int r = mt * 16 + gid, k = nt * 8 + 2 * tig;
            *reinterpret_cast<float2*>(sp + r * SSTR + k) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
            *reinterpret_cast<float2*>(sp + (r + 8) * SSTR + k) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
          }
      }
      __syncthreads();

      // ---- online softmax: warp per row, lane per key ----
      for (int r = warp; r < RB; r += kWarps) {
        const float* sp = s_part + r * SSTR + lane;
        const float dot = (sp[0] + sp[RB * SSTR]) + (sp[2 * RB * SSTR] + sp[3 * RB * SSTR]);
        float sc = __fmul_rn(dot, c.scale);
        if (k0 + lane >= row_keys(b, r_first + r)) sc = -INFINITY;
        float mx = sc;
        for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        const float m_old = m_run[r];
        const float m_new = fmaxf(m_old, mx);
        const float p = sc == -INFINITY ? 0.0f : expf(sc - m_new);
        float sum = p;
        for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        sum = __shfl_sync(0xffffffffu, sum, 0);  // one lane's order, for every lane
        const __half ph = __float2half_rn(p);
        p_hi[r * PSTR + lane] = __half_as_ushort(ph);
        p_lo[r * PSTR + lane] = __half_as_ushort(__float2half_rn(p - __half2float(ph)));
        __syncwarp();
        if (lane == 0) {
          const float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
          alpha_s[r] = alpha;
          l_run[r] = __fadd_rn(__fmul_rn(l_run[r], alpha), sum);
          m_run[r] = m_new;
        }
      }
      __syncthreads();

      // ---- P·V: warp `warp` owns output dims [warp·HD/4, (warp+1)·HD/4) ----
      #pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const float a0 = alpha_s[mt * 16 + gid], a1 = alpha_s[mt * 16 + gid + 8];
        #pragma unroll
        for (int nt = 0; nt < NT_W; ++nt) {
          o[mt][nt][0] = __fmul_rn(o[mt][nt][0], a0);
          o[mt][nt][1] = __fmul_rn(o[mt][nt][1], a0);
          o[mt][nt][2] = __fmul_rn(o[mt][nt][2], a1);
          o[mt][nt][3] = __fmul_rn(o[mt][nt][3], a1);
        }
      }
      #pragma unroll
      for (int kk = 0; kk < kTileKeys / 16; ++kk) {
        uint32_t bv[NT_W][2];
        #pragma unroll
        for (int nt = 0; nt < NT_W; ++nt) {
          const int n = warp * (HD / 4) + nt * 8 + gid, k = kk * 16 + 2 * tig;
          bv[nt][0] = pack_half2(vf[k * QSTR + n], vf[(k + 1) * QSTR + n]);
          bv[nt][1] = pack_half2(vf[(k + 8) * QSTR + n], vf[(k + 9) * QSTR + n]);
        }
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          uint32_t ah[4], al[4];
          const int r0 = (mt * 16 + gid) * PSTR + kk * 16 + 2 * tig;
          ah[0] = lds32(p_hi + r0);
          ah[1] = lds32(p_hi + r0 + 8 * PSTR);
          ah[2] = lds32(p_hi + r0 + 8);
          ah[3] = lds32(p_hi + r0 + 8 * PSTR + 8);
          al[0] = lds32(p_lo + r0);
          al[1] = lds32(p_lo + r0 + 8 * PSTR);
          al[2] = lds32(p_lo + r0 + 8);
          al[3] = lds32(p_lo + r0 + 8 * PSTR + 8);
          #pragma unroll
          for (int nt = 0; nt < NT_W; ++nt) {
            mma16816(o[mt][nt], ah, bv[nt][0], bv[nt][1]);
            mma16816(o[mt][nt], al, bv[nt][0], bv[nt][1]);
          }
        }
      }
      __syncthreads();  // the tile's buffers may be refilled now
    }
    cp_async_wait(0);

    // ---- end of split: write the partial, or fold it into the block's running state ----
    if (!FOLD) {
      #pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = mt * 16 + gid + 8 * half, row = r_first + r;
          if (row >= b.rows) continue;
          const int t = row / c.group, h = b.g * c.group + row % c.group;
          float* dst = c.part + ((int64_t(t) * c.n_heads + h) * c.n_splits + s) * (HD + 2);
          #pragma unroll
          for (int nt = 0; nt < NT_W; ++nt) {
            const int d = warp * (HD / 4) + nt * 8 + 2 * tig;
            *reinterpret_cast<float2*>(dst + d) = make_float2(o[mt][nt][2 * half], o[mt][nt][2 * half + 1]);
          }
          if (warp == 0 && tig == 0) {
            dst[HD] = m_run[r];
            dst[HD + 1] = l_run[r];
          }
        }
    } else {
      #pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = mt * 16 + gid + 8 * half;
          if (int64_t(s) * kAttnSplitKeys >= row_keys(b, r_first + r)) continue;  // not this row's split
          float fm, fa, fb;
          if (s > 0) fold_scales(m_mrg[r], m_run[r], &fm, &fa, &fb);
          #pragma unroll
          for (int nt = 0; nt < NT_W; ++nt) {
            const int d = warp * (HD / 4) + nt * 8 + 2 * tig;
            #pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& dst = merged[r * HD + d + e];
              const float x = o[mt][nt][2 * half + e];
              dst = s == 0 ? x : fold_value(dst, fa, x, fb);
            }
          }
        }
      __syncthreads();  // every thread has read m_mrg before it changes
      for (int r = tid; r < RB; r += kThreads) {
        if (int64_t(s) * kAttnSplitKeys >= row_keys(b, r_first + r)) continue;
        if (s == 0) {
          m_mrg[r] = m_run[r];
          l_mrg[r] = l_run[r];
        } else {
          float fm, fa, fb;
          fold_scales(m_mrg[r], m_run[r], &fm, &fa, &fb);
          l_mrg[r] = fold_value(l_mrg[r], fa, l_run[r], fb);
          m_mrg[r] = fm;
        }
      }
      __syncthreads();
    }
  }

  if (FOLD) {
    for (int i = tid; i < RB * HD; i += kThreads) {
      const int r = i / HD, d = i % HD, row = r_first + r;
      if (row >= b.rows) continue;
      const int t = row / c.group, h = b.g * c.group + row % c.group;
      c.out[(int64_t(t) * c.n_heads + h) * HD + d] = merged[i] * (1.0f / l_mrg[r]);
    }
  }
}

// ---- Merge: one block per output row (t, h), a thread per dim; splits folded left to right ----

struct MergeCall {
  const float* part;
  float* out;
  int64_t pos0;
  int n_heads, n_splits, hd, row_begin;
};
struct MergeLaunch {
  MergeCall calls[kMaxCallsPerLaunch];
  int n_calls;
};

__global__ void merge_kernel(const __grid_constant__ MergeLaunch launch) {
  const int bid = int(blockIdx.x);
  int ci = 0;
  while (ci + 1 < launch.n_calls && launch.calls[ci + 1].row_begin <= bid) ++ci;
  const MergeCall& c = launch.calls[ci];
  const int row = bid - c.row_begin, t = row / c.n_heads, d = threadIdx.x;
  if (d >= c.hd) return;
  const int64_t n_keys = c.pos0 + t + 1;
  const int ns = int((n_keys + kAttnSplitKeys - 1) / kAttnSplitKeys);
  const float* p = c.part + int64_t(row) * c.n_splits * (c.hd + 2);
  float acc = p[d], m = p[c.hd], l = p[c.hd + 1];
  for (int s = 1; s < ns; ++s) {
    const float* ps = p + int64_t(s) * (c.hd + 2);
    float fm, fa, fb;
    fold_scales(m, ps[c.hd], &fm, &fa, &fb);
    acc = fold_value(acc, fa, ps[d], fb);
    l = fold_value(l, fa, ps[c.hd + 1], fb);
    m = fm;
  }
  c.out[int64_t(row) * c.hd + d] = acc * (1.0f / l);
}

// ---- Host side ----

struct Config {
  int hd, mt;
  bool fold;
  bool operator==(const Config& o) const { return hd == o.hd && mt == o.mt && fold == o.fold; }
};

Config config_of(const AttentionCall& call) {
  const int group = int(call.args.n_heads / call.kv.n_kv_heads);
  const int64_t rows = call.args.T * group;
  Config cfg{int(call.kv.head_dim), 1, false};
  if (rows > kMaxRowsPartial) cfg.fold = true;  // prefill: fold in-block, no partials
  else cfg.mt = rows <= 16 ? 1 : rows <= 32 ? 2 : 4;
  return cfg;
}

int64_t n_splits_of(const AttentionCall& call) {
  return (call.args.pos0 + call.args.T + kAttnSplitKeys - 1) / kAttnSplitKeys;
}

// Pipeline depth: about 32 KiB of a block's tiles in flight, within two blocks per SM.
int stages_of(const AttentionCall& call, const Config& cfg) {
  const int kt = kv_type_of(call.kv.k_type), vt = kv_type_of(call.kv.v_type);
  const size_t raw = size_t(kTileKeys) * (call.kv.k_row_bytes + call.kv.v_row_bytes);
  int stages = 2 + (raw < 24 * 1024) + (raw < 12 * 1024);
  while (stages > 2 && make_layout(cfg.hd, cfg.mt, cfg.fold, kt, vt, int(call.kv.k_row_bytes),
                                   int(call.kv.v_row_bytes), stages).total > kSmemTarget)
    --stages;
  return stages;
}

template <int HD, int MT, bool FOLD>
void launch_split(const SplitLaunch& l, int blocks, size_t smem, cudaStream_t stream) {
  static bool configured = false;  // raise the dynamic shared memory limit once per kernel
  if (!configured) {
    check(cudaFuncSetAttribute(split_kernel<HD, MT, FOLD>, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024),
          "attention: shared memory limit");
    configured = true;
  }
  split_kernel<HD, MT, FOLD><<<unsigned(blocks), kThreads, smem, stream>>>(l);
}

void launch_config(const Config& cfg, const SplitLaunch& l, int blocks, size_t smem, cudaStream_t stream) {
#define WEFT_SPLIT_CASE(HD_, MT_, FOLD_)                                          \
  if (cfg.hd == HD_ && cfg.mt == MT_ && cfg.fold == FOLD_) {                       \
    launch_split<HD_, MT_, FOLD_>(l, blocks, smem, stream);                        \
    return;                                                                        \
  }
  WEFT_SPLIT_CASE(64, 1, false) WEFT_SPLIT_CASE(64, 2, false) WEFT_SPLIT_CASE(64, 4, false)
  WEFT_SPLIT_CASE(64, 1, true)
  WEFT_SPLIT_CASE(128, 1, false) WEFT_SPLIT_CASE(128, 2, false) WEFT_SPLIT_CASE(128, 4, false)
  WEFT_SPLIT_CASE(128, 1, true)
  WEFT_SPLIT_CASE(256, 1, false) WEFT_SPLIT_CASE(256, 2, false) WEFT_SPLIT_CASE(256, 4, false)
  WEFT_SPLIT_CASE(256, 1, true)
#undef WEFT_SPLIT_CASE
  throw std::logic_error("attention: no split kernel for this configuration");
}

}  // namespace

bool split_supports(const AttentionCall& call) {
  const KvLayerView& kv = call.kv;
  const int kt = kv_type_of(kv.k_type), vt = kv_type_of(kv.v_type);
  const bool types = (kt == kKvF16 || is_quant(kt)) && (vt == kKvF16 || is_quant(vt));
  const bool hd = kv.head_dim == 64 || kv.head_dim == 128 || kv.head_dim == 256;
  return types && hd && kv.page_tokens % kTileKeys == 0 && call.args.n_heads / kv.n_kv_heads <= 64 &&
         call.args.pos0 + call.args.T <= int64_t(1) << 31 && call.args.T * call.args.n_heads <= int64_t(1) << 30;
}

size_t split_workspace_bytes(const AttentionCall& call) {
  if (config_of(call).fold) return 0;
  return size_t(call.args.T * call.args.n_heads) * size_t(n_splits_of(call)) * size_t(call.kv.head_dim + 2) *
         sizeof(float);
}

void attention_split(const AttentionCall* calls, const size_t* offsets, int64_t n, uint8_t* workspace,
                     cudaStream_t stream) {
  // Calls of one configuration go out together, up to kMaxCallsPerLaunch per launch.
  std::vector<bool> done(size_t(n), false);
  std::vector<int64_t> merge_calls;
  for (int64_t first = 0; first < n; ++first) {
    if (done[size_t(first)]) continue;
    const Config cfg = config_of(calls[first]);
    SplitLaunch l{};
    int blocks = 0;
    size_t smem = 0;
    auto flush = [&]() {
      if (l.n_calls == 0) return;
      launch_config(cfg, l, blocks, smem, stream);
      check(cudaGetLastError(), "attention (split) launch");
      l = SplitLaunch{};
      blocks = 0;
      smem = 0;
    };
    for (int64_t i = first; i < n; ++i) {
      if (done[size_t(i)] || !(config_of(calls[i]) == cfg)) continue;
      done[size_t(i)] = true;
      const AttentionCall& call = calls[i];
      const KvLayerView& kv = call.kv;
      SplitCall& sc = l.calls[l.n_calls++];
      sc.pages = kv.pages;
      sc.q = call.args.q;
      sc.out = call.args.out;
      sc.part = reinterpret_cast<float*>(workspace + offsets[i]);
      sc.pos0 = call.args.pos0;
      sc.page_tokens = kv.page_tokens;
      sc.T = int(call.args.T);
      sc.n_heads = int(call.args.n_heads);
      sc.n_kv = int(kv.n_kv_heads);
      sc.group = int(call.args.n_heads / kv.n_kv_heads);
      sc.k_type = kv_type_of(kv.k_type);
      sc.v_type = kv_type_of(kv.v_type);
      sc.k_row_bytes = int(kv.k_row_bytes);
      sc.v_row_bytes = int(kv.v_row_bytes);
      sc.n_rowgroups = int((int64_t(sc.T) * sc.group + rows_per_block(cfg.mt) - 1) / rows_per_block(cfg.mt));
      sc.n_splits = int(n_splits_of(call));
      sc.stages = stages_of(call, cfg);
      sc.scale = call.args.scale;
      sc.block_begin = blocks;
      blocks += sc.n_kv * sc.n_rowgroups * (cfg.fold ? 1 : sc.n_splits);
      smem = std::max(smem, make_layout(cfg.hd, cfg.mt, cfg.fold, sc.k_type, sc.v_type, sc.k_row_bytes,
                                        sc.v_row_bytes, sc.stages).total);
      if (!cfg.fold) merge_calls.push_back(i);
      if (l.n_calls == kMaxCallsPerLaunch) flush();
    }
    flush();
  }

  // Fold the partials of the decode / verify calls.
  MergeLaunch m{};
  int rows = 0, threads = 0;
  auto flush_merge = [&]() {
    if (m.n_calls == 0) return;
    merge_kernel<<<unsigned(rows), unsigned(threads), 0, stream>>>(m);
    check(cudaGetLastError(), "attention (merge) launch");
    m = MergeLaunch{};
    rows = 0;
    threads = 0;
  };
  for (int64_t i : merge_calls) {
    const AttentionCall& call = calls[i];
    MergeCall& mc = m.calls[m.n_calls++];
    mc.part = reinterpret_cast<const float*>(workspace + offsets[i]);
    mc.out = call.args.out;
    mc.pos0 = call.args.pos0;
    mc.n_heads = int(call.args.n_heads);
    mc.n_splits = int(n_splits_of(call));
    mc.hd = int(call.kv.head_dim);
    mc.row_begin = rows;
    rows += int(call.args.T * call.args.n_heads);
    threads = std::max(threads, mc.hd);
    if (m.n_calls == kMaxCallsPerLaunch) flush_merge();
  }
  flush_merge();
}

}  // namespace weft::cuda::detail
