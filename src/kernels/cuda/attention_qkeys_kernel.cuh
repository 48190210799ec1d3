// The key-parallel split attention kernel: a quantized K or V (q8_0 / q4_0, any mix, and mixes
// with f16), compiled per K/V type pair (issue 11, round 6; f16 K or V since round 7, when it
// replaced the round-4 kernel, attention_keys.cu, which served those mixes).
//
// The work split of the round-4 key-parallel kernel: a block of 4 warps takes one kv head, up to
// 8·NT query rows of its GQA group and a run of 256-key sub-splits; warp w owns keys [16w, 16w + 16)
// of every 64-key tile with the whole head_dim, its own cp.async ring and online-softmax state;
// Sᵀ = K·Qᵀ and Oᵀ = Vᵀ·Pᵀ on mma.m16n8k16; where a row's partial ends the four warp states are
// folded in a fixed order. Since round 8 a partial covers G sub-splits (G a power of two, a
// function of the row's key count: attention_qkeys.cuh), 1 up to 32K keys (round 7's tree, the
// dim-parallel kernel's partial layout), so a row has at most 128 partials; its own merge kernel
// (attention_qkeys.cu) folds them in the two-level order of attention_split.cu's merge. A block
// folds only at sub-split ends where some row's partial ends (once per block at 128K instead of
// four times). Why a second kernel: Nsight showed the round-4
// kernel latency-bound at ~2150 instructions per warp per 16-key sub-tile. This one is compiled
// per (K type, V type), so row sizes, byte offsets and dequantization constants are immediates,
// and every step is cut to its few instructions:
//
//  * Copies: a full sub-tile is 16·row_bytes contiguous bytes of K and of V; each lane issues a
//    fixed number of 16-byte cp.async at immediate offsets (q8_0, head_dim 256: 17). Only the
//    last, partial sub-tile takes the zero-filling path. The page pointer of the next sub-tile is
//    loaded one iteration ahead, so no copy waits on it.
//  * Dequantization (each KV byte decoded once per block, in registers): a lane reads its bytes
//    as 16-bit pairs (any 2-byte-aligned offset: 34- and 18-byte blocks put half the blocks at
//    2 mod 4), puts two pairs in one word with a byte permute, and one lop3 turns two bytes of
//    that word into an f16 pair (1152 + q for q8_0: the sign flip folded into the lop3; 1024 + n
//    and 64 + n for the low and high q4_0 nibbles); one subtraction (exact) and one multiply by
//    the block scale (rounded once: q·d to f16, as before) give the MMA operand.
//      K (the MMA's A operand, a half2 = two dims of one key): lane tig of a key owns a quarter of
//      its row (head_dim 256: a pair of blocks, one byte range, its two scales); the query is
//      stored in shared memory in the dim order this produces (k_dim).
//      V (Vᵀ is the A operand, a half2 = one dim of two keys): lane gid owns an eighth of each of
//      its four keys' rows (head_dim 256: one block, one scale per key); the two keys' byte pairs
//      are interleaved by the same byte permute, so no second shuffle is needed; the output dims
//      are mapped back when written (v_dim).
//  * The per-key mask (row limits, padding rows) runs only in a sub-tile that reaches a row's
//    last key; every other sub-tile takes the unmasked scores.
//  * The score MMAs run in two independent chains (even and odd k-steps), added at the end.
//  * f16 K or V (round 7; the round-4 kernel's arithmetic): rows padded by 16 bytes in the ring,
//    fragments by ldmatrix (.trans for Vᵀ) in the plain dim order; an f16 K meets the query as
//    f16 hi + lo (four chains: near-f32 scores), an f16 V meets P as hi + lo (two MMAs per m-tile).
//
// Determinism: which warp, MMA position and fold step a key meets depends
// only on its position, every reduction has a fixed order, fully masked sub-tiles are skipped
// (exact identities), so rows are bit-identical run to run, in any batch, for any launch shape, and
// decode, verify and prefill rows agree bit for bit. Other bits than the round-4 kernel (another
// dim order inside the MMAs); accuracy vs float64 is held to the same bounds by the tests.
//
// This header holds the kernel template and what it shares with the host code (attention_qkeys.cu:
// the merge, the launch); it is instantiated per K type in attention_qkeys_k{f16,q8,q4}.cu, so the
// 9 K/V type pairs compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/attention_qkeys.cuh"

