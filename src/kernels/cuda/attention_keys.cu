// The key-parallel split attention kernel for f16, q8_0 and q4_0 KV caches (issue 11, round 4).
//
// Why a second tiled kernel. The dim-parallel kernel (attention_split.cu) gives each of its warps
// a slice of head_dim of every 32-key tile, so every tile costs four block barriers, a cross-warp
// reduction of partial scores through shared memory and a softmax pass for tiny MMA work: its
// Nsight profile is bound by the latency of ~630-810 instructions per warp per tile, and the
// quantized caches (in-register dequantization on top) run slower than f16. Here every warp owns
// *keys* instead, with the whole head_dim:
//
//  * A block (4 warps) takes one kv head, up to 8·NT query rows of its GQA group (row r = t·G + i)
//    and a run of consecutive 256-key splits. A split is 4 tiles of 64 keys; warp w takes keys
//    [16w, 16w + 16) of every tile and keeps its own online-softmax state (m, l, O) over them.
//  * Each warp loads its own 16-key sub-tiles (K and V bytes, 16-byte cp.async, a ring of
//    `stages` sub-tiles) and consumes them alone: no block barrier inside a split. Each KV byte
//    is still read once per block and serves every query row of the block (the GQA sharing).
//  * Scores transposed, keys on the MMA M dimension: Sᵀ = K·Qᵀ (m16n8k16, f16 in, f32 out), so a
//    GQA group of 8 fills N = 8 and no MMA row is padding. The 16 keys of a warp are one m-tile;
//    K fragments come from ldmatrix (f16) or straight from the raw q8_0 / q4_0 bytes (each lane
//    decodes the bytes it can read at once; the query in shared memory is stored in the same
//    permuted dim order). With an f16 K the query is split into f16 hi + lo (near-f32 scores).
//  * Softmax on the MMA accumulators in registers (a row's 16 keys sit in 8 lanes: 3 shuffles for
//    the max); P is rounded to f16 (hi + lo for an f16 V) and transposed in registers with
//    movmatrix into the B operand of Oᵀ = Vᵀ·Pᵀ (M = head_dim, N = rows, K = the 16 keys). Vᵀ
//    fragments come from ldmatrix.trans (f16) or straight from the raw bytes, each lane owning
//    4 dims of every 32-value block (mapped back to their dims when written: v_dim).
//  * At the end of a split the four warp states are combined in a fixed order (max of the m,
//    then O and l scaled and added warp 0, 1, 2, 3 left to right), and the split partial is
//    written to the workspace (decode / verify; the merge kernel of attention_split.cu folds
//    them) or folded inside the block in the merge kernel's two-level order (prefill).
//
// Determinism: which warp, MMA position and fold step a key meets depends only on its position
// (tiles start at multiples of 64, splits at multiples of 256), every reduction has a fixed order,
// a row's MMA column never mixes with another row's, and fully masked sub-tiles (skipped) are
// exact identities of the state. So a row's bits depend only on its position and its cache:
// run to run, whatever else is in the batch, whatever the launch shape (stages, splits per block,
// rows per block), and decode, verify and prefill rows agree bit for bit.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/attention_mma.cuh"

