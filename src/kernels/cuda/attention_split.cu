// The dim-parallel tiled split attention kernel (flash-decoding) for f16, q8_0 and q4_0 KV caches.
// FROZEN for f16 K and V (the strict f16 decode kernel, attention.cuh); quantized caches take
// the key-parallel kernel (attention_qkeys.cu) by default and reach this one only through
// SplitTuning::keys_quant = false (benchmarks, tests).
//
// Work split. The keys of a call are cut into splits of kAttnSplitKeys (fixed). One thread block
// (4 warps) takes one kv head, one group of up to 16·MT query rows of that head's GQA group
// (row r = t·G + i: query token t, head i of the group) and a run of consecutive splits, and walks
// them in tiles of kTileKeys keys. Each K/V byte of a tile is loaded from global memory once per
// block and serves every query head of the group (and, for a verify call of T ≤ 64/G rows, every
// row): the GQA sharing the byte model counts on.
//
// Per tile:
//  1. Load: the tile's K and V bytes are contiguous inside one page (page_tokens % 32 == 0), so
//     they are copied with 16-byte cp.async, several tiles ahead (a multi-stage pipeline that runs
//     on across split boundaries), whatever the row size (q8_0 blocks are 34 bytes: the copy
//     ignores block boundaries). f16 rows land straight in the padded f16 tile; quantized rows
//     land raw and are dequantized in registers (integer tricks + half2 math: q·d rounded to f16,
//     the same bits as the f32 product rounded once). Where a warp's head_dim slice is whole
//     32-value blocks (head_dim 256 / 8 warps, 128 / 4, 256 / 4) the lanes decode the raw bytes
//     straight into their MMA B fragments (K: each lane owns the dims it can read at once and
//     the query fragments, kept in registers, use the same dim order; V: a lane's four output
//     columns per block are mapped back to their dims when written, v_dim); otherwise the tile is
//     decoded into a shared f16 tile first (SplitTuning::direct = false forces that path).
//  2. Scores on tensor cores (mma m16n8k16, f16 in, f32 accumulate, ldmatrix fragments): each
//     warp multiplies a quarter of head_dim; the four partial score tiles are added in warp order.
//     With an f16 K cache the query is split into f16 hi + lo parts (q = hi + lo to ~22 bits)
//     so the scores keep near-f32 accuracy; a quantized K (rounded to f16 anyway) takes hi only.
//  3. Online softmax per row in f32 (a warp per row, a lane per key).
//  4. P·V on tensor cores (P split into hi + lo when V is f16); each warp owns a quarter of
//     head_dim of the output accumulator (registers), rescaled by the row's alpha each tile.
//
// Results: a decode or verify call writes each (row, split) partial (m, l, unnormalised acc) to
// the workspace and merge_kernel folds a row's splits in the fixed two-level order
// (attention_common.cuh: kFoldGroup); a prefill call (many rows) folds its splits inside the
// block in the same order with the same arithmetic. Masked keys add exact zeros. Hence a row's
// bits depend only on its position and its sequence's cache: decode, verify and prefill agree bit
// for bit, and nothing depends on the batch or on how many splits a block walks.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/attention_mma.cuh"