namespace weft::cuda::detail::qkeys {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kWarpKeys = 16;                  // keys of a warp per tile: one MMA m-tile
constexpr int kTileKeys = kWarps * kWarpKeys;  // 64
constexpr int kMaxCalls = 16;
constexpr int kMaxRowsPartial = 64;  // rows of one kv head a split-partial call may have
static_assert(kAttnSplitKeys % kTileKeys == 0, "splits are whole tiles");

struct QCall {
  const uint8_t* const* pages;
  const float* q;
  float* out;
  float* part;  // partials [T·n_heads][n_parts][hd + 2] (split-partial mode)
  int pos0, page_tokens;  // positions < 2^30 (qkeys_supports): 32-bit index math
  int T, n_heads, n_kv, group;
  // n_sub: 256-key sub-splits of the call's longest row; splits_per_block: sub-splits per block
  // (a multiple of the call's largest split group); n_parts: partial slots per row; part_cap: the
  // split tree (attention_qkeys.cuh: qkeys_split_group).
  int n_rowgroups, n_sub, splits_per_block, stages, n_parts, part_cap;
  float scale;
  int block_begin;
  // SplitTuning::qkeys_early_query: the query's global loads are issued before the first page
  // pointer load and copies (1), or after the first copies (0, the kernel before): the same values.
  int early_query;
};

struct QLaunch {
  QCall calls[kMaxCalls];
  int n_calls;
};

__host__ __device__ constexpr int row_bytes_of(int t, int hd) {
  return t == kKvF16 ? 2 * hd : hd / 32 * (t == kKvQ8 ? 34 : 18);
}
// Bytes between two rows of a ring slot: the row itself (quantized: read as byte pairs, see
// v_frags), or for f16 the row padded by 16 bytes, so the ldmatrix rows of a fragment fall in
// different banks.
__host__ __device__ constexpr int slot_row_bytes(int t, int hd) { return t == kKvF16 ? 2 * hd + 16 : row_bytes_of(t, hd); }
__host__ __device__ inline size_t align16(size_t n) { return (n + 15) & ~size_t(15); }

// Shared memory of one block (byte offsets): the query (f16, k_dim order), the warps' row states,
// the prefill fold's accumulators, and per warp a ring of `stages` sub-tiles (raw K rows, then raw
// V rows, 16 keys each).
struct Layout {
  size_t q_hi, q_lo, stat, rowinfo, acc_grp, acc_tot, rowst, ring;
  size_t k_sub, stage, ring_warp, total;
  int fold_rounds;  // head_dim chunks of the end-of-split fold (each fits one ring slot)
};

// The end-of-split fold's [row][dim] slot of a chunk of `ch` dims: 2 floats of padding after
// every 32 dims, rows of fold_stride floats. A lane's stores of one instruction (rows 2tig + col,
// dims 32·gid + .. for q8_0 V) then spread over the banks (at most 2-way instead of 8-way), and
// float2 reads stay 8-byte aligned.
__host__ __device__ constexpr int fold_stride(int ch) { return ch + 2 * (ch / 32) - 2; }
__host__ __device__ constexpr int fold_index(int r, int d, int stride) { return r * stride + d + 2 * (d / 32); }
// Chunks of head_dim the end-of-split fold goes through (1, 2, 4..: each fits one ring slot, or
// the slot is padded to a 32-dim chunk).
__host__ __device__ constexpr int fold_rounds_of(int hd, int nt, int kt, int vt) {
  const int stage = kWarpKeys * (slot_row_bytes(kt, hd) + slot_row_bytes(vt, hd));
  int rounds = 1;
  while (8 * nt * fold_stride(hd / rounds) * 4 > stage && hd / (2 * rounds) >= 32) rounds *= 2;
  return rounds;
}

__host__ __device__ inline Layout make_layout(int hd, int nt, bool fold, int kt, int vt, int stages) {
  const size_t rows = size_t(8 * nt), qstr = size_t(hd + 8);
  Layout L{};
  size_t o = 0;
  auto take = [&](size_t bytes) {
    const size_t at = o;
    o += align16(bytes);
    return at;
  };
  L.q_hi = take(rows * qstr * 2);
  L.q_lo = take(kt == kKvF16 ? rows * qstr * 2 : 0);  // an f16 K meets the query as f16 hi + lo
  L.stat = take(2 * kWarps * rows * 2 * 4);  // [parity][warp][row] m, l
  L.rowinfo = take(rows * 16);               // per row: int64 partial / output base, int sub-splits, int group
  L.acc_grp = take(fold ? rows * size_t(hd) * 4 : 0);
  L.acc_tot = take(fold ? rows * size_t(hd) * 4 : 0);
  L.rowst = take(fold ? 4 * rows * 4 : 0);  // m_grp, l_grp, m_tot, l_tot
  L.k_sub = size_t(kWarpKeys) * size_t(slot_row_bytes(kt, hd));  // a multiple of 16
  L.stage = L.k_sub + size_t(kWarpKeys) * size_t(slot_row_bytes(vt, hd));
  // The end-of-split fold passes each warp's scaled O ([row][chunk dim], fold_index) through the ring
  // slot the warp has just consumed: head_dim in fold_rounds chunks (fold_rounds_of), the slot
  // padded where even a 32-dim chunk does not fit.
  L.fold_rounds = fold_rounds_of(hd, nt, kt, vt);
  const size_t chunk = size_t(8 * nt) * size_t(fold_stride(hd / L.fold_rounds)) * 4;
  if (align16(chunk) > L.stage) L.stage = align16(chunk);
  L.ring_warp = size_t(stages) * L.stage;
  L.ring = take(kWarps * L.ring_warp);
  L.total = o;
  return L;
}

// ---- Dequantization (see the top comment) ----

// lop3 with an explicit truth table: f(a, b, c).
template <int LUT>
__device__ __forceinline__ uint32_t lop3(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, %4;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c), "n"(LUT));
  return r;
}
// Bytes 0 and 2 of x (int8) as the f16 pair (1152 + q0, 1152 + q2): b ? a ^ c : c with b the byte
// mask and c = 0x64806480 (0x64 high bytes; 0x80 flips the sign bit, q + 128).
__device__ __forceinline__ uint32_t q8_pair(uint32_t x) { return lop3<0x6a>(x, 0x00ff00ffu, 0x64806480u); }
// The low / high nibbles of bytes 0 and 2 as (1024 + n0, 1024 + n2) / (64 + n0, 64 + n2): a & b | c.
__device__ __forceinline__ uint32_t q4_lo_pair(uint32_t x) { return lop3<0xea>(x, 0x000f000fu, 0x64006400u); }
__device__ __forceinline__ uint32_t q4_hi_pair(uint32_t x) { return lop3<0xea>(x, 0x00f000f0u, 0x54005400u); }

__device__ __forceinline__ uint32_t hsub_hmul(uint32_t x, __half2 bias, __half2 d) {
  return half2_as_u32(__hmul2(__hsub2(u32_as_half2(x), bias), d));
}
__device__ __forceinline__ uint32_t lds16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
// A 16-bit scale as the half2 (d, d), and two keys' scales as (dA, dB).
__device__ __forceinline__ __half2 dup_scale(uint32_t d16) { return u32_as_half2(__byte_perm(d16, 0, 0x1010)); }
__device__ __forceinline__ __half2 pair_scale(uint32_t a16, uint32_t b16) {
  return u32_as_half2(__byte_perm(a16, b16, 0x5410));
}

// Where a lane's bytes of a row start: K lane tig owns values [tig·HD/4, +HD/4), V lane gid
// [gid·HD/8, +HD/8) of every row (row order: 32-value blocks). `first` = the lane's first value.
// Returns the row offset of its first qs byte; its later bytes follow at +2j inside a block and
// +block_bytes per block (lane_off).
template <int T>
__device__ __forceinline__ int lane_base(int first) {
  if (T == kKvQ8) return 34 * (first / 32) + 2 + first % 32;
  return 18 * (first / 32) + 2 + (first % 32) / 2;  // q4_0: a lane's values start on a byte
}
// Byte offset (from lane_base) of the lane's byte b (q8_0: value b; q4_0: byte b of its range).
template <int T>
__host__ __device__ constexpr int lane_off(int b) {
  return T == kKvQ8 ? 34 * (b / 32) + b % 32 : 18 * (b / 16) + b % 16;
}

// The dim a K fragment slot holds: lane tig, half2 hh (k-step hh / 2, fragment half hh % 2),
// element e. q8_0: group g = hh/2 of 4 values from two 16-bit loads; half hh%2 = bytes (0,2) or
// (1,3) of the group. q4_0: group g = hh/4 of 4 bytes; hh%4 = low (0,2), high (0,2), low (1,3),
// high (1,3).
template <int T, int HD>
__host__ __device__ constexpr int k_dim(int tig, int hh, int e) {
  constexpr int VK = HD / 4;
  if (T == kKvF16) return 16 * (hh / 2) + 8 * (hh % 2) + 2 * tig + e;  // ldmatrix: the plain order
  if (T == kKvQ8) return tig * VK + 4 * (hh / 2) + hh % 2 + 2 * e;
  const int t = hh % 4, bi = 4 * (hh / 4) + t / 2 + 2 * e, gb = tig * VK / 2 + bi;
  return 32 * (gb / 16) + gb % 16 + 16 * (t % 2);
}
// The dim of row m (0..15) of m-tile mt of the Vᵀ fragments (lane gid = m % 8 holds it).
template <int T, int HD>
__host__ __device__ constexpr int v_dim(int mt, int m) {
  constexpr int VV = HD / 8;
  if (T == kKvF16) return 16 * mt + m;  // ldmatrix.trans: the plain order
  const int gid = m % 8;
  if (T == kKvQ8) return gid * VV + 2 * mt + m / 8;
  const int gb = gid * VV / 2 + mt;
  return 32 * (gb / 16) + gb % 16 + 16 * (m / 8);
}