namespace weft::cuda::detail {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kWarpKeys = 16;                   // keys of a warp per tile: one MMA m-tile
constexpr int kTileKeys = kWarps * kWarpKeys;   // 64
constexpr int kMaxCalls = 16;
constexpr int kMaxRowsPartial = 64;             // rows of one kv head a split-partial call may have
static_assert(kAttnSplitKeys % kTileKeys == 0, "splits are whole tiles");

struct KeysCall {
  const uint8_t* const* pages;
  const float* q;
  float* out;
  float* part;  // partials [T·n_heads][n_splits][hd + 2] (split-partial mode)
  int pos0, page_tokens;  // positions < 2^30 (keys_supports): 32-bit index math
  int T, n_heads, n_kv, group;
  int k_type, v_type, k_row_bytes, v_row_bytes;
  int n_rowgroups, n_splits, splits_per_block, stages;
  float scale;
  int block_begin;
};

struct KeysLaunch {
  KeysCall calls[kMaxCalls];
  int n_calls;
};

__host__ __device__ inline size_t align16(size_t n) { return (n + 15) & ~size_t(15); }
__host__ __device__ inline bool is_quant(int t) { return t == kKvQ8 || t == kKvQ4; }

// Shared memory of one block (byte offsets). Per warp a ring of `stages` sub-tiles, each the
// K then the V bytes of 16 keys (f16: rows padded to hd + 8 halves for ldmatrix; quantized: the
// raw rows, contiguous).
struct Layout {
  size_t q_hi, q_lo, stat, acc_grp, acc_tot, rowst, ring;
  size_t k_sub, v_sub, stage, ring_warp, total;
  int fold_rounds;  // head_dim chunks of the end-of-split fold (each fits one ring slot)
};

__host__ __device__ inline Layout make_layout(int hd, int nt, bool fold, int kt, int vt, int k_rb, int v_rb,
                                              int stages) {
  const size_t rows = size_t(8 * nt), qstr = size_t(hd + 8);
  Layout L{};
  size_t o = 0;
  auto take = [&](size_t bytes) {
    const size_t at = o;
    o += align16(bytes);
    return at;
  };
  L.q_hi = take(rows * qstr * 2);
  L.q_lo = take(kt == kKvF16 ? rows * qstr * 2 : 0);
  L.stat = take(2 * kWarps * rows * 2 * 4);           // [parity][warp][row] m, l
  L.acc_grp = take(fold ? rows * size_t(hd) * 4 : 0);
  L.acc_tot = take(fold ? rows * size_t(hd) * 4 : 0);
  L.rowst = take(fold ? 4 * rows * 4 : 0);            // m_grp, l_grp, m_tot, l_tot
  L.k_sub = align16(kt == kKvF16 ? size_t(kWarpKeys) * qstr * 2 : size_t(kWarpKeys) * size_t(k_rb));
  L.v_sub = align16(vt == kKvF16 ? size_t(kWarpKeys) * qstr * 2 : size_t(kWarpKeys) * size_t(v_rb));
  // The end-of-split fold passes each warp's scaled O ([row][chunk + 4] floats) through the ring
  // slot the warp has just consumed: head_dim in 1, 2, 4.. chunks of >= 32 dims, the slot padded
  // where even a 32-dim chunk does not fit (small rows).
  L.stage = L.k_sub + L.v_sub;
  L.fold_rounds = 1;
  auto chunk_bytes = [&](int rounds) { return rows * size_t(hd / rounds + 4) * 4; };
  while (chunk_bytes(L.fold_rounds) > L.stage && hd / (2 * L.fold_rounds) >= 32) L.fold_rounds *= 2;
  if (align16(chunk_bytes(L.fold_rounds)) > L.stage) L.stage = align16(chunk_bytes(L.fold_rounds));
  L.ring_warp = size_t(stages) * L.stage;
  L.ring = take(kWarps * L.ring_warp);
  L.total = o;
  return L;
}

// ---- Dequantization (PTX wrappers, bytes_to_half2, q4_word: attention_mma.cuh) ----

// 4 int8 -> 2 half2 (elements 0,1 and 2,3), scaled.
__device__ __forceinline__ void q8_word(uint32_t w, __half2 d, uint32_t& o0, uint32_t& o1) {
  const uint32_t u = w ^ 0x80808080u;  // q + 128
  const __half2 bias = __float2half2_rn(1152.0f);
  o0 = bytes_to_half2(u, 0x4140, bias, d);
  o1 = bytes_to_half2(u, 0x4342, bias, d);
}
// Position of dim d (of a 32-value block) in the K fragment order of a quantized K: lane tig of a
// q8_0 K reads bytes 8·tig..8·tig+7 of a block (words for k-step 0 and 1), of a q4_0 K bytes
// 4·tig..4·tig+3 (low nibbles: k-step 0, high: k-step 1); position 16·s + 8·h + 2·tig + e is the
// MMA k index (k-step s, fragment half h, element e).
__device__ __forceinline__ int k_pos(int kt, int d) {
  if (kt == kKvF16) return d;
  const int blk = d / 32, dd = d % 32;
  int s, tig, h;
  if (kt == kKvQ8) {
    tig = dd / 8;
    s = (dd % 8) / 4;
  } else {
    s = dd / 16;
    tig = (dd % 16) / 4;
  }
  h = (dd % 4) / 2;
  return blk * 32 + 16 * s + 8 * h + 2 * tig + dd % 2;
}

// The dim of row m (0..15) of m-tile mt of a directly read quantized Vᵀ (the lane of row m % 8
// holds elements 4·(m%8).. (q8_0) or 2·(m%8).., 16 + 2·(m%8).. (q4_0) of each block).
__device__ __forceinline__ int v_dim(int vt, int mt, int m) {
  const int blk = mt / 2, mtl = mt % 2;
  if (vt == kKvF16) return mt * 16 + m;
  if (vt == kKvQ8) return blk * 32 + 4 * (m % 8) + 2 * mtl + m / 8;
  return blk * 32 + 16 * mtl + 2 * (m % 8) + m / 8;
}

// K A-fragments of four k-steps (one pair of 32-value blocks, pb) for keys gid (rows r0) and
// gid + 8 (r1) of the warp's sub-tile: a[ks] = {key gid, key gid+8, key gid, key gid+8} halves
// of the MMA A layout, in k_pos order.
__device__ __forceinline__ void k_frags_q8(const uint8_t* r0, const uint8_t* r1, int pb, int tig, uint32_t (*a)[4]) {
#pragma unroll
  for (int key = 0; key < 2; ++key) {
    const uint32_t* W = reinterpret_cast<const uint32_t*>((key ? r1 : r0) + 68 * pb);
    const __half2 d0 = scale_half2(W[0] & 0xffffu), d1 = scale_half2(W[8] >> 16);
    const uint32_t x0 = W[2 * tig], x1 = W[2 * tig + 1], x2 = W[2 * tig + 2];
    q8_word(__byte_perm(x0, x1, 0x5432), d0, a[0][key], a[0][2 + key]);  // block 0 bytes 8tig..+3
    q8_word(__byte_perm(x1, x2, 0x5432), d0, a[1][key], a[1][2 + key]);  // block 0 bytes 8tig+4..+7
    q8_word(W[9 + 2 * tig], d1, a[2][key], a[2][2 + key]);               // block 1
    q8_word(W[10 + 2 * tig], d1, a[3][key], a[3][2 + key]);
  }
}
__device__ __forceinline__ void k_frags_q4(const uint8_t* r0, const uint8_t* r1, int pb, int tig, uint32_t (*a)[4]) {
#pragma unroll
  for (int key = 0; key < 2; ++key) {
    const uint32_t* W = reinterpret_cast<const uint32_t*>((key ? r1 : r0) + 36 * pb);
    const __half2 d0 = scale_half2(W[0] & 0xffffu), d1 = scale_half2(W[4] >> 16);
    uint32_t lo[2], hi[2];
    q4_word(__byte_perm(W[tig], W[tig + 1], 0x5432), d0, lo, hi);  // block 0 bytes 4tig..+3
    a[0][key] = lo[0];
    a[0][2 + key] = lo[1];
    a[1][key] = hi[0];
    a[1][2 + key] = hi[1];
    q4_word(W[5 + tig], d1, lo, hi);  // block 1
    a[2][key] = lo[0];
    a[2][2 + key] = lo[1];
    a[3][key] = hi[0];
    a[3][2 + key] = hi[1];
  }
}

// Vᵀ A-fragments of the four m-tiles (32-dim halves of blocks 2pb, 2pb+1) of one pair, for the
// warp's 16 keys: lane (gid, tig) needs keys 2tig, 2tig+1 (a0, a1) and 2tig+8, 2tig+9 (a2, a3).
__device__ __forceinline__ void v_frags_q8(const uint8_t* vs, int rb, int pb, int gid, int tig, uint32_t (*a)[4]) {
  uint32_t h[4][2][2];  // [key x][block][half2]
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    const int key = 2 * tig + (x & 1) + (x >> 1) * 8;
    const uint32_t* W = reinterpret_cast<const uint32_t*>(vs + key * rb + 68 * pb);
    const __half2 d0 = scale_half2(W[0] & 0xffffu), d1 = scale_half2(W[8] >> 16);
    q8_word(__byte_perm(W[gid], W[gid + 1], 0x5432), d0, h[x][0][0], h[x][0][1]);
    q8_word(W[9 + gid], d1, h[x][1][0], h[x][1][1]);
  }
#pragma unroll
  for (int bi = 0; bi < 2; ++bi)
#pragma unroll
    for (int mtl = 0; mtl < 2; ++mtl) {
      uint32_t* f = a[bi * 2 + mtl];
      f[0] = __byte_perm(h[0][bi][mtl], h[1][bi][mtl], 0x5410);
      f[1] = __byte_perm(h[0][bi][mtl], h[1][bi][mtl], 0x7632);
      f[2] = __byte_perm(h[2][bi][mtl], h[3][bi][mtl], 0x5410);
      f[3] = __byte_perm(h[2][bi][mtl], h[3][bi][mtl], 0x7632);
    }
}
__device__ __forceinline__ void v_frags_q4(const uint8_t* vs, int rb, int pb, int gid, int tig, uint32_t (*a)[4]) {
  uint32_t h[4][2][2];
  const __half2 bias = __float2half2_rn(1032.0f);
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    const int key = 2 * tig + (x & 1) + (x >> 1) * 8;
#pragma unroll
    for (int bi = 0; bi < 2; ++bi) {
      const uint8_t* bp = vs + key * rb + 18 * (2 * pb + bi);
      const __half2 d = scale_half2(*reinterpret_cast<const uint16_t*>(bp));
      const uint32_t u = *reinterpret_cast<const uint16_t*>(bp + 2 + 2 * gid);
      h[x][bi][0] = bytes_to_half2(u & 0x0f0fu, 0x4140, bias, d);
      h[x][bi][1] = bytes_to_half2((u >> 4) & 0x0f0fu, 0x4140, bias, d);
    }
  }
