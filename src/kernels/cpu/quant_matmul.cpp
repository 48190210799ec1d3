// Quantized-weight matrix products: the activation quantizer, the scalar dot-product twins that
// fix the order of quant_matmul.h's contract, and the threaded driver shared by both paths.
#include "kernels/cpu/quant_matmul.h"

#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_blocks.h"

namespace weft {

namespace {

// Activation q8_0, ggml's x86 quantize_row_q8_0 rule (the one llama.cpp runs on this CPU), so weft
// and llama.cpp give the same activations the same codes: d = amax / 127 stored as f16, codes
// x * (127 / amax) rounded half to even (not against 1 / d, not against the f16 scale). Codes stay
// in [-127, 127] (never -128, for the sign trick of the AVX2 kernels); NaN input gives -127.
void quantize_activations_q8_0(const float* x, int64_t K, BlockQ8_0* y) {
  for (int64_t b = 0; b < K / kQK32; ++b, x += kQK32) {
    float amax = 0;
    for (int i = 0; i < kQK32; ++i) {
      const float ax = std::fabs(x[i]);
      amax = ax > amax ? ax : amax;  // NaN never wins (as fmax; inlined, unlike a libm call)
    }
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[b].d = f32_to_f16(d);
    for (int i = 0; i < kQK32; ++i) y[b].qs[i] = int8_t(code_half_even(x[i] * id));
  }
}

// The contract's final reduction of 8 lanes (matmul.h's order).
float reduce_lanes(const float acc[8]) {
  float s4[4], s2[2];
  for (int i = 0; i < 4; ++i) s4[i] = acc[i] + acc[i + 4];
  for (int i = 0; i < 2; ++i) s2[i] = s4[i] + s4[i + 2];
  return s2[0] + s2[1];
}

// q8_0 / q4_0 weights: the 32 integer codes of block b of a row (q4_0 already minus 8).
inline void block_codes(GgmlType wtype, const uint8_t* row, int64_t b, int* q, float* dw) {
  if (wtype == GgmlType::kQ8_0) {
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    *dw = f16_to_f32(blk->d);
    for (int i = 0; i < 32; ++i) q[i] = blk->qs[i];
  } else {
    const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
    *dw = f16_to_f32(blk->d);
    for (int i = 0; i < 16; ++i) {
      q[i] = (blk->qs[i] & 0xF) - 8;
      q[i + 16] = (blk->qs[i] >> 4) - 8;
    }
  }
}

template <GgmlType W>
void dot_rows_q32_scalar(const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* xq,
                         int64_t K, float* out) {  // one token; out[r]
  const auto* xb = reinterpret_cast<const BlockQ8_0*>(xq);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = w + size_t(r) * row_bytes;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t b = 0; b < K / kQK32; ++b) {
      int q[32];
      float dw;
      block_codes(W, row, b, q, &dw);
      const float s = dw * f16_to_f32(xb[b].d);
      for (int j = 0; j < 8; ++j) {
        int isum = 0;
        for (int i = 4 * j; i < 4 * j + 4; ++i) isum += q[i] * xb[b].qs[i];
        acc[j] = std::fma(float(isum), s, acc[j]);
      }
    }
    out[r] = reduce_lanes(acc);
  }
}

// The 256 unsigned codes of a q4_K / q5_K / q6_K super-block, in element order.
template <GgmlType W, typename Block>
void superblock_codes(const Block& wb, int* L) {
  if constexpr (W == GgmlType::kQ6_K) {
    for (int h = 0; h < 2; ++h) {
      for (int i = 0; i < 4; ++i) {
        for (int l = 0; l < 32; ++l) {
          const uint8_t lowbyte = wb.ql[64 * h + l + 32 * (i & 1)];
          L[128 * h + 32 * i + l] = (i < 2 ? lowbyte & 0xF : lowbyte >> 4) | ((wb.qh[32 * h + l] >> (2 * i)) & 3) << 4;
        }
      }
    }
  } else {
    for (int s = 0; s < 8; ++s) {
      for (int l = 0; l < 32; ++l) {
        int q = (wb.qs[32 * (s / 2) + l] >> (4 * (s & 1))) & 0xF;
        if constexpr (W == GgmlType::kQ5_K) q |= ((wb.qh[l] >> s) & 1) << 4;
        L[32 * s + l] = q;
      }
    }
  }
}