// K A-fragments of one key row for k-steps 2·k2 and 2·k2 + 1: out[h][half] (k-step 2·k2 + h,
// fragment half 0 / 1); the caller places them at a0/a2 (key gid) or a1/a3 (key gid + 8).
// q8_0: groups 2·k2, 2·k2 + 1 of four values; q4_0: group k2 of four bytes (eight values).
template <int T, bool HD256>
__device__ __forceinline__ void k_frags(const uint8_t* p, const uint8_t* dp, int k2, uint32_t (*out)[2]) {
  // head_dim 256: a lane's quarter is a pair of blocks starting at a 4-byte boundary of the row
  // (q8_0: 68·tig; q4_0: 36·tig): the second block's bytes are whole words, the first block's
  // are two bytes off (funnelled from two words); its scales are the halves of those words.
  if (T == kKvQ8 && HD256) {
    const __half2 bias = __float2half2_rn(1152.0f);
    const uint32_t* W = reinterpret_cast<const uint32_t*>(dp);  // the pair: 17 words
    const int b = (8 * k2) / 32;                                  // block 0 or 1 of the pair
    const __half2 d = u32_as_half2(b == 0 ? __byte_perm(W[0], 0, 0x1010) : __byte_perm(W[8], 0, 0x3232));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int g = 2 * k2 + h;  // group of values 4g..4g+3 of the pair
      const uint32_t x = g < 8 ? __byte_perm(W[g], W[g + 1], 0x5432) : W[9 + (g - 8)];
      out[h][0] = hsub_hmul(q8_pair(x), bias, d);
      out[h][1] = hsub_hmul(q8_pair(x >> 8), bias, d);
    }
    return;
  }
  if (T == kKvQ4 && HD256) {
    const __half2 blo = __float2half2_rn(1032.0f), bhi = __float2half2_rn(72.0f);
    const uint32_t* W = reinterpret_cast<const uint32_t*>(dp);  // the pair: 9 words
    const __half2 d = u32_as_half2(k2 < 4 ? __byte_perm(W[0], 0, 0x1010) : __byte_perm(W[4], 0, 0x3232));
    const uint32_t x = k2 < 4 ? __byte_perm(W[k2], W[k2 + 1], 0x5432) : W[5 + (k2 - 4)];
    out[0][0] = hsub_hmul(q4_lo_pair(x), blo, d);
    out[0][1] = hsub_hmul(q4_hi_pair(x), bhi, d);
    out[1][0] = hsub_hmul(q4_lo_pair(x >> 8), blo, d);
    out[1][1] = hsub_hmul(q4_hi_pair(x >> 8), bhi, d);
    return;
  }
  if (T == kKvQ8) {
    const __half2 bias = __float2half2_rn(1152.0f);
    const __half2 d = dup_scale(lds16(dp + 34 * ((8 * k2) / 32)));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int g = 2 * k2 + h;
      const uint32_t x = __byte_perm(lds16(p + lane_off<T>(4 * g)), lds16(p + lane_off<T>(4 * g + 2)), 0x5410);
      out[h][0] = hsub_hmul(q8_pair(x), bias, d);
      out[h][1] = hsub_hmul(q8_pair(x >> 8), bias, d);
    }
  } else {
    const __half2 blo = __float2half2_rn(1032.0f), bhi = __float2half2_rn(72.0f);
    const __half2 d = dup_scale(lds16(dp + 18 * ((4 * k2) / 16)));
    const uint32_t x = __byte_perm(lds16(p + lane_off<T>(4 * k2)), lds16(p + lane_off<T>(4 * k2 + 2)), 0x5410);
    out[0][0] = hsub_hmul(q4_lo_pair(x), blo, d);
    out[0][1] = hsub_hmul(q4_hi_pair(x), bhi, d);
    out[1][0] = hsub_hmul(q4_lo_pair(x >> 8), blo, d);
    out[1][1] = hsub_hmul(q4_hi_pair(x >> 8), bhi, d);
  }
}

// Vᵀ A-fragments of m-tiles 2·jj and 2·jj + 1 for keys (A, B) = rows pa, pb (scales d = (dA, dB)):
// a[i][0] (m-tile 2·jj + i, dim row gid) and a[i][1] (row gid + 8); the caller places them at
// a0/a1 (keys 2tig, 2tig+1) or a2/a3 (+8). q8_0: byte pairs 2·jj, 2·jj + 1; q4_0: byte pair jj.
template <int T>
__device__ __forceinline__ void v_frags(const uint8_t* pa, const uint8_t* pb, __half2 d, int jj, uint32_t (*a)[2]) {
  if (T == kKvQ8) {
    const __half2 bias = __float2half2_rn(1152.0f);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int j = 2 * jj + i;
      const uint32_t x = __byte_perm(lds16(pa + 2 * j), lds16(pb + 2 * j), 0x5410);
      a[i][0] = hsub_hmul(q8_pair(x), bias, d);
      a[i][1] = hsub_hmul(q8_pair(x >> 8), bias, d);
    }
  } else {
    const __half2 blo = __float2half2_rn(1032.0f), bhi = __float2half2_rn(72.0f);
    const uint32_t x = __byte_perm(lds16(pa + 2 * jj), lds16(pb + 2 * jj), 0x5410);
    a[0][0] = hsub_hmul(q4_lo_pair(x), blo, d);
    a[0][1] = hsub_hmul(q4_hi_pair(x), bhi, d);
    a[1][0] = hsub_hmul(q4_lo_pair(x >> 8), blo, d);
    a[1][1] = hsub_hmul(q4_hi_pair(x >> 8), bhi, d);
  }
}

// Keys that row r (of this kv head) sees: [0, pos0 + t + 1); none for padding rows.
__device__ __forceinline__ int row_keys(const QCall& c, int rows, int r) {
  return r < rows ? c.pos0 + r / c.group + 1 : 0;
}

// A warp's cp.async copies of the K or the V rows of its 16 keys (RB bytes each, contiguous in the
// page) into `dst`. A full sub-tile is a fixed number of 16-byte copies per lane at immediate
// offsets; a partial one (the last) zero-fills the bytes of rows past the keys, so they decode to
// exact zeros (no NaN can meet a zero probability).
template <int RB>
__device__ __forceinline__ void copy_rows(const uint8_t* src, uint8_t* dst, int valid, int lane) {
  constexpr int N = RB;  // 16-byte chunks of 16 rows
  if (valid >= kWarpKeys) {
#pragma unroll
    for (int i = 0; i < (N + 31) / 32; ++i) {
      const int ch = lane + 32 * i;
      if (N % 32 == 0 || ch < N) cp_async16(dst + 16 * ch, src + 16 * ch, 16);
    }
  } else {
    const int have = valid * RB;
    for (int ch = lane; ch < N; ch += 32) {
      const int bytes = max(0, min(16, have - ch * 16));
      cp_async16(dst + 16 * ch, bytes > 0 ? src + 16 * ch : src, bytes);
    }
  }
}