#pragma unroll
  for (int bi = 0; bi < 2; ++bi)
#pragma unroll
    for (int mtl = 0; mtl < 2; ++mtl) {
      uint32_t* f = a[bi * 2 + mtl];
      f[0] = __byte_perm(h[0][bi][mtl], h[1][bi][mtl], 0x5410);
      f[1] = __byte_perm(h[0][bi][mtl], h[1][bi][mtl], 0x7632);
      f[2] = __byte_perm(h[2][bi][mtl], h[3][bi][mtl], 0x5410);
      f[3] = __byte_perm(h[2][bi][mtl], h[3][bi][mtl], 0x7632);
    }
}

// Keys that row r (of this kv head) sees: [0, pos0 + t + 1); none for padding rows.
__device__ __forceinline__ int row_keys(const KeysCall& c, int rows, int r) {
  return r < rows ? c.pos0 + r / c.group + 1 : 0;
}

// A warp's cp.async copies of its 16 keys [k0, k0 + 16) of kv head g (inside one page: pages are
// multiples of 32 tokens) into `dst`. Bytes of rows past key_end are zero-filled, so they decode
// to exact zeros (no NaN can meet a zero probability).
template <int HD>
__device__ __forceinline__ void issue_sub(const KeysCall& c, int g, int k0, int key_end, uint8_t* dst, size_t v_off,
                                          int lane) {
  const int valid = min(kWarpKeys, key_end - k0);
  const int pi = k0 / c.page_tokens;
  const uint8_t* page = c.pages[pi];
  const size_t row0 = size_t(g) * size_t(c.page_tokens) + size_t(k0 - pi * c.page_tokens);
  const uint8_t* src[2] = {page + row0 * size_t(c.k_row_bytes),
                           page + size_t(c.n_kv) * size_t(c.page_tokens) * size_t(c.k_row_bytes) +
                               row0 * size_t(c.v_row_bytes)};
#pragma unroll
  for (int which = 0; which < 2; ++which) {
    const int type = which ? c.v_type : c.k_type;
    uint8_t* d = dst + (which ? v_off : 0);
    if (type == kKvF16) {
      constexpr int per_row = HD / 8, n = kWarpKeys * per_row;
#pragma unroll 4
      for (int ch = lane; ch < n; ch += 32) {
        const int row = ch / per_row, col = ch % per_row;
        const bool ok = row < valid;
        cp_async16(d + (row * (HD + 8) + col * 8) * 2, ok ? src[which] + size_t(ch) * 16 : src[which], ok ? 16 : 0);
      }
    } else {
      const int rb = which ? c.v_row_bytes : c.k_row_bytes;
      const int n = kWarpKeys * rb / 16, have = valid * rb;
      for (int ch = lane; ch < n; ch += 32) {
        const int bytes = max(0, min(16, have - ch * 16));
        cp_async16(d + ch * 16, bytes > 0 ? src[which] + ch * 16 : src[which], bytes);
      }
    }
  }
}