// q4_K / q5_K: lane j sums, over the 8 sub-blocks s, sc[s] times the products of elements
// 4j..4j+3 of sub-block s (S_j), and carries the mins of sub-block j (M_j).
template <GgmlType W>
void dot_rows_k4_scalar(const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* xq,
                        int64_t K, float* out) {
  using Block = std::conditional_t<W == GgmlType::kQ4_K, BlockQ4_K, BlockQ5_K>;
  const auto* xb = reinterpret_cast<const BlockQ8_K*>(xq);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* wb = reinterpret_cast<const Block*>(w + size_t(r) * row_bytes);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t b = 0; b < K / kQK_K; ++b) {
      uint8_t sc[8], m[8];
      unpack_scales_k4(wb[b].scales, sc, m);
      int L[256];
      superblock_codes<W>(wb[b], L);
      const float d = f16_to_f32(wb[b].d) * xb[b].d, dmin = f16_to_f32(wb[b].dmin) * xb[b].d;
      for (int j = 0; j < 8; ++j) {
        int32_t S = 0;
        for (int s = 0; s < 8; ++s) {
          int32_t t = 0;
          for (int i = 4 * j; i < 4 * j + 4; ++i) t += L[32 * s + i] * xb[b].qs[32 * s + i];
          S += int32_t(sc[s]) * t;
        }
        const int32_t M = int32_t(m[j]) * (xb[b].bsums[2 * j] + xb[b].bsums[2 * j + 1]);
        acc[j] = std::fma(float(S), d, acc[j]);
        acc[j] = std::fma(-float(M), dmin, acc[j]);
      }
    }
    out[r] = reduce_lanes(acc);
  }
}

// q6_K: lane j sums, over the 8 groups g of 32 elements, sc[2g + j/4] times the products of
// code and x over elements 4j..4j+3 of group g; the -32 offset enters lane j as
// -32 * (sc[2j] * bsums[2j] + sc[2j+1] * bsums[2j+1]) (sub-blocks 2j and 2j+1). Only the sum over
// lanes is the mathematical dot product; the split is the contract's, shared with the AVX2 path.
void dot_rows_q6_K_scalar(const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* xq,
                          int64_t K, float* out) {
  const auto* xb = reinterpret_cast<const BlockQ8_K*>(xq);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* wb = reinterpret_cast<const BlockQ6_K*>(w + size_t(r) * row_bytes);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t b = 0; b < K / kQK_K; ++b) {
      int L[256];
      superblock_codes<GgmlType::kQ6_K>(wb[b], L);
      const float d = f16_to_f32(wb[b].d) * xb[b].d;
      for (int j = 0; j < 8; ++j) {
        int32_t S = -32 * (int32_t(wb[b].scales[2 * j]) * xb[b].bsums[2 * j] +
                           int32_t(wb[b].scales[2 * j + 1]) * xb[b].bsums[2 * j + 1]);
        for (int g = 0; g < 8; ++g) {
          int32_t t = 0;
          for (int e = 4 * j; e < 4 * j + 4; ++e) t += L[32 * g + e] * xb[b].qs[32 * g + e];
          S += int32_t(wb[b].scales[2 * g + j / 4]) * t;
        }
        acc[j] = std::fma(float(S), d, acc[j]);
      }
    }
    out[r] = reduce_lanes(acc);
  }
}

// The scalar kernels compute one token; the QuantDotRowsFn form loops over the tokens.
template <void (*One)(const uint8_t*, size_t, int64_t, const uint8_t*, int64_t, float*)>
void scalar_tokens(const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* xq, size_t xq_stride,
                   int64_t ntok, int64_t K, float* out, int64_t ldo) {
  thread_local std::vector<float> tmp;
  if (tmp.size() < size_t(rows)) tmp.resize(size_t(rows));
  for (int64_t t = 0; t < ntok; ++t) {
    One(w, row_bytes, rows, xq + size_t(t) * xq_stride, K, tmp.data());
    for (int64_t r = 0; r < rows; ++r) out[t * ldo + r] = tmp[size_t(r)];
  }
}