// The same for f16 rows (2·HD bytes in the page) into slot rows of slot_row_bytes: every lane
// copies whole 16-byte chunks of rows; rows past the keys are zero-filled.
template <int HD>
__device__ __forceinline__ void copy_rows_f16(const uint8_t* src, uint8_t* dst, int valid, int lane) {
  constexpr int CPR = HD / 8, N = kWarpKeys * CPR, SRB = slot_row_bytes(kKvF16, HD);
  static_assert(N % 32 == 0, "whole chunks per lane");
#pragma unroll
  for (int i = 0; i < N / 32; ++i) {
    const int ch = lane + 32 * i, row = ch / CPR, col = ch % CPR;
    const bool ok = valid >= kWarpKeys || row < valid;
    cp_async16(dst + row * SRB + 16 * col, ok ? src + 16 * ch : src, ok ? 16 : 0);
  }
}
template <int T, int HD>
__device__ __forceinline__ void copy_kv(const uint8_t* src, uint8_t* dst, int valid, int lane) {
  if constexpr (T == kKvF16) copy_rows_f16<HD>(src, dst, valid, lane);
  else copy_rows<row_bytes_of(T, HD)>(src, dst, valid, lane);
}

// Where the next sub-tile to copy lives: its page pointer (loaded one sub-tile ahead of its copies)
// and its first row in the page, stepped by 64 keys without a division.
struct Cursor {
  const uint8_t* page;
  int index, row;
};

__device__ __forceinline__ int find_call(const QLaunch& l, int bid) {
  int c = 0;
  while (c + 1 < l.n_calls && l.calls[c + 1].block_begin <= bid) ++c;
  return c;
}

// Blocks per SM of the plain loop: 3 (what its quantized ring allows), 2 with an f16 K or V (whose
// ring allows no more; a bound of 3 would only make it spill).
__host__ __device__ constexpr int plain_blocks(int kt, int vt) { return kt == kKvF16 || vt == kKvF16 ? 2 : 3; }