__device__ __forceinline__ int find_call(const KeysLaunch& l, int bid) {
  int c = 0;
  while (c + 1 < l.n_calls && l.calls[c + 1].block_begin <= bid) ++c;
  return c;
}

template <int HD, int NT, bool FOLD>
__global__ void __launch_bounds__(kThreads, NT == 1 ? 3 : 1) keys_kernel(const __grid_constant__ KeysLaunch launch) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int R = 8 * NT, MT = HD / 16, QSTR = HD + 8, NPB = HD / 64;
  const int bid = int(blockIdx.x);
  const KeysCall& c = launch.calls[find_call(launch, bid)];
  const int local = bid - c.block_begin;
  const int rows = c.T * c.group;
  int rg, g, s_begin = 0, s_end;
  if (FOLD) {
    rg = local % c.n_rowgroups;
    g = local / c.n_rowgroups;
  } else {
    const int n_runs = (c.n_splits + c.splits_per_block - 1) / c.splits_per_block;
    const int run = local % n_runs;
    rg = (local / n_runs) % c.n_rowgroups;
    g = local / (n_runs * c.n_rowgroups);
    s_begin = run * c.splits_per_block;
  }
  const int r_first = rg * R, r_last = min(rows, r_first + R) - 1;
  const int key_end = c.pos0 + r_last / c.group + 1;
  const int n_splits_block = (key_end + kAttnSplitKeys - 1) / kAttnSplitKeys;
  s_end = FOLD ? n_splits_block : min(s_begin + c.splits_per_block, n_splits_block);
  if (s_begin >= s_end) return;  // no keys here for any row of the block (uniform)

  const int kt = c.k_type, vt = c.v_type;
  const Layout L = make_layout(HD, NT, FOLD, kt, vt, c.k_row_bytes, c.v_row_bytes, c.stages);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  uint16_t* q_hi = reinterpret_cast<uint16_t*>(smem + L.q_hi);
  uint16_t* q_lo = reinterpret_cast<uint16_t*>(smem + L.q_lo);
  float* stat = reinterpret_cast<float*>(smem + L.stat);
  float* acc_grp = reinterpret_cast<float*>(smem + L.acc_grp);
  float* acc_tot = reinterpret_cast<float*>(smem + L.acc_tot);
  float* m_grp = reinterpret_cast<float*>(smem + L.rowst);
  float* l_grp = m_grp + R;
  float* m_tot = l_grp + R;
  float* l_tot = m_tot + R;
  uint8_t* ring = smem + L.ring + size_t(warp) * L.ring_warp;

  const int kb = s_begin * kAttnSplitKeys;
  const int ke = min(int(s_end * kAttnSplitKeys), key_end);
  const int n_tiles = (ke - kb + kTileKeys - 1) / kTileKeys;
  const int stages = c.stages;
  // The warp's sub-tile of tile j: keys [kb + 64j + 16·warp, +16); idle (all masked) past ke.
  auto sub_k0 = [&](int j) { return kb + j * kTileKeys + warp * kWarpKeys; };
  for (int p = 0; p < stages - 1; ++p) {
    if (p < n_tiles && sub_k0(p) < ke) issue_sub<HD>(c, g, sub_k0(p), key_end, ring + size_t(p) * L.stage, L.k_sub, lane);
    cp_async_commit();
  }

  // Queries of the block's rows as f16 hi (+ lo for an f16 K), in the K fragment dim order.
  for (int i = tid; i < R * HD; i += kThreads) {
    const int r = i / HD, d = i % HD, row = r_first + r;
    float x = 0.0f;
    if (row < rows) x = c.q[(int64_t(row / c.group) * c.n_heads + g * c.group + row % c.group) * HD + d];
    const __half hi = __float2half_rn(x);
    const int p = r * QSTR + k_pos(kt, d);
    q_hi[p] = __half_as_ushort(hi);
    if (kt == kKvF16) q_lo[p] = __half_as_ushort(__float2half_rn(x - __half2float(hi)));
  }
  if (FOLD) {
    for (int i = tid; i < 4 * R; i += kThreads) m_grp[i] = 0.0f;
  }
  __syncthreads();

  // This lane's softmax rows: columns 2·tig, 2·tig + 1 of every n-tile.
  int re[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) re[nt][e] = row_keys(c, rows, r_first + nt * 8 + 2 * tig + e);

  float o[MT][NT][4];
  float m_run[NT][2], l_run[NT][2];
  // ldmatrix lane addresses: K / Q (non-trans) and Vᵀ (trans) fragments.
  const int ka_row = (lane % 8) + ((lane / 8) % 2) * 8, ka_col = (lane / 16) * 8;
  const int va_row = (lane / 16) * 8 + lane % 8, va_col = ((lane / 8) % 2) * 8;
  const int qb_row = lane % 8, qb_col = (lane / 8) * 8;

  for (int j = 0; j < n_tiles; ++j) {
    const int k0 = kb + j * kTileKeys;
    const int s = k0 / kAttnSplitKeys;
    if (k0 % kAttnSplitKeys == 0) {  // a split starts: fresh state
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        m_run[nt][0] = m_run[nt][1] = -INFINITY;
        l_run[nt][0] = l_run[nt][1] = 0.0f;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e) o[mt][nt][e] = 0.0f;
      }
    }
    const int jn = j + stages - 1;
    if (jn < n_tiles && sub_k0(jn) < ke)
      issue_sub<HD>(c, g, sub_k0(jn), key_end, ring + size_t(jn % stages) * L.stage, L.k_sub, lane);
    cp_async_commit();
    cp_async_wait(stages - 1);
    __syncwarp();

    const int kw = sub_k0(j);
    if (kw < ke) {  // warp-uniform; an idle sub-tile would leave the state exactly as it is
      const uint8_t* ks = ring + size_t(j % stages) * L.stage;
      const uint8_t* vs = ks + L.k_sub;

      // ---- Sᵀ = K·Qᵀ: 16 keys x 8·NT rows, two (quantized) or four (f16 hi/lo) MMA chains ----
      float sacc[NT][4][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int ch = 0; ch < 4; ++ch)
#pragma unroll
          for (int e = 0; e < 4; ++e) sacc[nt][ch][e] = 0.0f;
      if (kt == kKvF16) {
        const uint16_t* kf = reinterpret_cast<const uint16_t*>(ks);
#pragma unroll
        for (int k2 = 0; k2 < HD / 32; ++k2) {
          uint32_t a0[4], a1[4];
          ldsm_x4(a0, kf + ka_row * QSTR + 32 * k2 + ka_col);
          ldsm_x4(a1, kf + ka_row * QSTR + 32 * k2 + 16 + ka_col);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            uint32_t bh[4], bl[4];
            ldsm_x4(bh, q_hi + (nt * 8 + qb_row) * QSTR + 32 * k2 + qb_col);
            ldsm_x4(bl, q_lo + (nt * 8 + qb_row) * QSTR + 32 * k2 + qb_col);
            mma16816(sacc[nt][0], a0, bh[0], bh[1]);
            mma16816(sacc[nt][1], a1, bh[2], bh[3]);
            mma16816(sacc[nt][2], a0, bl[0], bl[1]);
            mma16816(sacc[nt][3], a1, bl[2], bl[3]);
          }
        }
      } else {
        const uint8_t* r0 = ks + gid * c.k_row_bytes;
        const uint8_t* r1 = ks + (gid + 8) * c.k_row_bytes;
#pragma unroll
        for (int pb = 0; pb < NPB; ++pb) {
          uint32_t a[4][4];
          if (kt == kKvQ8) k_frags_q8(r0, r1, pb, tig, a);
          else k_frags_q4(r0, r1, pb, tig, a);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              uint32_t bh[4];
              ldsm_x4(bh, q_hi + (nt * 8 + qb_row) * QSTR + 64 * pb + 32 * h + qb_col);
              mma16816(sacc[nt][0], a[2 * h], bh[0], bh[1]);
              mma16816(sacc[nt][1], a[2 * h + 1], bh[2], bh[3]);
            }
        }
      }

      // ---- online softmax on the accumulators: element e is key gid (+8 for e >= 2), row 2tig + e%2 ----
      uint32_t pb_hi[NT][2], pb_lo[NT][2];
      float alpha[NT][2];
      bool rescale = false;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        float p[2][2];  // [column][key gid, gid + 8]