namespace weft::cuda::detail {

namespace {

constexpr int kTileKeys = 32;    // keys per tile (= lanes of the softmax warp)
constexpr int kMaxCallsPerLaunch = 16;
constexpr int kMaxRowsPartial = 64;         // rows of one kv head a split-partial call may have
constexpr int kMergeWarps = 32;             // groups folded side by side by one merge block

// ---- Call descriptors (kernel parameters by value: no host->device copies, graph-capturable) ----

struct SplitCall {
  const uint8_t* const* pages;
  const float* q;
  float* out;
  float* part;  // partials [T·n_heads][n_splits][hd + 2] (split-partial mode)
  int pos0, page_tokens;  // positions < 2^30 (split_supports): 32-bit index math in the kernel
  int T, n_heads, n_kv, group;
  int k_type, v_type, k_row_bytes, v_row_bytes;
  int n_rowgroups, n_splits, splits_per_block, stages;
  int direct;  // quantized K/V read straight into MMA fragments where the warp slices allow
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
// A warp's head_dim slice is whole q8_0 / q4_0 blocks (32 values): the direct-fragment path.
__host__ __device__ inline bool has_direct(int hd, int warps) { return (hd / warps) % 32 == 0; }

// Shared-memory layout of one block (bytes from the start of dynamic shared memory).
struct Layout {
  size_t q_hi, q_lo, s_part, p_hi, p_lo, stat, acc_grp, acc_tot, k_raw, v_raw, k_f, v_f, total;
  size_t raw_k_tile, raw_v_tile, f_tile;
};

__host__ __device__ inline Layout make_layout(int hd, int mt, int warps, bool fold_in_block, int k_type,
                                              int v_type, int k_rb, int v_rb, int stages, bool direct_on) {
  const size_t rb = size_t(rows_per_block(mt)), qstr = size_t(hd + 8);
  // Quantized K / V read straight from the raw tile into MMA fragments (no f16 copy, no query
  // in shared memory) where each warp's slice of head_dim is whole 32-value blocks.
  const bool direct = direct_on && has_direct(hd, warps);
  const bool k_direct = direct && is_quant(k_type), v_direct = direct && is_quant(v_type);
  Layout L{};
  size_t o = 0;
  auto take = [&](size_t bytes) {
    const size_t at = o;
    o += align16(bytes);
    return at;
  };
  L.q_hi = take(k_direct ? 0 : rb * qstr * 2);
  L.q_lo = take(k_direct ? 0 : rb * qstr * 2);
  L.s_part = take(size_t(warps) * rb * (kTileKeys + 4) * 4);
  L.p_hi = take(rb * (kTileKeys + 8) * 2);
  L.p_lo = take(rb * (kTileKeys + 8) * 2);
  L.stat = take(7 * rb * 4);  // m_run, l_run, alpha, m_grp, l_grp, m_tot, l_tot
  L.acc_grp = fold_in_block ? take(rb * size_t(hd) * 4) : o;
  L.acc_tot = fold_in_block ? take(rb * size_t(hd) * 4) : o;
  L.f_tile = size_t(kTileKeys) * qstr * 2;
  L.raw_k_tile = align16(size_t(kTileKeys) * size_t(k_rb));
  L.raw_v_tile = align16(size_t(kTileKeys) * size_t(v_rb));
  L.k_raw = is_quant(k_type) ? take(size_t(stages) * L.raw_k_tile) : o;
  L.v_raw = is_quant(v_type) ? take(size_t(stages) * L.raw_v_tile) : o;
  L.k_f = take((k_direct ? 0 : is_quant(k_type) ? 1 : size_t(stages)) * L.f_tile);
  L.v_f = take((v_direct ? 0 : is_quant(v_type) ? 1 : size_t(stages)) * L.f_tile);
  L.total = o;
  return L;
}

// ---- Dequantization in registers (bytes_to_half2, q4_word: attention_mma.cuh) ----

// 4 int8 (one word) -> 2 half2, scaled.
__device__ __forceinline__ void q8_word(uint32_t w, __half2 d, uint32_t* out) {
  const uint32_t u = w ^ 0x80808080u;  // q + 128
  const __half2 bias = __float2half2_rn(1152.0f);
  out[0] = bytes_to_half2(u, 0x4140, bias, d);
  out[1] = bytes_to_half2(u, 0x4342, bias, d);
}

__device__ __forceinline__ void store_block(uint16_t* dst, const uint32_t* v) {  // 32 halves
  uint4* p = reinterpret_cast<uint4*>(dst);
#pragma unroll
  for (int j = 0; j < 4; ++j) p[j] = make_uint4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
}

// Decodes a raw q8_0 / q4_0 tile into the padded f16 tile (rows past `valid`: zeros). One thread
// per (row, pair of 32-value blocks): a pair is 68 (q8_0) or 36 (q4_0) bytes, 4-byte aligned
// (row bytes are multiples of 4 for head_dim % 64 == 0), read as words.
__device__ void dequant_tile(const uint8_t* raw, int type, int rbytes, int hd, int valid, uint16_t* f) {
  const int pairs = hd / 64, n = kTileKeys * pairs;
  for (int it = threadIdx.x; it < n; it += blockDim.x) {
    const int row = it / pairs, pair = it % pairs;
    uint16_t* dst = f + size_t(row) * (hd + 8) + pair * 64;
    uint32_t v0[16], v1[16];
    if (row >= valid) {
#pragma unroll
      for (int j = 0; j < 16; ++j) v0[j] = v1[j] = 0;
    } else if (type == kKvQ8) {
      const uint32_t* w = reinterpret_cast<const uint32_t*>(raw + size_t(row) * rbytes + pair * 68);
      uint32_t x[17];
#pragma unroll
      for (int j = 0; j < 17; ++j) x[j] = w[j];
      const __half2 d0 = scale_half2(x[0] & 0xffff), d1 = scale_half2(x[8] >> 16);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        q8_word(__byte_perm(x[k], x[k + 1], 0x5432), d0, v0 + 2 * k);  // block 0: bytes 2..33
        q8_word(x[9 + k], d1, v1 + 2 * k);                             // block 1: bytes 36..67
      }
    } else {
      const uint32_t* w = reinterpret_cast<const uint32_t*>(raw + size_t(row) * rbytes + pair * 36);
      uint32_t x[9];
#pragma unroll
      for (int j = 0; j < 9; ++j) x[j] = w[j];
      const __half2 d0 = scale_half2(x[0] & 0xffff), d1 = scale_half2(x[4] >> 16);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        q4_word(__byte_perm(x[k], x[k + 1], 0x5432), d0, v0 + 2 * k, v0 + 8 + 2 * k);  // bytes 2..17
        q4_word(x[5 + k], d1, v1 + 2 * k, v1 + 8 + 2 * k);                              // bytes 20..35
      }
    }
    store_block(dst, v0);
    store_block(dst + 32, v1);
  }
}

// ---- Direct fragments: quantized rows decoded from the raw tile straight into MMA operands ----
// A dot product may take its terms in any order, so the dims a lane owns are chosen to be the
// bytes it can read at once: the query fragments (registers) use the same permutation for K, and
// the output columns of P·V are mapped back to their dims when written (v_dim).

// Four bytes at a 2-byte aligned shared address (q8_0 / q4_0 blocks are 34 / 18 bytes).
__device__ __forceinline__ uint32_t lds_u32_a2(const uint8_t* p) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return uint32_t(h[0]) | (uint32_t(h[1]) << 16);
}

// Element of 32-value block that query float `e` (0..3) of k-step `s` (0..1) of lane `tig`
// multiplies (K fragments below): q8_0 lanes own bytes 8·tig..8·tig+7, q4_0 lanes the nibbles of
// bytes 4·tig..4·tig+3 (elements 4·tig.. and 16 + 4·tig..).
__device__ __forceinline__ int k_elem(int type, int tig, int s) { return type == kKvQ8 ? 8 * tig + 4 * s : 16 * s + 4 * tig; }