// PIPE != 0: the software-pipelined loop (see the top comment), compiled for PIPE blocks per SM;
// PIPE == 0: one sub-tile after the other through a ring of `stages` K+V slots. Both run the same
// arithmetic in the same order: same bits.
// VW (round 7; q8_0 V, head_dim 256, the pipelined loop; SplitTuning::qkeys_vwords, off: measured
// no faster): the V bytes read as words, realigned by a byte permute (half the shared loads of the
// byte-pair reads, the same values: the same bits).
template <int HD, int NT, bool FOLD, int KT, int VT, int PIPE, bool VW = false>
// Registers: plain_blocks for the plain loop; for the pipelined
// one (two sub-tiles in flight need ~170-225 registers) 2, or 3 where its code fits 168 registers
// without spills (q8_0 V: pipelined_blocks_of); 1 for two n-tiles.
__global__ void __launch_bounds__(kThreads, NT == 1 ? (PIPE ? PIPE : plain_blocks(KT, VT)) : 1) qkeys_kernel(const __grid_constant__ QLaunch launch) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int R = 8 * NT, MT = HD / 16, QSTR = HD + 8, KS = HD / 16;
  constexpr int KRB = row_bytes_of(KT, HD), VRB = row_bytes_of(VT, HD);                // in the page
  constexpr int KSB = slot_row_bytes(KT, HD), VSB = slot_row_bytes(VT, HD);            // in a ring slot
  constexpr bool KF16 = KT == kKvF16, VF16 = VT == kKvF16;
  constexpr int SCH = KF16 ? 4 : 2;   // score MMA chains: even / odd k-steps (x query hi / lo for f16 K)
  constexpr int PBW = VF16 ? 4 : 2;   // P's B fragments per n-tile: hi (+ lo for an f16 V)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The merge kernel (launched with PDL) may be scheduled from here on; it waits for this grid's
  // completion before it reads a partial. This kernel itself keeps the full stream dependency.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const int bid = int(blockIdx.x);
  const QCall& c = launch.calls[find_call(launch, bid)];
  const int local = bid - c.block_begin;
  const int rows = c.T * c.group;
  int rg, g, s_begin = 0, s_end;
  if (FOLD) {
    rg = local % c.n_rowgroups;
    g = local / c.n_rowgroups;
  } else {
    const int n_runs = (c.n_sub + c.splits_per_block - 1) / c.splits_per_block;
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

  const int stages = PIPE ? 2 : c.stages;
  const Layout L = make_layout(HD, NT, FOLD, KT, VT, stages);
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
  // Per row of the block: where its partials (split-partial mode) or its output (fold mode) start,
  // its number of 256-key sub-splits (0 for padding rows) and log2 of its split group (sub-splits
  // per partial, attention_qkeys.cuh): no divisions in the end-of-split fold.
  int64_t* row_base = reinterpret_cast<int64_t*>(smem + L.rowinfo);
  int* row_ns = reinterpret_cast<int*>(row_base + R);
  int* row_lg = row_ns + R;

  const int kb = s_begin * kAttnSplitKeys;
  const int ke = min(int(s_end * kAttnSplitKeys), key_end);
  const int n_tiles = (ke - kb + kTileKeys - 1) / kTileKeys;
  // The warp's sub-tile of tile j: keys [kb + 64j + 16·warp, +16); idle (all masked) past ke.
  auto sub_k0 = [&](int j) { return kb + j * kTileKeys + warp * kWarpKeys; };
  auto active = [&](int j) { return j >= 0 && j < n_tiles && sub_k0(j) < ke; };
  // Slots. Plain loop: stage j % stages holds the K then the V rows of sub-tile j. Pipelined
  // loop: K of sub-tile j in slot j % 2, V in slot j % 2 too, laid out [K0 V1 | K1 V0] so that the
  // K slot of j and the V slot of j - 1 (both consumed in iteration j) are one region (j % 2),
  // which the end-of-split fold then uses.
  auto k_slot = [&](int j) { return ring + size_t(j % stages) * L.stage; };
  auto v_slot = [&](int j) { return ring + size_t((PIPE ? j + 1 : j) % stages) * L.stage + L.k_sub; };
  const size_t k_page_off = 0, v_page_off = size_t(c.n_kv) * size_t(c.page_tokens) * KRB;
  auto src_of = [&](const Cursor& cu, bool v) {
    const size_t row0 = size_t(g) * size_t(c.page_tokens) + size_t(cu.row);
    return cu.page + (v ? v_page_off + row0 * VRB : k_page_off + row0 * KRB);
  };
  // The block's query values (f32), loaded into registers here, before the first page pointer and
  // copies (early_query), or after the first copies (the order before): a warp issues in order, so
  // loads placed after the copies wait for the page pointer the copies need, and the query's own
  // latency then adds to it (Nsight, q8_0 at 32K: 21% of the warps' stall samples on the query's
  // f16 conversion). Position p of a row (k-step p / 16, MMA k index p % 16) holds dim
  // k_dim(lane tig = (p % 8) / 2, half2 2·(p/16) + (p%16)/8, element p % 2).
  constexpr int PP = (HD + kThreads - 1) / kThreads;  // query positions per thread
  float qx[R][PP];
  auto load_query = [&]() {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = r_first + r;
      const float* qr = c.q + (int64_t(row / c.group) * c.n_heads + g * c.group + row % c.group) * HD;
#pragma unroll
      for (int i = 0; i < PP; ++i) {
        const int p = tid + i * kThreads, kk = p % 16;
        const int qd = k_dim<KT, HD>((kk % 8) / 2, 2 * (p / 16) + kk / 8, kk % 2);
        qx[r][i] = row < rows && (HD % kThreads == 0 || p < HD) ? qr[qd] : 0.0f;
      }
    }
  };
  if (c.early_query) load_query();
  Cursor cur;
  cur.index = sub_k0(0) / c.page_tokens;
  cur.row = sub_k0(0) % c.page_tokens;
  cur.page = active(0) ? c.pages[cur.index] : nullptr;
  auto step = [&](int j_next) {  // the cursor moves to sub-tile j_next (one tile on)
    cur.row += kTileKeys;
    while (cur.row >= c.page_tokens) {
      cur.row -= c.page_tokens;
      ++cur.index;
    }
    if (active(j_next)) cur.page = c.pages[cur.index];
  };
  Cursor pend_v = cur;  // pipelined loop: the V copies run one sub-tile behind the K copies
  if (PIPE) {
    if (active(0)) copy_kv<KT, HD>(src_of(cur, false), k_slot(0), key_end - sub_k0(0), lane);
    cp_async_commit();
    const Cursor c0 = cur;
    step(1);
    if (active(1)) copy_kv<KT, HD>(src_of(cur, false), k_slot(1), key_end - sub_k0(1), lane);
    if (active(0)) copy_kv<VT, HD>(src_of(c0, true), v_slot(0), key_end - sub_k0(0), lane);
    cp_async_commit();
    pend_v = cur;
    step(2);
  } else {
    for (int p = 0; p < stages - 1; ++p) {
      if (active(p)) {
        copy_kv<KT, HD>(src_of(cur, false), k_slot(p), key_end - sub_k0(p), lane);
        copy_kv<VT, HD>(src_of(cur, true), v_slot(p), key_end - sub_k0(p), lane);
        step(p + 1);
      }
      cp_async_commit();
    }
  }

  // Queries of the block's rows as f16 in the K fragment order (load_query).
  if (!c.early_query) load_query();
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int i = 0; i < PP; ++i) {
      const int p = tid + i * kThreads;
      if (HD % kThreads != 0 && p >= HD) continue;
      const float x = qx[r][i];
      const __half hi = __float2half_rn(x);
      q_hi[r * QSTR + p] = __half_as_ushort(hi);
      if (KF16) q_lo[r * QSTR + p] = __half_as_ushort(__float2half_rn(x - __half2float(hi)));
    }
  }
  if (FOLD) {
    for (int i = tid; i < 4 * R; i += kThreads) m_grp[i] = 0.0f;
  }
  for (int r = tid; r < R; r += kThreads) {
    const int row = r_first + r;
    const int t = row / c.group, h = g * c.group + row % c.group;
    row_base[r] = FOLD ? (int64_t(t) * c.n_heads + h) * HD : (int64_t(t) * c.n_heads + h) * c.n_parts * (HD + 2);
    const int n = row_keys(c, rows, row);
    row_ns[r] = qkeys_sub_splits(n);
    row_lg[r] = __ffs(qkeys_split_group(n, c.part_cap)) - 1;
  }
  __syncthreads();

  // This lane's softmax rows: columns 2·tig, 2·tig + 1 of every n-tile; and the fewest keys any
  // row of the block sees (a sub-tile wholly below it needs no mask).
  int re[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) re[nt][e] = row_keys(c, rows, r_first + nt * 8 + 2 * tig + e);
  const int keys_min = r_first + R - 1 < rows ? c.pos0 + r_first / c.group + 1 : 0;

  // Lane byte offsets inside a slot: K rows gid, gid + 8 (quarter tig), V rows 2tig, 2tig+1,
  // 2tig+8, 2tig+9 (eighth gid). f16: the lane's ldmatrix row address of k-step / m-tile 0 (K:
  // matrices keys 0-7 / 8-15 x dims 0-7, then dims 8-15; Vᵀ: dims 0-7 / 8-15 x keys 0-7, then 8-15).
  const int k_first = tig * (HD / 4), v_first = gid * (HD / 8);
  const int k_off = KF16 ? (lane % 8 + 8 * ((lane / 8) % 2)) * KSB + 16 * (lane / 16)
                         : gid * KSB + lane_base<KT>(k_first);
  const int k_doff = gid * KSB + (KT == kKvQ8 ? 34 : 18) * (k_first / 32);
  const int v_off = VF16 ? (lane % 8 + 8 * (lane / 16)) * VSB + 16 * ((lane / 8) % 2)
                         : 2 * tig * VSB + lane_base<VT>(v_first);
  const int v_doff = 2 * tig * VSB + (VT == kKvQ8 ? 34 : 18) * (v_first / 32);
  // VW: the word at or below the lane's block start, and the permutes that realign it (above).
  const int v_w = 2 * tig * VSB + ((34 * gid) & ~3);
  const uint32_t v_zsel = gid & 1 ? 0x7654 : 0x5432, v_dsel = gid & 1 ? 0x7632 : 0x5410;
  const int qb_row = lane % 8, qb_col = (lane / 8) * 8;

  float o[MT][NT][4];
  float m_run[NT][2], l_run[NT][2];
  // A split starts with a fresh state (set here and after each split end: not a select per tile).
  auto reset_state = [&]() {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      m_run[nt][0] = m_run[nt][1] = -INFINITY;
      l_run[nt][0] = l_run[nt][1] = 0.0f;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mt][nt][e] = 0.0f;
    }
  };
  reset_state();

  // ---- Sᵀ = K·Qᵀ: 16 keys x 8·NT rows, two MMA chains (even and odd k-steps; f16 K: four, the
  // query's hi and lo parts, near-f32 scores); k-steps 2·k2, 2·k2 + 1 per step ----
  auto scores_zero = [&](float (*sacc)[SCH][4]) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int ch = 0; ch < SCH; ++ch)