#pragma unroll
        for (int col = 0; col < 2; ++col) {
          float v[2];
#pragma unroll
          for (int kh = 0; kh < 2; ++kh) {
            const int e = 2 * kh + col;
            const float dot = kt == kKvF16 ? (sacc[nt][0][e] + sacc[nt][1][e]) + (sacc[nt][2][e] + sacc[nt][3][e])
                                           : sacc[nt][0][e] + sacc[nt][1][e];
            v[kh] = kw + gid + 8 * kh < re[nt][col] ? __fmul_rn(dot, c.scale) : -INFINITY;
          }
          float mx = fmaxf(v[0], v[1]);
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
          const float m_old = m_run[nt][col], m_new = fmaxf(m_old, mx);
          const float a = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
#pragma unroll
          for (int kh = 0; kh < 2; ++kh) p[col][kh] = v[kh] == -INFINITY ? 0.0f : expf(v[kh] - m_new);
          l_run[nt][col] = __fadd_rn(__fmul_rn(l_run[nt][col], a), __fadd_rn(p[col][0], p[col][1]));
          m_run[nt][col] = m_new;
          alpha[nt][col] = a;
          rescale |= a != 1.0f;
        }
        // P as f16 (hi, and lo = the rest for an f16 V), transposed into the B operand of Oᵀ.