// B fragments of both k-steps of block `blk` of one K row: {ks0.b0, ks0.b1, ks1.b0, ks1.b1}.
__device__ __forceinline__ void k_frag(const uint8_t* row, int type, int blk, int tig, uint32_t* b) {
  if (type == kKvQ8) {
    const uint8_t* bp = row + blk * 34;
    const __half2 d = scale_half2(*reinterpret_cast<const uint16_t*>(bp));
    q8_word(lds_u32_a2(bp + 2 + 8 * tig), d, b);
    q8_word(lds_u32_a2(bp + 6 + 8 * tig), d, b + 2);
  } else {
    const uint8_t* bp = row + blk * 18;
    const __half2 d = scale_half2(*reinterpret_cast<const uint16_t*>(bp));
    q4_word(lds_u32_a2(bp + 2 + 4 * tig), d, b, b + 2);
  }
}

// Four consecutive output columns j = 0..3 of a lane (gid) in block `blk` of one V row, as two
// half2 words (columns 0,1 and 2,3). q8_0: elements 4·gid..4·gid+3; q4_0: the nibbles of bytes
// 2·gid, 2·gid+1 (elements 2·gid, 2·gid+1, 16+2·gid, 17+2·gid).
__device__ __forceinline__ void v_words(const uint8_t* row, int type, int blk, int gid, uint32_t* h) {
  if (type == kKvQ8) {
    const uint8_t* bp = row + blk * 34;
    const __half2 d = scale_half2(*reinterpret_cast<const uint16_t*>(bp));
    q8_word(lds_u32_a2(bp + 2 + 4 * gid), d, h);
  } else {
    const uint8_t* bp = row + blk * 18;
    const __half2 d = scale_half2(*reinterpret_cast<const uint16_t*>(bp));
    const uint32_t u = *reinterpret_cast<const uint16_t*>(bp + 2 + 2 * gid);
    const __half2 bias = __float2half2_rn(1032.0f);
    h[0] = bytes_to_half2(u & 0x0f0fu, 0x4140, bias, d);
    h[1] = bytes_to_half2((u >> 4) & 0x0f0fu, 0x4140, bias, d);
  }
}

// The dim of output column n (0..7), j (0..3) of block `blk` for a directly read V.
__device__ __forceinline__ int v_dim(int type, int blk, int n, int j) {
  return blk * 32 + (type == kKvQ8 ? 4 * n + j : (j < 2 ? 2 * n + j : 16 + 2 * n + j - 2));
}

// ---- Per-block context ----

struct Block {
  const SplitCall* c;
  int g;                   // kv head
  int rows;                // query rows of this kv head (T·G)
  int key_end;             // keys the block's last row sees (exclusive)
  uint8_t* smem;
  Layout L;
};

// Keys that row r (of this kv head) sees: [0, pos0 + t + 1); none for padding rows.
__device__ __forceinline__ int row_keys(const Block& b, int r) {
  return r < b.rows ? b.c->pos0 + r / b.c->group + 1 : 0;
}
__device__ __forceinline__ int row_splits(const Block& b, int r) {
  return (row_keys(b, r) + kAttnSplitKeys - 1) / kAttnSplitKeys;
}