#pragma unroll
        for (int e = 0; e < 4; ++e) sacc[nt][ch][e] = 0.0f;
  };
  auto scores_step = [&](const uint8_t* ks, int k2, float (*sacc)[SCH][4]) {
    uint32_t ka[2][4];  // A fragments of k-steps 2·k2, 2·k2 + 1
    if constexpr (KF16) {
      ldsm_x4(ka[0], ks + k_off + 64 * k2);
      ldsm_x4(ka[1], ks + k_off + 64 * k2 + 32);
    } else {
      uint32_t klo[2][2], khi[2][2];  // keys gid, gid + 8
      k_frags<KT, HD == 256>(ks + k_off, ks + k_doff, k2, klo);
      k_frags<KT, HD == 256>(ks + k_off + 8 * KSB, ks + k_doff + 8 * KSB, k2, khi);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        ka[h][0] = klo[h][0];
        ka[h][1] = khi[h][0];
        ka[h][2] = klo[h][1];
        ka[h][3] = khi[h][1];
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      uint32_t bq[4];
      ldsm_x4(bq, q_hi + (nt * 8 + qb_row) * QSTR + 32 * k2 + qb_col);
#pragma unroll
      for (int h = 0; h < 2; ++h) mma16816(sacc[nt][h], ka[h], bq[2 * h], bq[2 * h + 1]);
      if constexpr (KF16) {
        ldsm_x4(bq, q_lo + (nt * 8 + qb_row) * QSTR + 32 * k2 + qb_col);
#pragma unroll
        for (int h = 0; h < 2; ++h) mma16816(sacc[nt][2 + h], ka[h], bq[2 * h], bq[2 * h + 1]);
      }
    }
  };
  // ---- Oᵀ += Vᵀ·Pᵀ: m-tiles 2·jj, 2·jj + 1 per step (v_scales: the (A, B) and (C, D) scales;
  // f16 V: ldmatrix.trans, P as hi + lo) ----
  auto v_scales = [&](const uint8_t* vs, __half2* d) {
    if constexpr (!VF16) {
      d[0] = pair_scale(lds16(vs + v_doff), lds16(vs + v_doff + VSB));
      d[1] = pair_scale(lds16(vs + v_doff + 8 * VSB), lds16(vs + v_doff + 9 * VSB));
    }
  };
  auto pv_step = [&](const uint8_t* vs, const __half2* d, int jj, uint32_t (*pb)[PBW]) {
    uint32_t va[2][4];  // A fragments of m-tiles 2·jj, 2·jj + 1
    if constexpr (VF16) {
      ldsm_x4_trans(va[0], vs + v_off + 64 * jj);
      ldsm_x4_trans(va[1], vs + v_off + 64 * jj + 32);
    } else {
      uint32_t vab[2][2], vcd[2][2];
      v_frags<VT>(vs + v_off, vs + v_off + VSB, d[0], jj, vab);
      v_frags<VT>(vs + v_off + 8 * VSB, vs + v_off + 9 * VSB, d[1], jj, vcd);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        va[i][0] = vab[i][0];
        va[i][1] = vab[i][1];
        va[i][2] = vcd[i][0];
        va[i][3] = vcd[i][1];
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        mma16816(o[2 * jj + i][nt], va[i], pb[nt][0], pb[nt][1]);
        if constexpr (VF16) mma16816(o[2 * jj + i][nt], va[i], pb[nt][2], pb[nt][3]);
      }
  };
  static_assert(KS == MT, "as many score k-steps as Oᵀ m-tiles: the pipelined loop pairs them");
  auto scores = [&](const uint8_t* ks, float (*sacc)[SCH][4]) {
    scores_zero(sacc);
#pragma unroll
    for (int k2 = 0; k2 < KS / 2; ++k2) scores_step(ks, k2, sacc);
  };
  auto pv = [&](const uint8_t* vs, uint32_t (*pb)[PBW]) {
    __half2 d[2];
    v_scales(vs, d);
#pragma unroll
    for (int jj = 0; jj < MT / 2; ++jj) pv_step(vs, d, jj, pb);
  };
  // Both, step by step: two independent chains in one instruction stream (the same operations in
  // the same order per accumulator as scores() then pv()).
  auto scores_and_pv = [&](const uint8_t* ks, float (*sacc)[SCH][4], const uint8_t* vs, uint32_t (*pb)[PBW]) {
    scores_zero(sacc);
    if constexpr (VW) {
      static_assert(VT == kKvQ8 && HD == 256, "word reads of V: one q8_0 block per lane");
      // Lane gid's block of keys A, B, C, D (rows 2tig, +1, +8, +9) from the word at or below its
      // start: words w0..w8 cover it (scale, 32 bytes); even gid: the scale is the low half of w0,
      // the bytes start 2 in; odd gid: the scale is w0's high half, the bytes are w1..w8. Step jj
      // needs bytes 4jj..4jj+3 of each row: z = permute(w_jj, w_jj+1) (the same bytes the
      // byte-pair reads give, so the same fragments).
      const uint8_t* wr[4] = {vs + v_w, vs + v_w + VSB, vs + v_w + 8 * VSB, vs + v_w + 9 * VSB};
      uint32_t wp[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) wp[r] = *reinterpret_cast<const uint32_t*>(wr[r]);
      __half2 d[2];
      d[0] = u32_as_half2(__byte_perm(wp[0], wp[1], v_dsel));
      d[1] = u32_as_half2(__byte_perm(wp[2], wp[3], v_dsel));
      const __half2 bias = __float2half2_rn(1152.0f);
#pragma unroll
      for (int k2 = 0; k2 < KS / 2; ++k2) {
        scores_step(ks, k2, sacc);
        uint32_t z[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const uint32_t wn = *reinterpret_cast<const uint32_t*>(wr[r] + 4 * (k2 + 1));
          z[r] = __byte_perm(wp[r], wn, v_zsel);
          wp[r] = wn;
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const uint32_t sel = i ? 0x7632 : 0x5410;
          const uint32_t xab = __byte_perm(z[0], z[1], sel), xcd = __byte_perm(z[2], z[3], sel);
          const uint32_t a[4] = {hsub_hmul(q8_pair(xab), bias, d[0]), hsub_hmul(q8_pair(xab >> 8), bias, d[0]),
                                 hsub_hmul(q8_pair(xcd), bias, d[1]), hsub_hmul(q8_pair(xcd >> 8), bias, d[1])};
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mma16816(o[2 * k2 + i][nt], a, pb[nt][0], pb[nt][1]);
        }
      }
      return;
    }
    __half2 d[2];
    v_scales(vs, d);
#pragma unroll
    for (int k2 = 0; k2 < KS / 2; ++k2) {
      scores_step(ks, k2, sacc);
      pv_step(vs, d, k2, pb);
    }
  };
  // ---- online softmax on the accumulators: element e is key gid (+8 for e >= 2), row 2tig + e%2;
  // P as f16, transposed into the B operand of Oᵀ (pb); O rescaled where a row's max moved ----
  auto softmax = [&](int kw, float (*sacc)[SCH][4], uint32_t (*pb)[PBW]) {
    const bool masked = kw + kWarpKeys > keys_min;  // warp-uniform
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
          const float dot = KF16 ? (sacc[nt][0][e] + sacc[nt][1][e]) + (sacc[nt][SCH - 2][e] + sacc[nt][SCH - 1][e])
                                 : sacc[nt][0][e] + sacc[nt][1][e];
          v[kh] = __fmul_rn(dot, c.scale);
          if (masked && kw + gid + 8 * kh >= re[nt][col]) v[kh] = -INFINITY;
        }
        float mx = fmaxf(v[0], v[1]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        const float m_old = m_run[nt][col], m_new = fmaxf(m_old, mx);
        // ex2.approx (__expf): ~2 ulp, far below the f16 rounding of P.
        const float a = m_old == -INFINITY ? 0.0f : __expf(m_old - m_new);
#pragma unroll
        for (int kh = 0; kh < 2; ++kh) p[col][kh] = v[kh] == -INFINITY ? 0.0f : __expf(v[kh] - m_new);
        l_run[nt][col] = __fadd_rn(__fmul_rn(l_run[nt][col], a), __fadd_rn(p[col][0], p[col][1]));
        m_run[nt][col] = m_new;
        alpha[nt][col] = a;
        rescale |= a != 1.0f;
      }