#pragma unroll
        for (int kh = 0; kh < 2; ++kh) {
          const __half2 h2 = __floats2half2_rn(p[0][kh], p[1][kh]);
          pb_hi[nt][kh] = movmatrix_trans(half2_as_u32(h2));
          if (vt == kKvF16) {
            const float2 back = __half22float2(h2);
            pb_lo[nt][kh] = movmatrix_trans(half2_as_u32(__floats2half2_rn(p[0][kh] - back.x, p[1][kh] - back.y)));
          }
        }
      }
      if (__any_sync(0xffffffffu, rescale)) {  // multiplying by 1 changes no bit: skipped when no max moved
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            o[mt][nt][0] = __fmul_rn(o[mt][nt][0], alpha[nt][0]);
            o[mt][nt][1] = __fmul_rn(o[mt][nt][1], alpha[nt][1]);
            o[mt][nt][2] = __fmul_rn(o[mt][nt][2], alpha[nt][0]);
            o[mt][nt][3] = __fmul_rn(o[mt][nt][3], alpha[nt][1]);
          }
      }

      // ---- Oᵀ += Vᵀ·Pᵀ ----
      if (vt == kKvF16) {
        const uint16_t* vf = reinterpret_cast<const uint16_t*>(vs);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          uint32_t a[4];
          ldsm_x4_trans(a, vf + va_row * QSTR + mt * 16 + va_col);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            mma16816(o[mt][nt], a, pb_hi[nt][0], pb_hi[nt][1]);
            mma16816(o[mt][nt], a, pb_lo[nt][0], pb_lo[nt][1]);
          }
        }
      } else {
#pragma unroll
        for (int pb = 0; pb < NPB; ++pb) {
          uint32_t a[4][4];
          if (vt == kKvQ8) v_frags_q8(vs, c.v_row_bytes, pb, gid, tig, a);
          else v_frags_q4(vs, c.v_row_bytes, pb, gid, tig, a);
#pragma unroll
          for (int m4 = 0; m4 < 4; ++m4)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) mma16816(o[4 * pb + m4][nt], a[m4], pb_hi[nt][0], pb_hi[nt][1]);
        }
      }
    }
    __syncwarp();  // every lane is done with the slot before it is refilled

    if ((k0 + kTileKeys) % kAttnSplitKeys != 0 && j != n_tiles - 1) continue;

    // ---- end of split s: combine the four warps' states in a fixed order ----
    float* st = stat + (s & 1) * kWarps * R * 2;  // parity: a fast warp may reach the next split end
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int col = 0; col < 2; ++col) {
        float l = l_run[nt][col];  // this lane's two keys of each tile: sum over the 8 lanes of the column
        l += __shfl_xor_sync(0xffffffffu, l, 4);
        l += __shfl_xor_sync(0xffffffffu, l, 8);
        l += __shfl_xor_sync(0xffffffffu, l, 16);
        if (gid == 0) {
          const int r = nt * 8 + 2 * tig + col;
          st[(warp * R + r) * 2] = m_run[nt][col];
          st[(warp * R + r) * 2 + 1] = l;
        }
      }
    __syncthreads();
    // This lane's scale per row: exp(m_warp - m_split) (0 for a warp that saw no key of the row).
    float sc[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int col = 0; col < 2; ++col) {
        const int r = nt * 8 + 2 * tig + col;
        float m = st[r * 2];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) m = fmaxf(m, st[(w * R + r) * 2]);
        sc[nt][col] = m_run[nt][col] == -INFINITY ? 0.0f : expf(m_run[nt][col] - m);
      }
    // The scaled O of the warps meet in the ring slot each warp has just consumed (free until the
    // next tile's copies), [row][chunk dim], head_dim in L.fold_rounds chunks that fit a slot.
    const int CH = HD / L.fold_rounds, CSTR = CH + 4;
    const size_t slot_at = L.ring + size_t(j % stages) * L.stage;
    for (int round = 0; round < L.fold_rounds; ++round) {
      const int c0 = round * CH;
      float* slot = reinterpret_cast<float*>(smem + slot_at + size_t(warp) * L.ring_warp);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if (mt * 16 < c0 || mt * 16 >= c0 + CH) continue;  // an m-tile's dims lie in one 32-dim block
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int col = 0; col < 2; ++col) {
            const int r = nt * 8 + 2 * tig + col;
            slot[r * CSTR + v_dim(vt, mt, gid) - c0] = __fmul_rn(o[mt][nt][col], sc[nt][col]);
            slot[r * CSTR + v_dim(vt, mt, gid + 8) - c0] = __fmul_rn(o[mt][nt][2 + col], sc[nt][col]);
          }
      }
      __syncthreads();
      // The split's O of every row in this chunk: warps added 0, 1, 2, 3 left to right.
      auto slot_of = [&](int w) { return reinterpret_cast<const float*>(smem + slot_at + size_t(w) * L.ring_warp); };
      if (!FOLD) {
        const int C4 = CH / 4;
        for (int i = tid; i < R * C4; i += kThreads) {
          const int r = i / C4, dc = (i % C4) * 4, row = r_first + r;
          if (row >= rows || s >= (row_keys(c, rows, row) + kAttnSplitKeys - 1) / kAttnSplitKeys) continue;
          float4 x = *reinterpret_cast<const float4*>(slot_of(0) + r * CSTR + dc);
#pragma unroll
          for (int w = 1; w < kWarps; ++w) {
            const float4 y = *reinterpret_cast<const float4*>(slot_of(w) + r * CSTR + dc);
            x.x = __fadd_rn(x.x, y.x);
            x.y = __fadd_rn(x.y, y.y);
            x.z = __fadd_rn(x.z, y.z);
            x.w = __fadd_rn(x.w, y.w);
          }
          const int t = row / c.group, h = g * c.group + row % c.group;
          float* dst = c.part + ((int64_t(t) * c.n_heads + h) * c.n_splits + s) * (HD + 2) + c0 + dc;
          *reinterpret_cast<float2*>(dst) = make_float2(x.x, x.y);  // rows of hd + 2 floats: 8-byte aligned
          *reinterpret_cast<float2*>(dst + 2) = make_float2(x.z, x.w);
        }
      } else {
        // The merge kernel's tree: split -> group (kFoldGroup splits, left to right) -> total.
        for (int i = tid; i < R * CH; i += kThreads) {
          const int r = i / CH, d = c0 + i % CH, row = r_first + r;
          const int ns = (row_keys(c, rows, row) + kAttnSplitKeys - 1) / kAttnSplitKeys;
          if (row >= rows || s >= ns) continue;
          float x = slot_of(0)[r * CSTR + d - c0];
#pragma unroll
          for (int w = 1; w < kWarps; ++w) x = __fadd_rn(x, slot_of(w)[r * CSTR + d - c0]);
          float m = st[r * 2];
          for (int w = 1; w < kWarps; ++w) m = fmaxf(m, st[(w * R + r) * 2]);
          const bool grp_first = s % kFoldGroup == 0, grp_done = s % kFoldGroup == kFoldGroup - 1 || s == ns - 1;
          float ga = 0, gb = 0, mg = m;
          if (!grp_first) fold_scales(m_grp[r], m, &mg, &ga, &gb);
          const int e = r * HD + d;
          const float gv = grp_first ? x : fold_value(acc_grp[e], ga, x, gb);
          acc_grp[e] = gv;
          if (grp_done) {
            if (s < kFoldGroup) {
              acc_tot[e] = gv;
            } else {
              float mt_, ta, tb;
              fold_scales(m_tot[r], mg, &mt_, &ta, &tb);
              acc_tot[e] = fold_value(acc_tot[e], ta, gv, tb);
            }
          }
        }
      }
      __syncthreads();  // the slots are read (and the old row states) before they are reused
    }
    // The split's m and l per row (l: the warps' l scaled and added in the same order as O).
    for (int r = tid; r < R; r += kThreads) {
      const int row = r_first + r;
      const int ns = (row_keys(c, rows, row) + kAttnSplitKeys - 1) / kAttnSplitKeys;
      if (row >= rows || s >= ns) continue;
      float m = st[r * 2];
      for (int w = 1; w < kWarps; ++w) m = fmaxf(m, st[(w * R + r) * 2]);
      float l = 0.0f;
      for (int w = 0; w < kWarps; ++w) {
        const float mw = st[(w * R + r) * 2];
        const float lw = __fmul_rn(st[(w * R + r) * 2 + 1], mw == -INFINITY ? 0.0f : expf(mw - m));
        l = w == 0 ? lw : __fadd_rn(l, lw);
      }
      if (!FOLD) {
        const int t = row / c.group, h = g * c.group + row % c.group;
        float* dst = c.part + ((int64_t(t) * c.n_heads + h) * c.n_splits + s) * (HD + 2);
        dst[HD] = m;
        dst[HD + 1] = l;
        continue;
      }
      const bool grp_first = s % kFoldGroup == 0, grp_done = s % kFoldGroup == kFoldGroup - 1 || s == ns - 1;
      float ga = 0, gb = 0, mg = m, lg = l;
      if (!grp_first) {
        fold_scales(m_grp[r], m, &mg, &ga, &gb);
        lg = fold_value(l_grp[r], ga, l, gb);
      }
      m_grp[r] = mg;
      l_grp[r] = lg;
      if (grp_done) {
        if (s < kFoldGroup) {
          m_tot[r] = mg;
          l_tot[r] = lg;
        } else {
          float mt_, ta, tb;
          fold_scales(m_tot[r], mg, &mt_, &ta, &tb);
          l_tot[r] = fold_value(l_tot[r], ta, lg, tb);
          m_tot[r] = mt_;
        }
      }
    }
  }
  cp_async_wait(0);

  if (FOLD) {
    __syncthreads();
    for (int i = tid; i < R * HD; i += kThreads) {
      const int r = i / HD, d = i % HD, row = r_first + r;
      if (row >= rows) continue;
      const int t = row / c.group, h = g * c.group + row % c.group;
      c.out[(int64_t(t) * c.n_heads + h) * HD + d] = acc_tot[i] * (1.0f / l_tot[r]);
    }
  }
}