// Issues the cp.async copies of tile `k0` (keys [k0, k0 + kTileKeys) of kv head g) into `slot`.
// 32-bit position math: a 64-bit division per tile and thread is a ~70-instruction emulation.
__device__ void issue_tile(const Block& b, int hd, int k0, int slot) {
  const SplitCall& c = *b.c;
  const int valid = min(kTileKeys, b.key_end - k0);
  const int pi = k0 / c.page_tokens;
  const uint8_t* page = c.pages[pi];
  const size_t row0 = size_t(b.g) * size_t(c.page_tokens) + size_t(k0 - pi * c.page_tokens);
  const uint8_t* ksrc = page + row0 * size_t(c.k_row_bytes);
  const uint8_t* vsrc = page + size_t(c.n_kv) * size_t(c.page_tokens) * size_t(c.k_row_bytes) + row0 * size_t(c.v_row_bytes);
  for (int which = 0; which < 2; ++which) {
    const int type = which ? c.v_type : c.k_type;
    const uint8_t* src = which ? vsrc : ksrc;
    if (type == kKvF16) {
      // Straight into the padded f16 tile; rows past the keys are zero-filled.
      uint8_t* dst = b.smem + (which ? b.L.v_f : b.L.k_f) + size_t(slot) * b.L.f_tile;
      const int per_row = hd / 8, n = kTileKeys * per_row;
      for (int ch = threadIdx.x; ch < n; ch += blockDim.x) {
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
      for (int ch = threadIdx.x; ch < n; ch += blockDim.x) cp_async16(dst + ch * 16, src + size_t(ch) * 16, 16);
    }
  }
}

// Finds the call of block `bid` in the launch.
__device__ __forceinline__ int find_call(const SplitLaunch& l, int bid) {
  int c = 0;
  while (c + 1 < l.n_calls && l.calls[c + 1].block_begin <= bid) ++c;
  return c;
}

template <int HD, int MT, bool FOLD, int WARPS>
__global__ void __launch_bounds__(32 * WARPS) split_kernel(const __grid_constant__ SplitLaunch launch) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int RB = 16 * MT, QSTR = HD + 8, PSTR = kTileKeys + 8, SSTR = kTileKeys + 4;
  constexpr int THREADS = 32 * WARPS;
  constexpr int DW = HD / WARPS;     // head_dim slice of one warp (QK and PV)
  constexpr int KS_W = DW / 16;      // k-steps of 16 dims per warp (QK)
  constexpr int NT_W = DW / 8;       // n-tiles of 8 dims per warp (PV)
  static_assert(DW % 16 == 0 && RB % WARPS == 0, "warp slices");
  const int bid = int(blockIdx.x);
  const SplitCall& c = launch.calls[find_call(launch, bid)];
  const int local = bid - c.block_begin;

  Block b;
  b.c = &c;
  b.smem = smem;
  int rg, s_begin, s_end;
  b.rows = c.T * c.group;
  if (FOLD) {
    rg = local % c.n_rowgroups;
    b.g = local / c.n_rowgroups;
  } else {
    const int n_runs = (c.n_splits + c.splits_per_block - 1) / c.splits_per_block;
    const int run = local % n_runs;
    rg = (local / n_runs) % c.n_rowgroups;
    b.g = local / (n_runs * c.n_rowgroups);
    s_begin = run * c.splits_per_block;
  }
  const int r_first = rg * RB, r_last = min(b.rows, r_first + RB) - 1;
  b.key_end = c.pos0 + r_last / c.group + 1;
  const int n_splits_block = int((b.key_end + kAttnSplitKeys - 1) / kAttnSplitKeys);
  if (FOLD) {
    s_begin = 0;
    s_end = n_splits_block;
  } else {
    s_end = min(s_begin + c.splits_per_block, n_splits_block);
    if (s_begin >= s_end) return;  // no keys here for any row of the block
  }
  b.L = make_layout(HD, MT, WARPS, FOLD, c.k_type, c.v_type, c.k_row_bytes, c.v_row_bytes, c.stages, c.direct != 0);
  const Layout& L = b.L;
  const bool q_lo_on = c.k_type == kKvF16, p_lo_on = c.v_type == kKvF16;
  constexpr bool DIRECT = (HD / WARPS) % 32 == 0;  // has_direct(HD, WARPS)
  constexpr int KB_W = DIRECT ? DW / 32 : 1;        // 32-value blocks in a warp's slice
  const bool k_direct = DIRECT && c.direct && is_quant(c.k_type), v_direct = DIRECT && c.direct && is_quant(c.v_type);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  uint16_t* q_hi = reinterpret_cast<uint16_t*>(smem + L.q_hi);
  uint16_t* q_lo = reinterpret_cast<uint16_t*>(smem + L.q_lo);
  float* s_part = reinterpret_cast<float*>(smem + L.s_part);
  uint16_t* p_hi = reinterpret_cast<uint16_t*>(smem + L.p_hi);
  uint16_t* p_lo = reinterpret_cast<uint16_t*>(smem + L.p_lo);
  float* m_run = reinterpret_cast<float*>(smem + L.stat);
  float* l_run = m_run + RB;
  float* alpha_s = l_run + RB;
  float* m_grp = alpha_s + RB;
  float* l_grp = m_grp + RB;
  float* m_tot = l_grp + RB;
  float* l_tot = m_tot + RB;
  float* acc_grp = reinterpret_cast<float*>(smem + L.acc_grp);
  float* acc_tot = reinterpret_cast<float*>(smem + L.acc_tot);

  // The pipeline starts first, so the query staging below overlaps the first loads.
  const int kb = s_begin * kAttnSplitKeys;
  const int ke = min(int(s_end * kAttnSplitKeys), b.key_end);
  const int n_tiles = (ke - kb + kTileKeys - 1) / kTileKeys;
  const int stages = c.stages;
  for (int p = 0; p < stages - 1; ++p) {
    if (p < n_tiles) issue_tile(b, HD, kb + p * kTileKeys, p % stages);
    cp_async_commit();
  }

  // Queries of the block's rows as f16 hi + lo (padding rows: zeros): float4 loads, all of a
  // batch in flight before any is used. A directly read quantized K takes the (hi) query
  // fragments from registers instead, in its permuted dim order (k_elem).
  uint32_t qa[MT][KB_W][2][4];
  if (k_direct) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int qb = 0; qb < KB_W; ++qb)
#pragma unroll
        for (int st = 0; st < 2; ++st)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int row = r_first + mt * 16 + gid + 8 * half;
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (row < b.rows) {
              const int t = row / c.group, h = b.g * c.group + row % c.group;
              const int d = (warp * KB_W + qb) * 32 + k_elem(c.k_type, tig, st);
              x = *reinterpret_cast<const float4*>(c.q + (int64_t(t) * c.n_heads + h) * HD + d);
            }
            qa[mt][qb][st][half] = half2_as_u32(__floats2half2_rn(x.x, x.y));
            qa[mt][qb][st][2 + half] = half2_as_u32(__floats2half2_rn(x.z, x.w));
          }
  } else {
    constexpr int V4 = RB * HD / 4, BATCH = 8;
    for (int base = 0; base < V4; base += BATCH * THREADS) {
      float4 x[BATCH];
#pragma unroll
      for (int u = 0; u < BATCH; ++u) {
        const int i = base + u * THREADS + tid, r = (i * 4) / HD, d = (i * 4) % HD, row = r_first + r;
        x[u] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (i < V4 && row < b.rows) {
          const int t = row / c.group, h = b.g * c.group + row % c.group;
          x[u] = *reinterpret_cast<const float4*>(c.q + (int64_t(t) * c.n_heads + h) * HD + d);
        }
      }
#pragma unroll
      for (int u = 0; u < BATCH; ++u) {
        const int i = base + u * THREADS + tid, r = (i * 4) / HD, d = (i * 4) % HD;
        if (i >= V4) continue;
        const float xs[4] = {x[u].x, x[u].y, x[u].z, x[u].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const __half hi = __float2half_rn(xs[e]);
          q_hi[r * QSTR + d + e] = __half_as_ushort(hi);
          q_lo[r * QSTR + d + e] = __half_as_ushort(__float2half_rn(xs[e] - __half2float(hi)));
        }
      }
    }
  }

  // Keys each of this warp's softmax rows sees (fixed for the block), and P / alpha of the padding
  // rows zeroed once (they are never computed; zeros keep the MMA inputs defined).
  int row_end[RB / WARPS];