#pragma unroll
      for (int kh = 0; kh < 2; ++kh) {
        const __half2 h2 = __floats2half2_rn(p[0][kh], p[1][kh]);
        pb[nt][kh] = movmatrix_trans(half2_as_u32(h2));
        if constexpr (VF16) {  // the rest of P, for an f16 V (near-f32 weights)
          const float2 back = __half22float2(h2);
          pb[nt][2 + kh] = movmatrix_trans(half2_as_u32(__floats2half2_rn(p[0][kh] - back.x, p[1][kh] - back.y)));
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
  };
  // ---- Where partials end (block-uniform: every thread reads the same row info) ----
  // Row r's partial ends with sub-split sb: the row has keys there, and sb closes a group of
  // 2^row_lg sub-splits or is the row's last.
  auto row_ends = [&](int r, int sb) {
    const int ns = row_ns[r];
    return sb < ns && (((sb + 1) & ((1 << row_lg[r]) - 1)) == 0 || sb == ns - 1);
  };
  // Row r's partial runs on past sub-split sb (its warp states must be kept).
  auto row_continues = [&](int r, int sb) { return sb < row_ns[r] - 1 && ((sb + 1) & ((1 << row_lg[r]) - 1)) != 0; };
  auto fold_due = [&](int sb) {
    bool due = false;
    for (int r = 0; r < R; ++r) due |= row_ends(r, sb);
    return due;
  };
  // After a fold: a fresh state for the rows whose partial ended (all of them in a decode call;
  // rows of one block differ only where their positions straddle a change of split group). One
  // branch-free path (a select per row, an AND per accumulator: +0 exactly, as reset_state), which
  // costs the pipelined loop no registers where a second path did.
  auto reset_ended = [&](int sb) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int col = 0; col < 2; ++col) {
        const bool keep = row_continues(nt * 8 + 2 * tig + col, sb);
        const uint32_t km = keep ? 0xffffffffu : 0u;
        m_run[nt][col] = keep ? m_run[nt][col] : -INFINITY;
        l_run[nt][col] = keep ? l_run[nt][col] : 0.0f;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          o[mt][nt][col] = __uint_as_float(__float_as_uint(o[mt][nt][col]) & km);
          o[mt][nt][2 + col] = __uint_as_float(__float_as_uint(o[mt][nt][2 + col]) & km);
        }
      }
  };
  int n_folds = 0;  // folds so far (uniform): the parity of the row-state buffer
  // ---- end of sub-split sb where some row's partial ends: combine the four warps' states in a
  // fixed order, through the region `slot_at` of every warp's ring (free: consumed, no copy in
  // flight into it), for the rows whose partial ends there ----
  auto fold_split = [&](int sb, size_t slot_at) {
    float* st = stat + (n_folds++ & 1) * kWarps * R * 2;  // parity: a fast warp may reach the next fold
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
    // The scaled O of the warps meet in the region, [row][chunk dim] (fold_index), head_dim in
    // ROUNDS chunks that fit it.
    constexpr int ROUNDS = fold_rounds_of(HD, NT, KT, VT), CH = HD / ROUNDS, CSTR = fold_stride(CH);
    auto slot_of = [&](int w) { return reinterpret_cast<float*>(smem + slot_at + size_t(w) * L.ring_warp); };
#pragma unroll 1
    for (int round = 0; round < ROUNDS; ++round) {
      const int c0 = round * CH;
      float* slot = slot_of(warp);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int col = 0; col < 2; ++col) {
            const int r = nt * 8 + 2 * tig + col;
            const int d0 = v_dim<VT, HD>(mt, gid) - c0, d1 = v_dim<VT, HD>(mt, gid + 8) - c0;
            const float x0 = __fmul_rn(o[mt][nt][col], sc[nt][col]), x1 = __fmul_rn(o[mt][nt][2 + col], sc[nt][col]);
            if (VT == kKvQ8 && ROUNDS == 1) {  // dims d0, d0 + 1 (v_dim): one 8-byte store
              *reinterpret_cast<float2*>(slot + fold_index(r, d0, CSTR)) = make_float2(x0, x1);
            } else {
              if (ROUNDS == 1 || (d0 >= 0 && d0 < CH)) slot[fold_index(r, d0, CSTR)] = x0;
              if (ROUNDS == 1 || (d1 >= 0 && d1 < CH)) slot[fold_index(r, d1, CSTR)] = x1;
            }
          }
      }
      __syncthreads();
      // The split's O of every row in this chunk: warps added 0, 1, 2, 3 left to right.
      if (!FOLD) {
        constexpr int C2 = CH / 2;
#pragma unroll 2
        for (int i = tid; i < R * C2; i += kThreads) {
          const int r = i / C2, dc = (i % C2) * 2;
          if (!row_ends(r, sb)) continue;
          const int at = fold_index(r, dc, CSTR);
          float2 x = *reinterpret_cast<const float2*>(slot_of(0) + at);
#pragma unroll
          for (int w = 1; w < kWarps; ++w) {
            const float2 y = *reinterpret_cast<const float2*>(slot_of(w) + at);
            x.x = __fadd_rn(x.x, y.x);
            x.y = __fadd_rn(x.y, y.y);
          }
          float* dst = c.part + row_base[r] + int64_t(sb >> row_lg[r]) * (HD + 2) + c0 + dc;
          *reinterpret_cast<float2*>(dst) = x;  // rows of hd + 2 floats: 8-byte aligned
        }
      } else {
        // The merge kernel's tree: split -> group (kFoldGroup splits, left to right) -> total.
        for (int i = tid; i < R * CH; i += kThreads) {
          const int r = i / CH, d = c0 + i % CH;
          if (!row_ends(r, sb)) continue;
          const int gl = row_lg[r], s = sb >> gl, ns = (row_ns[r] + (1 << gl) - 1) >> gl;  // partial, partials
          const int at = fold_index(r, d - c0, CSTR);
          float x = slot_of(0)[at];
#pragma unroll
          for (int w = 1; w < kWarps; ++w) x = __fadd_rn(x, slot_of(w)[at]);
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
      if (!row_ends(r, sb)) continue;
      const int gl = row_lg[r], s = sb >> gl, ns = (row_ns[r] + (1 << gl) - 1) >> gl;  // partial, partials
      float m = st[r * 2];
      for (int w = 1; w < kWarps; ++w) m = fmaxf(m, st[(w * R + r) * 2]);
      float l = 0.0f;
      for (int w = 0; w < kWarps; ++w) {
        const float mw = st[(w * R + r) * 2];
        const float lw = __fmul_rn(st[(w * R + r) * 2 + 1], mw == -INFINITY ? 0.0f : expf(mw - m));
        l = w == 0 ? lw : __fadd_rn(l, lw);
      }
      if (!FOLD) {
        float* dst = c.part + row_base[r] + int64_t(s) * (HD + 2);
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
    reset_ended(sb);
  };
  // Tile j ends a sub-split (or the block's keys) where some row's partial ends.
  auto ends_split = [&](int j) {
    return ((kb + (j + 1) * kTileKeys) % kAttnSplitKeys == 0 || j == n_tiles - 1) &&
           fold_due((kb + j * kTileKeys) / kAttnSplitKeys);
  };

  if (PIPE) {
    // Iteration j: the scores of sub-tile j and Oᵀ += Vᵀ·Pᵀ of sub-tile j - 1 (independent: one
    // basic block the compiler interleaves), the fold if tile j - 1 ended a split, the copies of
    // K(j + 2) and V(j + 1) into the region just consumed, then the softmax of sub-tile j. Each
    // copy is issued one full iteration before it is waited for.
    uint32_t pb[NT][PBW] = {};
    for (int j = 0; j <= n_tiles; ++j) {
      cp_async_wait(1);
      __syncwarp();
      const bool act_s = active(j), act_v = active(j - 1);
      float sacc[NT][SCH][4];
      if (act_s && act_v) {
        scores_and_pv(k_slot(j), sacc, v_slot(j - 1), pb);
      } else if (act_s) {
        scores(k_slot(j), sacc);
      } else if (act_v) {
        pv(v_slot(j - 1), pb);
      }
      __syncwarp();  // every lane is done with the region before it is reused
      if (j >= 1 && ends_split(j - 1)) fold_split((kb + (j - 1) * kTileKeys) / kAttnSplitKeys, L.ring + size_t(j % 2) * L.stage);
      if (active(j + 2)) copy_kv<KT, HD>(src_of(cur, false), k_slot(j + 2), key_end - sub_k0(j + 2), lane);
      if (active(j + 1)) copy_kv<VT, HD>(src_of(pend_v, true), v_slot(j + 1), key_end - sub_k0(j + 1), lane);
      cp_async_commit();
      if (active(j + 2)) {
        pend_v = cur;
        step(j + 3);
      }
      if (act_s) softmax(sub_k0(j), sacc, pb);
    }
  } else {
    for (int j = 0; j < n_tiles; ++j) {
      const int jn = j + stages - 1;
      if (active(jn)) {
        copy_kv<KT, HD>(src_of(cur, false), k_slot(jn), key_end - sub_k0(jn), lane);
        copy_kv<VT, HD>(src_of(cur, true), v_slot(jn), key_end - sub_k0(jn), lane);
        step(jn + 1);
      }
      cp_async_commit();
      cp_async_wait(stages - 1);
      __syncwarp();
      if (active(j)) {  // warp-uniform; an idle sub-tile would leave the state exactly as it is
        float sacc[NT][SCH][4];
        uint32_t pb[NT][PBW];
        scores(k_slot(j), sacc);
        softmax(sub_k0(j), sacc, pb);
        pv(v_slot(j), pb);
      }
      __syncwarp();  // every lane is done with the slot before it is refilled
      if (ends_split(j)) fold_split((kb + j * kTileKeys) / kAttnSplitKeys, L.ring + size_t(j % stages) * L.stage);
    }
  }
  cp_async_wait(0);

  if (FOLD) {
    __syncthreads();
    for (int i = tid; i < R * HD; i += kThreads) {
      const int r = i / HD, d = i % HD;
      if (r_first + r >= rows) continue;
      c.out[row_base[r] + d] = acc_tot[i] * (1.0f / l_tot[r]);
    }
  }
}

// ---- What the host side picks a kernel by ----

struct Config {
  int hd, nt, kt, vt;
  bool fold;
  int pipe;  // 0: the plain loop; 2 or 3: the pipelined loop compiled for that many blocks per SM
  bool vw;   // the pipelined loop reads q8_0 V as words (head_dim 256)
  bool operator==(const Config& o) const {
    return hd == o.hd && nt == o.nt && fold == o.fold && kt == o.kt && vt == o.vt && pipe == o.pipe && vw == o.vw;
  }
};

using KernelFn = void (*)(QLaunch);

template <int KT, int VT>
KernelFn kernel_types(const Config& cfg) {
#define WEFT_QKEYS_CASE(HD_, NT_, FOLD_, PIPE_)                                                  \
  if (cfg.hd == HD_ && cfg.nt == NT_ && cfg.fold == FOLD_ && cfg.pipe == PIPE_ && !cfg.vw) {   \
    return qkeys_kernel<HD_, NT_, FOLD_, KT, VT, PIPE_>;                                        \
  }
  if constexpr (KT != kKvF16 && VT == kKvQ8) {
    if (cfg.hd == 256 && cfg.nt == 1 && !cfg.fold && cfg.pipe == 2 && cfg.vw)
      return qkeys_kernel<256, 1, false, KT, VT, 2, true>;
  }
#define WEFT_QKEYS_CASES(HD_)                                                          \
  WEFT_QKEYS_CASE(HD_, 1, false, 0) WEFT_QKEYS_CASE(HD_, 2, false, 0)                  \
  WEFT_QKEYS_CASE(HD_, 1, false, 2) WEFT_QKEYS_CASE(HD_, 1, true, 0)                   \
  if constexpr (KT != kKvF16 && VT == kKvQ8) WEFT_QKEYS_CASE(HD_, 1, false, 3)
  WEFT_QKEYS_CASES(64) WEFT_QKEYS_CASES(128) WEFT_QKEYS_CASES(256)
#undef WEFT_QKEYS_CASES
#undef WEFT_QKEYS_CASE
  return nullptr;
}

// The kernel of cfg for one K type and every V type (defined in attention_qkeys_k<type>.cu; nullptr
// for a configuration that is not compiled).
template <int KT>
KernelFn kernel_for_k(const Config& cfg);
template <> KernelFn kernel_for_k<kKvF16>(const Config& cfg);
template <> KernelFn kernel_for_k<kKvQ8>(const Config& cfg);
template <> KernelFn kernel_for_k<kKvQ4>(const Config& cfg);

}  // namespace weft::cuda::detail::qkeys