// ---- Host side ----

struct Config {
  int hd, nt;
  bool fold;
  bool operator==(const Config& o) const { return hd == o.hd && nt == o.nt && fold == o.fold; }
};

Config config_of(const AttentionCall& call) {
  const int64_t rows = call.args.T * (call.args.n_heads / call.kv.n_kv_heads);
  if (rows > kMaxRowsPartial) return {int(call.kv.head_dim), 1, true};  // prefill: fold in-block
  return {int(call.kv.head_dim), rows <= 8 ? 1 : 2, false};
}

int64_t n_splits_of(const AttentionCall& call) {
  return (call.args.pos0 + call.args.T + kAttnSplitKeys - 1) / kAttnSplitKeys;
}

size_t layout_bytes(const AttentionCall& call, const Config& cfg, int stages) {
  return make_layout(cfg.hd, cfg.nt, cfg.fold, kv_type_of(call.kv.k_type), kv_type_of(call.kv.v_type),
                     int(call.kv.k_row_bytes), int(call.kv.v_row_bytes), stages)
      .total;
}

// Ring depth: as deep as the shared-memory target allows (2..max_stages); at least 2 whatever
// the target (q8_0: 2 stages, 73 KiB; q4_0: 3, 60 KiB; f16 K and V: 2, ~145 KiB, one block per SM).
int stages_of(const AttentionCall& call, const Config& cfg) {
  const SplitTuning t = split_tuning();
  int stages = std::max(2, std::min(4, t.max_stages));
  while (stages > 2 && layout_bytes(call, cfg, stages) > t.keys_smem_target) --stages;
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

template <int HD, int NT, bool FOLD>
void launch(const KeysLaunch& l, int blocks, size_t smem, cudaStream_t stream) {
  static bool configured[64] = {};
  int dev = 0;
  check(cudaGetDevice(&dev), "attention: device");
  if (dev < 0 || dev >= 64 || !configured[dev]) {
    check(cudaFuncSetAttribute(keys_kernel<HD, NT, FOLD>, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024),
          "attention: shared memory limit");
    if (dev >= 0 && dev < 64) configured[dev] = true;
  }
  keys_kernel<HD, NT, FOLD><<<unsigned(blocks), kThreads, smem, stream>>>(l);
}

void launch_config(const Config& cfg, const KeysLaunch& l, int blocks, size_t smem, cudaStream_t stream) {
#define WEFT_KEYS_CASE(HD_, NT_, FOLD_)                               \
  if (cfg.hd == HD_ && cfg.nt == NT_ && cfg.fold == FOLD_) {         \
    launch<HD_, NT_, FOLD_>(l, blocks, smem, stream);                \
    return;                                                          \
  }
#define WEFT_KEYS_CASES(HD_) WEFT_KEYS_CASE(HD_, 1, false) WEFT_KEYS_CASE(HD_, 2, false) WEFT_KEYS_CASE(HD_, 1, true)
  WEFT_KEYS_CASES(64) WEFT_KEYS_CASES(128) WEFT_KEYS_CASES(256)
#undef WEFT_KEYS_CASES
#undef WEFT_KEYS_CASE
  throw std::logic_error("attention: no key-parallel kernel for this configuration");
}

}  // namespace