#pragma unroll
  for (int rr = 0; rr < RB / WARPS; ++rr) row_end[rr] = row_keys(b, r_first + warp + rr * WARPS);
  for (int i = tid; i < RB * PSTR; i += THREADS) p_hi[i] = p_lo[i] = 0;
  for (int r = tid; r < RB; r += THREADS) alpha_s[r] = 0.0f;

  float o[MT][NT_W][4];
  for (int j = 0; j < n_tiles; ++j) {
    const int k0 = kb + j * kTileKeys;
    const int s = k0 / kAttnSplitKeys;
    if (k0 % kAttnSplitKeys == 0) {  // a split starts: fresh softmax state
      for (int r = tid; r < RB; r += THREADS) {
        m_run[r] = -INFINITY;
        l_run[r] = 0.0f;
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT_W; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) o[mt][nt][e] = 0.0f;
    }
    const int jn = j + stages - 1;
    if (jn < n_tiles) issue_tile(b, HD, kb + jn * kTileKeys, jn % stages);
    cp_async_commit();
    cp_async_wait(stages - 1);
    __syncthreads();
    const int slot = j % stages;
    const int valid = min(kTileKeys, b.key_end - k0);
    uint16_t* kf = reinterpret_cast<uint16_t*>(smem + L.k_f);
    uint16_t* vf = reinterpret_cast<uint16_t*>(smem + L.v_f);
    const uint8_t* kraw = smem + L.k_raw + slot * L.raw_k_tile;
    const uint8_t* vraw = smem + L.v_raw + slot * L.raw_v_tile;
    if (!is_quant(c.k_type)) kf += size_t(slot) * L.f_tile / 2;
    else if (!k_direct) dequant_tile(kraw, c.k_type, c.k_row_bytes, HD, valid, kf);
    if (!is_quant(c.v_type)) vf += size_t(slot) * L.f_tile / 2;
    else if (!v_direct) dequant_tile(vraw, c.v_type, c.v_row_bytes, HD, valid, vf);
    if ((is_quant(c.k_type) && !k_direct) || (is_quant(c.v_type) && !v_direct)) __syncthreads();

    // ---- scores: warp `warp` multiplies dims [warp·DW, (warp+1)·DW) for all 32 keys ----
    {
      float acc[MT][4][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
      const int a_row = (lane % 8) + ((lane / 8) % 2) * 8, a_col = (lane / 16) * 8;  // A (16x16) lane rows
      const int b_key = (lane / 16) * 8 + lane % 8, b_col = ((lane / 8) % 2) * 8;    // B pairs of n-tiles
      if (k_direct) {
        // Key nt·8 + gid of the tile is B column gid of n-tile nt; rows past the keys: zeros.
#pragma unroll
        for (int qb = 0; qb < KB_W; ++qb)
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            const int key = nt * 8 + gid;
            uint32_t bk[4];
            k_frag(kraw + size_t(key) * c.k_row_bytes, c.k_type, warp * KB_W + qb, tig, bk);
            if (key >= valid) bk[0] = bk[1] = bk[2] = bk[3] = 0;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              mma16816(acc[mt][nt], qa[mt][qb][0], bk[0], bk[1]);
              mma16816(acc[mt][nt], qa[mt][qb][1], bk[2], bk[3]);
            }
          }
      }
#pragma unroll
      for (int ks = 0; ks < (k_direct ? 0 : KS_W); ++ks) {
        const int d0 = warp * DW + ks * 16;
        uint32_t bk[4][2];
#pragma unroll
        for (int ntp = 0; ntp < 2; ++ntp) {
          uint32_t r4[4];
          ldsm_x4(r4, kf + (ntp * 16 + b_key) * QSTR + d0 + b_col);
          bk[2 * ntp][0] = r4[0];
          bk[2 * ntp][1] = r4[1];
          bk[2 * ntp + 1][0] = r4[2];
          bk[2 * ntp + 1][1] = r4[3];
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          uint32_t ah[4], al[4];
          ldsm_x4(ah, q_hi + (mt * 16 + a_row) * QSTR + d0 + a_col);
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) mma16816(acc[mt][nt], ah, bk[nt][0], bk[nt][1]);
          if (q_lo_on) {
            ldsm_x4(al, q_lo + (mt * 16 + a_row) * QSTR + d0 + a_col);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) mma16816(acc[mt][nt], al, bk[nt][0], bk[nt][1]);
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
#pragma unroll
    for (int rr = 0; rr < RB / WARPS; ++rr) {
      const int r = warp + rr * WARPS;
      // Padding rows (past the call's rows; half of a decode block of GQA 8) are skipped: their
      // P, alpha and output only ever meet themselves (rows of an MMA are independent) and are
      // never written out. Warp-uniform.
      if (r_first + r >= b.rows) continue;
      // The warps' partial dots, added in a fixed pairwise tree.
      float part[WARPS];
#pragma unroll
      for (int w = 0; w < WARPS; ++w) part[w] = s_part[(w * RB + r) * SSTR + lane];
#pragma unroll
      for (int step = 1; step < WARPS; step *= 2)
#pragma unroll
        for (int w = 0; w + step < WARPS; w += 2 * step) part[w] += part[w + step];
      const float dot = part[0];
      float sc = __fmul_rn(dot, c.scale);
      if (k0 + lane >= row_end[rr]) sc = -INFINITY;
      float mx = sc;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_old = m_run[r];
      const float m_new = fmaxf(m_old, mx);
      const float p = sc == -INFINITY ? 0.0f : expf(sc - m_new);
      float sum = p;
#pragma unroll
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

    // ---- P·V: warp `warp` owns output dims [warp·DW, (warp+1)·DW) ----
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
    {
      const int a_row = (lane % 8) + ((lane / 8) % 2) * 8, a_col = (lane / 16) * 8;
      const int v_key = ((lane / 8) % 2) * 8 + lane % 8, v_col = (lane / 16) * 8;
#pragma unroll
      for (int kk = 0; kk < kTileKeys / 16; ++kk) {
        uint32_t bv[NT_W][2];
        if (v_direct) {
          // B rows (keys) 2·tig, 2·tig + 1 (b0) and 2·tig + 8, 2·tig + 9 (b1) of the k-step;
          // column gid of n-tile 4·nb + j is dim v_dim(blk, gid, j).
#pragma unroll
          for (int nb = 0; nb < KB_W; ++nb) {
            uint32_t hv[4][2];
#pragma unroll
            for (int x = 0; x < 4; ++x) {
              const int key = kk * 16 + 2 * tig + (x & 1) + (x >> 1) * 8;
              v_words(vraw + size_t(key) * c.v_row_bytes, c.v_type, warp * KB_W + nb, gid, hv[x]);
              if (key >= valid) hv[x][0] = hv[x][1] = 0;
            }
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
              const uint32_t sel = (jj & 1) ? 0x7632u : 0x5410u;
              bv[nb * 4 + jj][0] = __byte_perm(hv[0][jj >> 1], hv[1][jj >> 1], sel);
              bv[nb * 4 + jj][1] = __byte_perm(hv[2][jj >> 1], hv[3][jj >> 1], sel);
            }
          }
        }
#pragma unroll
        for (int ntp = 0; ntp < (v_direct ? 0 : NT_W / 2); ++ntp) {
          uint32_t r4[4];
          ldsm_x4_trans(r4, vf + (kk * 16 + v_key) * QSTR + warp * DW + ntp * 16 + v_col);
          bv[2 * ntp][0] = r4[0];
          bv[2 * ntp][1] = r4[1];
          bv[2 * ntp + 1][0] = r4[2];
          bv[2 * ntp + 1][1] = r4[3];
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          uint32_t ah[4], al[4];
          ldsm_x4(ah, p_hi + (mt * 16 + a_row) * PSTR + kk * 16 + a_col);
#pragma unroll
          for (int nt = 0; nt < NT_W; ++nt) mma16816(o[mt][nt], ah, bv[nt][0], bv[nt][1]);
          if (p_lo_on) {
            ldsm_x4(al, p_lo + (mt * 16 + a_row) * PSTR + kk * 16 + a_col);
#pragma unroll
            for (int nt = 0; nt < NT_W; ++nt) mma16816(o[mt][nt], al, bv[nt][0], bv[nt][1]);
          }
        }
      }
    }
    __syncthreads();  // the tile's buffers may be refilled now

    if ((k0 + kTileKeys) % kAttnSplitKeys != 0 && j != n_tiles - 1) continue;

    // ---- end of split s: write its partial, or fold it into the block's running state ----
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
            if (v_direct) {
              const int blk = warp * KB_W + nt / 4;
              dst[v_dim(c.v_type, blk, 2 * tig, nt % 4)] = o[mt][nt][2 * half];
              dst[v_dim(c.v_type, blk, 2 * tig + 1, nt % 4)] = o[mt][nt][2 * half + 1];
            } else {
              const int d = warp * DW + nt * 8 + 2 * tig;
              *reinterpret_cast<float2*>(dst + d) = make_float2(o[mt][nt][2 * half], o[mt][nt][2 * half + 1]);
            }
          }
          if (warp == 0 && tig == 0) {
            dst[HD] = m_run[r];
            dst[HD + 1] = l_run[r];
          }
        }
    } else {
      // The merge kernel's tree: split -> group (kFoldGroup splits, left to right) -> total.
      float st[MT][2][4];  // per owned row: new m_grp, l_grp, m_tot, l_tot
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = mt * 16 + gid + 8 * half, ns = row_splits(b, r_first + r);
          if (s >= ns) continue;  // not this row's split
          const bool grp_first = s % kFoldGroup == 0, grp_done = s % kFoldGroup == kFoldGroup - 1 || s == ns - 1;
          const bool tot_first = s < kFoldGroup;
          float ga = 0, gb = 0, mg = m_run[r], lg = l_run[r];
          if (!grp_first) {
            fold_scales(m_grp[r], m_run[r], &mg, &ga, &gb);
            lg = fold_value(l_grp[r], ga, l_run[r], gb);
          }
          float ta = 0, tb = 0, mtot = mg, ltot = lg;
          if (grp_done && !tot_first) {
            fold_scales(m_tot[r], mg, &mtot, &ta, &tb);
            ltot = fold_value(l_tot[r], ta, lg, tb);
          }
          st[mt][half][0] = mg;
          st[mt][half][1] = lg;
          st[mt][half][2] = mtot;
          st[mt][half][3] = ltot;
#pragma unroll
          for (int nt = 0; nt < NT_W; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int i = r * HD + (v_direct ? v_dim(c.v_type, warp * KB_W + nt / 4, 2 * tig + e, nt % 4)
                                               : warp * DW + nt * 8 + 2 * tig + e);
              const float x = o[mt][nt][2 * half + e];
              const float gv = grp_first ? x : fold_value(acc_grp[i], ga, x, gb);
              acc_grp[i] = gv;
              if (grp_done) acc_tot[i] = tot_first ? gv : fold_value(acc_tot[i], ta, gv, tb);
            }
        }
      __syncthreads();  // every thread has read the old row states
      if (warp == 0 && tig == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int r = mt * 16 + gid + 8 * half, ns = row_splits(b, r_first + r);
            if (s >= ns) continue;
            const bool grp_done = s % kFoldGroup == kFoldGroup - 1 || s == ns - 1;
            m_grp[r] = st[mt][half][0];
            l_grp[r] = st[mt][half][1];
            if (grp_done) {
              m_tot[r] = st[mt][half][2];
              l_tot[r] = st[mt][half][3];
            }
          }
      }
    }
    __syncthreads();  // the row states may be reset for the next split now
  }
  cp_async_wait(0);

  if (FOLD) {
    for (int i = tid; i < RB * HD; i += THREADS) {
      const int r = i / HD, d = i % HD, row = r_first + r;
      if (row >= b.rows) continue;
      const int t = row / c.group, h = b.g * c.group + row % c.group;
      c.out[(int64_t(t) * c.n_heads + h) * HD + d] = acc_tot[i] * (1.0f / l_tot[r]);
    }
  }
}