// The row tasks over already quantized activations (T rows, xq_bytes apart), each computing
// whole dot products with `dot` (plain rows) or `groups` (the layout's grouped rows; nullptr:
// `dot` on each group unpacked). Tasks start at multiples of 16 rows, so a task never splits a
// group of 8.
void run_quant_rows(GgmlType wtype, const void* w, int64_t N, int64_t K, const uint8_t* xq, size_t xq_bytes,
                    int64_t T, float* out, int64_t ldo, ThreadPool* pool, QuantDotRowsFn dot, QuantDotGroupsFn groups,
                    const QuantLayout& layout) {
  const auto* wbytes = static_cast<const uint8_t*>(w);
  const size_t row_bytes = ggml_row_bytes(wtype, K);
  const int64_t grouped = layout.grouped_rows < N ? layout.grouped_rows : N;
  assert(grouped % kX8GroupRows == 0 && (grouped == 0 || quant_type_has_groups(wtype)));
  int64_t rows_per_task = kQuantRowsPerTask;
  if (T == 1)
    while (size_t(rows_per_task) * row_bytes < size_t(kQuantDecodeTaskBytes)) rows_per_task *= 2;
  static_assert(kQuantRowsPerTask % kX8GroupRows == 0, "row tasks must not split a group");
  auto task = [&](int64_t i) {
    const int64_t n0 = i * rows_per_task;
    const int64_t n1 = n0 + rows_per_task < N ? n0 + rows_per_task : N;
    const int64_t g1 = n1 < grouped ? n1 : grouped;
    if (n0 < g1) {
      const uint8_t* at = wbytes + size_t(n0) * row_bytes;
      const int64_t ng = (g1 - n0) / kX8GroupRows;
      if (groups != nullptr) {
        groups(at, row_bytes, ng, xq, xq_bytes, T, K, out + n0, ldo);
      } else {
        quant_dot_groups_via_rows(wtype, dot, at, row_bytes, ng, xq, xq_bytes, T, K, out + n0, ldo);
      }
    }
    const int64_t p0 = n0 > g1 ? n0 : g1;
    if (p0 < n1) dot(wbytes + size_t(p0) * row_bytes, row_bytes, n1 - p0, xq, xq_bytes, T, K, out + p0, ldo);
  };
  const int64_t n_tasks = ceil_div(N, rows_per_task);
  // Tiny products are not worth waking the workers; values do not depend on this choice.
  if (pool != nullptr && pool->size() > 1 && n_tasks > 1 && N * K * T >= 32768) {
    // Equal tasks over consecutive rows: one contiguous run of weight rows per thread streams
    // best (Schedule::kRanges); the shared counter is kept for prefill-sized T.
    pool->parallel_for(n_tasks, task, T <= kQuantRowsPerTask ? Schedule::kRanges : Schedule::kShared);
  } else {
    for (int64_t i = 0; i < n_tasks; ++i) task(i);
  }
}

// The driver shared by every path: quantize each token's activations once, then the row tasks.
void run_quant_matmul(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x,
                      int64_t ldx, int64_t T, float* out, int64_t ldo, ThreadPool* pool,
                      QuantDotRowsFn dot, QuantDotGroupsFn groups,
                      void (*quantize)(GgmlType, const float*, int64_t, uint8_t*), const QuantLayout& layout) {
  if (N <= 0 || T <= 0 || K <= 0) return;
  assert(K % ggml_block_size(wtype) == 0);
  const size_t xq_bytes = ggml_row_bytes(activation_type(wtype), K);
  thread_local std::vector<uint8_t> xq_scratch;  // the calling thread's; reused across calls
  if (xq_scratch.size() < size_t(T) * xq_bytes) xq_scratch.resize(size_t(T) * xq_bytes);
  for (int64_t t = 0; t < T; ++t) quantize(wtype, x + t * ldx, K, xq_scratch.data() + size_t(t) * xq_bytes);
  // Workers must not name the thread_local (they would see their own): pass the pointer.
  run_quant_rows(wtype, w, N, K, xq_scratch.data(), xq_bytes, T, out, ldo, pool, dot, groups, layout);
}

bool is_plain(GgmlType t) { return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16; }

}  // namespace