bool keys_supports(const AttentionCall& call) {
  const KvLayerView& kv = call.kv;
  const int kt = kv_type_of(kv.k_type), vt = kv_type_of(kv.v_type);
  const bool types = (kt == kKvF16 || is_quant(kt)) && (vt == kKvF16 || is_quant(vt));
  const bool hd = kv.head_dim == 64 || kv.head_dim == 128 || kv.head_dim == 256;
  return types && hd && kv.page_tokens % 32 == 0 && kv.page_tokens <= int64_t(1) << 30 &&
         call.args.pos0 + call.args.T <= int64_t(1) << 30 && call.args.T * call.args.n_heads <= int64_t(1) << 24;
}

size_t keys_workspace_bytes(const AttentionCall& call) {
  if (config_of(call).fold) return 0;
  return size_t(call.args.T * call.args.n_heads) * size_t(n_splits_of(call)) * size_t(call.kv.head_dim + 2) *
         sizeof(float);
}

void attention_keys(const AttentionCall* calls, const size_t* offsets, int64_t n, uint8_t* workspace,
                    cudaStream_t stream) {
  const SplitTuning tuning = split_tuning();
  std::vector<bool> done(size_t(n), false);
  std::vector<int64_t> merge_calls;
  for (int64_t first = 0; first < n; ++first) {
    if (done[size_t(first)]) continue;
    const Config cfg = config_of(calls[first]);
    KeysLaunch l{};
    int blocks = 0;
    size_t smem = 0;
    auto flush = [&]() {
      if (l.n_calls == 0) return;
      launch_config(cfg, l, blocks, smem, stream);
      check(cudaGetLastError(), "attention (key-parallel) launch");
      l = KeysLaunch{};
      blocks = 0;
      smem = 0;
    };
    for (int64_t i = first; i < n; ++i) {
      if (done[size_t(i)] || !(config_of(calls[i]) == cfg)) continue;
      done[size_t(i)] = true;
      const AttentionCall& call = calls[i];
      const KvLayerView& kv = call.kv;
      KeysCall& kc = l.calls[l.n_calls++];
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
      kc.k_type = kv_type_of(kv.k_type);
      kc.v_type = kv_type_of(kv.v_type);
      kc.k_row_bytes = int(kv.k_row_bytes);
      kc.v_row_bytes = int(kv.v_row_bytes);
      kc.n_rowgroups = int((int64_t(kc.T) * kc.group + 8 * cfg.nt - 1) / (8 * cfg.nt));
      kc.n_splits = int(n_splits_of(call));
      kc.stages = stages_of(call, cfg);
      const size_t bytes = layout_bytes(call, cfg, kc.stages);
      // Runs of splits sized so a long call fills the GPU once with the blocks that fit per SM
      // (the result does not depend on it).
      const int fit = int(std::max<size_t>(1, (228 * 1024) / (bytes + 1024)));
      const int64_t target = int64_t(std::max(1, std::min(tuning.keys_blocks_per_sm, fit))) * sm_count();
      const int64_t at_one = int64_t(kc.n_kv) * kc.n_rowgroups * kc.n_splits;
      kc.splits_per_block =
          cfg.fold ? kc.n_splits : int(std::max<int64_t>(1, std::min<int64_t>(kc.n_splits, (at_one + target - 1) / target)));
      kc.scale = call.args.scale;
      kc.block_begin = blocks;
      const int runs = (kc.n_splits + kc.splits_per_block - 1) / kc.splits_per_block;
      blocks += kc.n_kv * kc.n_rowgroups * (cfg.fold ? 1 : runs);
      smem = std::max(smem, bytes);
      if (!cfg.fold) merge_calls.push_back(i);
      if (l.n_calls == kMaxCalls) flush();
    }
    flush();
  }
  merge_partials(calls, offsets, merge_calls.data(), int64_t(merge_calls.size()), workspace, stream);
}

}  // namespace weft::cuda::detail