// ---- Merge: folds a row's split partials in the fixed two-level order ----
// One block per (output row, 32 dims); warp w folds groups w, w + 32, ... (each left to right,
// all its loads in flight at once) into a shared slot; warp 0 then folds the slots in order.

struct MergeCall {
  const float* part;
  float* out;
  int64_t pos0;
  int n_heads, n_splits, hd, block_begin;
};
struct MergeLaunch {
  MergeCall calls[kMaxCallsPerLaunch];
  int n_calls;
};

__global__ void __launch_bounds__(32 * kMergeWarps) merge_kernel(const __grid_constant__ MergeLaunch launch) {
  __shared__ float slot_acc[kMergeWarps][32], slot_m[kMergeWarps], slot_l[kMergeWarps];
  const int bid = int(blockIdx.x);
  int ci = 0;
  while (ci + 1 < launch.n_calls && launch.calls[ci + 1].block_begin <= bid) ++ci;
  const MergeCall& c = launch.calls[ci];
  const int chunks = c.hd / 32, local = bid - c.block_begin;
  const int row = local / chunks, d = (local % chunks) * 32 + threadIdx.x % 32, w = threadIdx.x / 32;
  const int t = row / c.n_heads;
  const int ns = int((c.pos0 + t + 1 + kAttnSplitKeys - 1) / kAttnSplitKeys);
  const int ng = (ns + kFoldGroup - 1) / kFoldGroup;
  const float* p = c.part + int64_t(row) * c.n_splits * (c.hd + 2);
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

SplitTuning g_tuning;

struct Config {
  int hd, mt, warps;
  bool fold;
  bool operator==(const Config& o) const { return hd == o.hd && mt == o.mt && warps == o.warps && fold == o.fold; }
};

Config config_of(const AttentionCall& call) {
  const int group = int(call.args.n_heads / call.kv.n_kv_heads);
  const int64_t rows = call.args.T * group;
  Config cfg{int(call.kv.head_dim), 1, g_tuning.wide && call.kv.head_dim == 256 ? 8 : 4, false};
  if (rows > kMaxRowsPartial) cfg.fold = true;  // prefill: fold in-block, no partials
  else cfg.mt = rows <= 16 ? 1 : rows <= 32 ? 2 : 4;
  return cfg;
}

int64_t n_splits_of(const AttentionCall& call) {
  return (call.args.pos0 + call.args.T + kAttnSplitKeys - 1) / kAttnSplitKeys;
}

// Pipeline depth: about 32 KiB of a block's tiles in flight, within the shared-memory target.
int stages_of(const AttentionCall& call, const Config& cfg) {
  const int kt = kv_type_of(call.kv.k_type), vt = kv_type_of(call.kv.v_type);
  const size_t raw = size_t(kTileKeys) * (call.kv.k_row_bytes + call.kv.v_row_bytes);
  int stages = std::min(g_tuning.max_stages, 2 + (raw < 24 * 1024) + (raw < 12 * 1024));
  while (stages > 2 && make_layout(cfg.hd, cfg.mt, cfg.warps, cfg.fold, kt, vt, int(call.kv.k_row_bytes),
                                   int(call.kv.v_row_bytes), stages, g_tuning.direct).total > g_tuning.smem_target)
    --stages;
  return stages;
}

// Streaming multiprocessors of the current device (cached per device).
int sm_count() {
  static int cached[64] = {};
  int dev = 0;
  check(cudaGetDevice(&dev), "attention: device");
  if (dev < 0 || dev >= 64) return 132;
  if (cached[dev] == 0) check(cudaDeviceGetAttribute(&cached[dev], cudaDevAttrMultiProcessorCount, dev), "attention: SMs");
  return cached[dev];
}

// Consecutive splits one block walks: enough that a long call fills the GPU with about two
// blocks per SM instead of thousands of short blocks (the result does not depend on it).
int splits_per_block_of(int64_t blocks_at_one, int64_t n_splits) {
  const int64_t target = int64_t(g_tuning.blocks_per_sm) * int64_t(sm_count());
  return int(std::max<int64_t>(1, std::min<int64_t>(n_splits, (blocks_at_one + target - 1) / target)));
}

template <int HD, int MT, bool FOLD, int WARPS>
void launch_split(const SplitLaunch& l, int blocks, size_t smem, cudaStream_t stream) {
  // Raise the dynamic shared memory limit once per kernel and device (an attribute per device).
  static bool configured[64] = {};
  int dev = 0;
  check(cudaGetDevice(&dev), "attention: device");
  if (dev < 0 || dev >= 64 || !configured[dev]) {
    check(cudaFuncSetAttribute(split_kernel<HD, MT, FOLD, WARPS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               227 * 1024),
          "attention: shared memory limit");
    if (dev >= 0 && dev < 64) configured[dev] = true;
  }
  split_kernel<HD, MT, FOLD, WARPS><<<unsigned(blocks), 32 * WARPS, smem, stream>>>(l);
}

void launch_config(const Config& cfg, const SplitLaunch& l, int blocks, size_t smem, cudaStream_t stream) {
#define WEFT_SPLIT_CASE(HD_, MT_, FOLD_, W_)                                      \
  if (cfg.hd == HD_ && cfg.mt == MT_ && cfg.fold == FOLD_ && cfg.warps == W_) {    \
    launch_split<HD_, MT_, FOLD_, W_>(l, blocks, smem, stream);                    \
    return;                                                                        \
  }
#define WEFT_SPLIT_CASES(HD_, W_)                                                   \
  WEFT_SPLIT_CASE(HD_, 1, false, W_) WEFT_SPLIT_CASE(HD_, 2, false, W_)             \
  WEFT_SPLIT_CASE(HD_, 4, false, W_) WEFT_SPLIT_CASE(HD_, 1, true, W_)
  WEFT_SPLIT_CASES(64, 4) WEFT_SPLIT_CASES(128, 4) WEFT_SPLIT_CASES(256, 4)  // four warps
  WEFT_SPLIT_CASES(256, 8)                                                   // a warp per 32 dims
#undef WEFT_SPLIT_CASES
#undef WEFT_SPLIT_CASE
  throw std::logic_error("attention: no split kernel for this configuration");
}

}  // namespace