size_t quant_prefetch_ahead() {
  static const size_t ahead = [] {
    // Zen 5 (AMD family 0x1A): its own prefetchers follow the stream better alone. Measured on a
    // 2-core Zen 5 VM, decode of the Q8_0 35B-A3B geometry, 8 alternated rounds each:
    // 2048 ahead 64.5 tok/s, none 69.1 (Q4_K_M file: 116.9 both); quant_bench q8_0@x8 at one
    // thread 22 -> 27 GB/s. On a Zen 3 and a Xeon the prefetch gained 15-40% (quant_simd_rows.h).
    const CpuFeatures& cpu = cpu_features();
    const size_t by_cpu = cpu.amd && cpu.family >= 0x1A ? 0 : kPrefetchAhead;
    const char* e = std::getenv("WEFT_PREFETCH_AHEAD");
    if (e == nullptr || *e == '\0') return by_cpu;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(e, &end, 10);
    if (*end != '\0' || v > (1u << 20)) {
      std::fprintf(stderr, "weft: WEFT_PREFETCH_AHEAD=%s is not a byte count up to 1048576; ignored\n", e);
      return by_cpu;
    }
    return size_t(v);
  }();
  return ahead;
}

GgmlType activation_type(GgmlType wtype) {
  switch (wtype) {
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: return GgmlType::kQ8_K;
    default: return GgmlType::kQ8_0;
  }
}

void quantize_activations(GgmlType wtype, const float* x, int64_t K, uint8_t* dst) {
  if (activation_type(wtype) == GgmlType::kQ8_K) {
    quantize_row_q8_K(x, reinterpret_cast<BlockQ8_K*>(dst), K);
  } else {
    quantize_activations_q8_0(x, K, reinterpret_cast<BlockQ8_0*>(dst));
  }
}

QuantDotRowsFn quant_dot_rows_scalar(GgmlType wtype) {
  switch (wtype) {
    case GgmlType::kQ8_0: return scalar_tokens<dot_rows_q32_scalar<GgmlType::kQ8_0>>;
    case GgmlType::kQ4_0: return scalar_tokens<dot_rows_q32_scalar<GgmlType::kQ4_0>>;
    case GgmlType::kQ4_K: return scalar_tokens<dot_rows_k4_scalar<GgmlType::kQ4_K>>;
    case GgmlType::kQ5_K: return scalar_tokens<dot_rows_k4_scalar<GgmlType::kQ5_K>>;
    case GgmlType::kQ6_K: return scalar_tokens<dot_rows_q6_K_scalar>;
    default: return nullptr;
  }
}

void quant_dot_groups_via_rows(GgmlType wtype, QuantDotRowsFn rows, const uint8_t* w, size_t row_bytes, int64_t groups,
                               const uint8_t* xq, size_t xq_stride, int64_t ntok, int64_t K, float* out, int64_t ldo) {
  thread_local std::vector<uint8_t> plain;
  if (plain.size() < kX8GroupRows * row_bytes) plain.resize(kX8GroupRows * row_bytes);
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* group = w + size_t(g) * kX8GroupRows * row_bytes;
    for (int i = 0; i < kX8GroupRows; ++i) unpack_x8_row(wtype, group, K, i, plain.data() + size_t(i) * row_bytes);
    rows(plain.data(), row_bytes, kX8GroupRows, xq, xq_stride, ntok, K, out + kX8GroupRows * g, ldo);
  }
}

namespace {

// What one code path brings to the shared driver: its plain-type matmul, row and group kernels,
// and activation quantizer (the AVX paths use the AVX2 quantizer: the scalar one's bytes).
struct QuantPath {
  void (*plain)(DType, const void*, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t, ThreadPool*);
  QuantDotRowsFn rows;
  QuantDotGroupsFn groups;  // nullptr: groups unpacked to rows
  void (*quantize)(GgmlType, const float*, int64_t, uint8_t*);
};

void run_path(const QuantPath& p, GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx,
              int64_t T, float* out, int64_t ldo, ThreadPool* pool, const QuantLayout& layout) {
  if (is_plain(wtype)) {
    p.plain(*ggml_type_to_dtype(wtype), w, N, K, x, ldx, T, out, ldo, pool);
    return;
  }
  run_quant_matmul(wtype, w, N, K, x, ldx, T, out, ldo, pool, p.rows, p.groups, p.quantize, layout);
}

}  // namespace

void quant_matmul_scalar_with_layout(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x,
                         int64_t ldx, int64_t T, float* out, int64_t ldo, ThreadPool* pool, const QuantLayout& layout) {
  run_path({matmul_scalar, quant_dot_rows_scalar(wtype), nullptr, quantize_activations}, wtype, w, N, K, x, ldx, T,
           out, ldo, pool, layout);
}

