// Strict-tier prefill attention over an f16 KV cache, tiled by query blocks. Same contract and
// same bits as attention_f16 (attention.h) for T > 1: every output row is bit-identical to the
// one the frozen kernel computes, so the strict tier's golden outputs do not move.
//
// Why a second kernel: attention_f16's prefill runs one task per (query token, kv head), so each
// query token re-widens every K and V row of its causal context from f16 and dots it alone. Here
// a task is (block of consecutive query tokens, kv head): each K/V row of a chunk is widened once
// per task and used by every query token of the block and every query head of the GQA group,
// with several query rows sharing each K load (QK) and each V load (PV) in registers.
//
// Bit-identity with attention_f16, operation by operation, for each (query token, head) row:
//  * the same absolute chunks of kAttnChunk keys from position 0; the row's last chunk holds
//    only its causal keys [k0, pos0 + t];
//  * score = (8-lane FMA dot over head_dim, lanes reduced (0+4)+(2+6) + (1+5)+(3+7), scalar FMA
//    tail) · scale;
//  * per chunk: max over the chunk's keys in key order, then p = std::exp(s − m) and l += p in
//    key order; the accumulator starts at 0 and takes fma(p_j, v_j, acc) for j ascending;
//  * the first chunk is the running state, later chunks merge in chunk order with
//    attention_f16's merge_into formulas (separate multiplies and add: no FMA contraction, so
//    softmax and merge live in the generic translation unit, which is built without -mfma);
//  * the output is acc · (1 / l).
// Keys a row does not see (beyond its causal end, inside its block's diagonal chunk) may get a
// score computed but are never used. So the output depends on neither the block size, the
// thread count nor the grouping of rows into blocks (split- and batch-invariant).
//
// Cost on models/weft-tiny-hybrid (head_dim 256, 4 query heads, 2 kv heads, 2 full-attention
// layers) at a 4096-token prefill from position 0: Σ_t (t + 1) = 8,390,656 (query, key) pairs
// per head.
//  * FLOPs per layer: QK = PV = 8.39e6 pairs · 4 heads · 256 · 2 = 17.2 GFLOP, so 34.4 GFLOP
//    per layer, 68.7 GFLOP for the 2 layers; plus 33.6 M expf per layer (one per pair and
//    head: libm's bits, computed 8 or 16 at a time by expf_twin.h's vector twin of libm).
//  * Bytes per layer that must move: the f16 cache K + V = 4096 · 2 kv heads · 256 · 2 B · 2 =
//    8 MiB, q and out in f32 = 16 MiB each. attention_f16's prefill re-reads and re-widens K
//    and V once per query token: 8.39e6 · 2 kv heads · 1 KiB = 17.2 GB of K/V reads per layer
//    (from L2/L3) and as many f16→f32 conversions. With 32-token blocks (64 rows at GQA 2) that
//    is 32x fewer, ~0.55 GB per layer; the register tiles then share each widened K slice among
//    4 query rows and each V slice among 5-6.
// Measured (one thread, same machine, interleaved): ~57 GFLOP/s vs ~19 for attention_f16's
// prefill, i.e. ~3x; the scalar std::exp calls of the softmax are then ~20-25% of the kernel.
#pragma once

#include <cstdint>

#include "kernels/attention_args.h"
#include "kernels/kv_view.h"

namespace weft {

class ThreadPool;

// Which primitives run: kBest = the AVX-512 set where weft::use_avx512(), else AVX2 where
// weft::use_avx2(), else the scalar twins; kAvx2 caps that at AVX2; kScalar = the twins. Every
// path computes the same bits (tests hold them to the frozen kernel's).
enum class AttnTiledPath { kBest, kAvx2, kScalar };

// f16 K and V, T > 1 (T == 1 works too; decode has its own task split below).
void attention_f16_prefill(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool);
// The scalar twin (always compiled; for tests).
void attention_f16_prefill_scalar(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool);
// For tests: an explicit query block size (tokens per task, >= 1; 0 = automatic) and path.
void attention_f16_prefill_blocked(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool,
                                   int64_t block_tokens, AttnTiledPath path);

// f16 K and V, T == 1: the frozen kernel's decode with these primitives. Same tasks (kv head x
// chunk of kAttnChunk keys, the GQA group's rows together), same partial states, merged in chunk
// order with the frozen formulas, so the output equals attention_f16's bit for bit; the rows'
// merges run in parallel (each row alone, so the split changes nothing).
//
// Why it exists: the frozen kernel's primitive set cannot share a K load across two query heads
// in one 512-bit register (its scores op sees one key and the heads as separate rows), so on
// AVX-512 it runs at AVX2 width; here the GQA group's rows are interleaved once per chunk.
void attention_f16_decode(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool,
                          AttnTiledPath path = AttnTiledPath::kBest);
// The strict tier's f16 attention as the CPU backend runs it: prefill (T > 1) through
// attention_f16_prefill; decode through attention_f16_decode where the AVX-512 primitives run
// (measured faster there: docs/results.md 8.6), else through the frozen attention_f16.
// WEFT_ATTN_F16_DECODE=frozen|tiled forces one decode kernel for a process (A/B runs; the bits
// are the same either way); any other value is named on stderr and ignored.
void attention_f16_strict(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool);

// ---- Internals shared by attention_f16_prefill.cpp and attention_f16_prefill_avx2.cpp ----

struct AttnF16PrefillOps {
  // s[r * s_stride + j] = dot(q + r * hd, f32(k_rows[j]), hd) · scale for r < rows, j < n, the
  // dot being attention_f16's (8 lanes, pairwise lane reduction, FMA tail). k_rows[j] points at
  // an f16 K row; kbuf is scratch of kAttnPrefillKeyBlock · hd floats.
  void (*scores)(const float* q, int64_t rows, const uint16_t* const* k_rows, int64_t n, int64_t hd, float scale,
                 float* kbuf, float* s, int64_t s_stride);
  // acc[r * hd + d] = Σ_{j < n_row[r]} p[r * p_stride + j] · f32(v_rows[j])[d] for r < rows,
  // d < hd, accumulated from 0 as acc = fma(p_j, v_j, acc) for j ascending (attention_f16's
  // order). n_row[r] <= the number of v_rows; vbuf is scratch of max(kAttnChunk · 16, hd)
  // floats.
  void (*accumulate_v)(const uint16_t* const* v_rows, const int64_t* n_row, int64_t rows, const float* p,
                       int64_t p_stride, int64_t hd, float* vbuf, float* acc);
  // s[j] = std::exp(s[j] - m) for j < n, libm's bits (expf_twin.h: the vector twin where it has
  // been checked against this process's libm, std::exp otherwise).
  void (*exp_sub)(float* s, int64_t n, float m);
};

// K rows widened per pass of the scores kernel (each then serves every query row of the task);
// a multiple of the AVX2 tile's 3 keys, and 12 KiB of f32 at head_dim 256 (stays in L1).
constexpr int64_t kAttnPrefillKeyBlock = 12;

const AttnF16PrefillOps& attn_f16_prefill_ops_avx2();
// attention_f16_tiled_avx512.cpp; head sizes not a multiple of 16 fall back to the AVX2 set.
const AttnF16PrefillOps& attn_f16_prefill_ops_avx512();

}  // namespace weft