void set_split_tuning(const SplitTuning& t) { g_tuning = t; }
SplitTuning split_tuning() { return g_tuning; }

bool split_supports(const AttentionCall& call) {
  const KvLayerView& kv = call.kv;
  const int kt = kv_type_of(kv.k_type), vt = kv_type_of(kv.v_type);
  const bool types = (kt == kKvF16 || is_quant(kt)) && (vt == kKvF16 || is_quant(vt));
  const bool hd = kv.head_dim == 64 || kv.head_dim == 128 || kv.head_dim == 256;
  return types && hd && kv.page_tokens % kTileKeys == 0 && kv.page_tokens <= int64_t(1) << 30 && call.args.n_heads / kv.n_kv_heads <= 64 &&
         call.args.pos0 + call.args.T <= int64_t(1) << 30 && call.args.T * call.args.n_heads <= int64_t(1) << 24;
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
      sc.pos0 = int(call.args.pos0);
      sc.page_tokens = int(kv.page_tokens);
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
      sc.splits_per_block =
          cfg.fold ? sc.n_splits : splits_per_block_of(int64_t(sc.n_kv) * sc.n_rowgroups * sc.n_splits, sc.n_splits);
      sc.direct = g_tuning.direct ? 1 : 0;
      sc.stages = stages_of(call, cfg);
      sc.scale = call.args.scale;
      sc.block_begin = blocks;
      const int runs = (sc.n_splits + sc.splits_per_block - 1) / sc.splits_per_block;
      blocks += sc.n_kv * sc.n_rowgroups * (cfg.fold ? 1 : runs);
      smem = std::max(smem, make_layout(cfg.hd, cfg.mt, cfg.warps, cfg.fold, sc.k_type, sc.v_type, sc.k_row_bytes,
                                        sc.v_row_bytes, sc.stages, sc.direct != 0).total);
      if (!cfg.fold) merge_calls.push_back(i);
      if (l.n_calls == kMaxCallsPerLaunch) flush();
    }
    flush();
  }

  merge_partials(calls, offsets, merge_calls.data(), int64_t(merge_calls.size()), workspace, stream);
}