void quant_matmul_avx2_with_layout(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x,
                       int64_t ldx, int64_t T, float* out, int64_t ldo, ThreadPool* pool, const QuantLayout& layout) {
  run_path({matmul_avx2, quant_dot_rows_avx2(wtype), nullptr, quantize_activations_avx2}, wtype, w, N, K, x, ldx, T,
           out, ldo, pool, layout);
}

void quant_matmul_avx512_with_layout(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x,
                         int64_t ldx, int64_t T, float* out, int64_t ldo, ThreadPool* pool, const QuantLayout& layout) {
  // Plain types: matmul's own dispatch (its AVX-512 kernels).
  run_path({matmul, quant_dot_rows_avx512(wtype), quant_dot_groups_avx512(wtype), quantize_activations_avx2}, wtype, w,
           N, K, x, ldx, T, out, ldo, pool, layout);
}

size_t quant_activation_row_bytes(GgmlType wtype, int64_t K) {
  return ggml_row_bytes(activation_type(wtype), K);
}

void quantize_activation_rows(GgmlType wtype, const float* x, int64_t ldx, int64_t T, int64_t K, uint8_t* dst) {
  const size_t row_bytes = quant_activation_row_bytes(wtype, K);
  for (int64_t t = 0; t < T; ++t) {
    if (use_avx2()) {
      quantize_activations_avx2(wtype, x + t * ldx, K, dst + size_t(t) * row_bytes);
    } else {
      quantize_activations(wtype, x + t * ldx, K, dst + size_t(t) * row_bytes);
    }
  }
}

void quant_matmul_quantized(GgmlType wtype, const void* w, int64_t N, int64_t K, const uint8_t* xq, int64_t T,
                            float* out, int64_t ldo, ThreadPool* pool, const QuantLayout& layout) {
  if (N <= 0 || T <= 0 || K <= 0) return;
  assert(!is_plain(wtype) && K % ggml_block_size(wtype) == 0);
  const QuantDotRowsFn dot = use_avx512_vnni() ? quant_dot_rows_avx512(wtype)
                             : use_avx2()      ? quant_dot_rows_avx2(wtype)
                                               : quant_dot_rows_scalar(wtype);
  const QuantDotGroupsFn groups = use_avx512_vnni() ? quant_dot_groups_avx512(wtype) : nullptr;
  run_quant_rows(wtype, w, N, K, xq, quant_activation_row_bytes(wtype, K), T, out, ldo, pool, dot, groups, layout);
}

void quant_matmul_with_layout(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx,
                  int64_t T, float* out, int64_t ldo, ThreadPool* pool, const QuantLayout& layout) {
  if (is_plain(wtype)) {
    matmul(*ggml_type_to_dtype(wtype), w, N, K, x, ldx, T, out, ldo, pool);  // its own dispatch
  } else if (use_avx512_vnni()) {
    quant_matmul_avx512_with_layout(wtype, w, N, K, x, ldx, T, out, ldo, pool, layout);
  } else if (use_avx2()) {
    quant_matmul_avx2_with_layout(wtype, w, N, K, x, ldx, T, out, ldo, pool, layout);
  } else {
    quant_matmul_scalar_with_layout(wtype, w, N, K, x, ldx, T, out, ldo, pool, layout);
  }
}

// The plain-layout entry points.
void quant_matmul(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx, int64_t T,
                  float* out, int64_t ldo, ThreadPool* pool) {
  quant_matmul_with_layout(wtype, w, N, K, x, ldx, T, out, ldo, pool, QuantLayout{});
}
void quant_matmul_scalar(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx, int64_t T,
                         float* out, int64_t ldo, ThreadPool* pool) {
  quant_matmul_scalar_with_layout(wtype, w, N, K, x, ldx, T, out, ldo, pool, QuantLayout{});
}
void quant_matmul_avx2(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx, int64_t T,
                       float* out, int64_t ldo, ThreadPool* pool) {
  quant_matmul_avx2_with_layout(wtype, w, N, K, x, ldx, T, out, ldo, pool, QuantLayout{});
}
void quant_matmul_avx512(GgmlType wtype, const void* w, int64_t N, int64_t K, const float* x, int64_t ldx, int64_t T,
                         float* out, int64_t ldo, ThreadPool* pool) {
  quant_matmul_avx512_with_layout(wtype, w, N, K, x, ldx, T, out, ldo, pool, QuantLayout{});
}

}  // namespace weft