void merge_partials(const AttentionCall* calls, const size_t* offsets, const int64_t* which, int64_t n_which,
                    uint8_t* workspace, cudaStream_t stream) {
  MergeLaunch m{};
  int blocks = 0;
  auto flush_merge = [&]() {
    if (m.n_calls == 0) return;
    merge_kernel<<<unsigned(blocks), 32 * kMergeWarps, 0, stream>>>(m);
    check(cudaGetLastError(), "attention (merge) launch");
    m = MergeLaunch{};
    blocks = 0;
  };
  for (int64_t k = 0; k < n_which; ++k) {
    const int64_t i = which[k];
    const AttentionCall& call = calls[i];
    MergeCall& mc = m.calls[m.n_calls++];
    mc.part = reinterpret_cast<const float*>(workspace + offsets[i]);
    mc.out = call.args.out;
    mc.pos0 = call.args.pos0;
    mc.n_heads = int(call.args.n_heads);
    mc.n_splits = int(n_splits_of(call));
    mc.hd = int(call.kv.head_dim);
    mc.block_begin = blocks;
    blocks += int(call.args.T * call.args.n_heads) * (mc.hd / 32);
    if (m.n_calls == kMaxCallsPerLaunch) flush_merge();
  }
  flush_merge();
}

}  // namespace weft::cuda::detail
