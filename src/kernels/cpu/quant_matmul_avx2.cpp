// AVX2 integer dot products of GGML weight blocks with 8-bit activation blocks, in the exact
// order of quant_matmul.h (the scalar twins in quant_matmul.cpp define it).
//
// Integer part: _mm256_maddubs_epi16 multiplies unsigned by signed bytes and adds pairs into
// int16. q8_0 / q4_0 codes are signed, so the sign of w moves onto x (|w| * sign(x, w)); that
// cannot saturate since |w| <= 128 and |x| <= 127 (2 * 128 * 127 < 32767). k-quant codes are
// unsigned (<= 63) and go in directly. _mm256_madd_epi16 then adds int16 pairs into int32 lanes,
// with ones (q8_0 / q4_0: lane j = elements 4j..4j+3 of the block, the contract's I[b][j]) or
// with the sub-block scales (k-quants: lane j = elements 4j..4j+3 of each 32-value group, summed
// over the super-block, the contract's S_j). Every float step is lane-wise, so no horizontal sum
// is needed until the end of the row (an hsum per super-block cost ~30% of q4_K's time).
//
// Measured (tools/quant_bench, one 4096 x 4096 matrix per type, weights cycled over 128 MiB so
// they stream from DRAM, types interleaved round by round; this 2-core Zen 4 VM under load ~14
// from other builds, so 1 thread is the trustworthy column; best of 40 calls; llama.cpp = the
// ggml_vec_dot_* kernels of node-llama-cpp 3.21.1's prebuilt ggml, AVX2 build "haswell" and the
// AVX-512 build "zen4", fed the same quantized activations and threaded by the same row tasks):
//                GB/s of weights     x bf16 speed    llama.cpp haswell / zen4 GB/s
//   bf16 matmul       20.7               1.00
//   q8_0              22.0               2.40               14.7 / 14.8
//   q6_K              21.9               3.05               21.7 / 22.2
//   q5_K              17.1               2.95               16.6 / 16.9
//   q4_K              22.5               4.50               20.2 / 21.3
//   q4_0              11.6               2.41               10.4 / 10.5
// ("x bf16 speed" = bf16's median time / the type's median time for one matrix.)
// Command (D = /tmp/nlc/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64, after
// `cd /tmp/nlc && npm i -E node-llama-cpp@3.21.1`):
//   build/quant_bench --rounds 40 --threads 1,2 --ggml-cpu $D/libggml-cpu-haswell.so
//                     --ggml-cpu $D/libggml-cpu-zen4.so
// The 2-thread column of that run was dominated by the other processes (bf16 slower on 2
// threads than on 1) and is not quoted; rerun it on a quiet machine.

#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "core/dtype.h"

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/quant_simd_rows.h"

namespace weft {

namespace {

// The AVX2 forms of the kernels' integer steps (quant_simd_rows.h).
struct Avx2 {
  static constexpr int kAccs = 1;
  static __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)); }
  static __m256i dot_i16(__m256i acc, __m256i a, __m256i b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
  static __m256i add_fifth_bit(__m256i q, __m256i bits, __m256i sel) {
    return _mm256_or_si256(q, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bits, sel), sel), _mm256_set1_epi8(0x10)));
  }
};

// Activation codes of 8 values: x * scale clamped to [-127, 127] (max/min take their second
// operand when the first is NaN: NaN -> -127, as code_half_even), rounded half to even.
inline __m256i codes8(__m256 x, __m256 scale) {
  __m256 v = _mm256_mul_ps(x, scale);
  v = _mm256_max_ps(v, _mm256_set1_ps(-127.0f));
  v = _mm256_min_ps(v, _mm256_set1_ps(127.0f));
  return _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// 32 int32 codes (4 vectors, element order) -> 32 int8 in element order.
inline void store_codes32(__m256i c0, __m256i c1, __m256i c2, __m256i c3, int8_t* dst) {
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(c0, c1), _mm256_packs_epi32(c2, c3));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// max |x| over n (multiple of 8) values; NaN never wins (the accumulator is max_ps's second operand).
inline float amax_of(const float* x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), m);
  alignas(32) float l[8];
  _mm256_store_ps(l, m);
  float a = 0;
  for (float v : l) a = v > a ? v : a;
  return a;
}

void quantize_q8_0_avx2(const float* x, int64_t K, BlockQ8_0* y) {
  for (int64_t b = 0; b < K / 32; ++b, x += 32) {
    const float amax = amax_of(x, 32);
    y[b].d = f32_to_f16(amax / 127.0f);
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    store_codes32(codes8(_mm256_loadu_ps(x), id), codes8(_mm256_loadu_ps(x + 8), id), codes8(_mm256_loadu_ps(x + 16), id),
                  codes8(_mm256_loadu_ps(x + 24), id), y[b].qs);
  }
}

void quantize_q8_K_avx2(const float* x, int64_t K, BlockQ8_K* y) {
  for (int64_t b = 0; b < K / kQK_K; ++b, x += kQK_K) {
    const float amax = amax_of(x, kQK_K);
    if (!(amax > 0) || amax > 3.4028235e38f) {  // zeros, or inf: all codes 0 (quantize_row_q8_K)
      std::memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    int first = 0;  // the first element of largest magnitude sets the sign of the scale
    while (std::fabs(x[first]) != amax) ++first;
    const float iscale = -127.0f / x[first];
    const __m256 s = _mm256_set1_ps(iscale);
    for (int g = 0; g < 8; ++g) {
      const float* xg = x + 32 * g;
      const __m256i c0 = codes8(_mm256_loadu_ps(xg), s), c1 = codes8(_mm256_loadu_ps(xg + 8), s);
      const __m256i c2 = codes8(_mm256_loadu_ps(xg + 16), s), c3 = codes8(_mm256_loadu_ps(xg + 24), s);
      store_codes32(c0, c1, c2, c3, y[b].qs + 32 * g);
      alignas(32) int32_t s01[8], s23[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(s01), _mm256_add_epi32(c0, c1));
      _mm256_store_si256(reinterpret_cast<__m256i*>(s23), _mm256_add_epi32(c2, c3));
      int a = 0, c = 0;
      for (int i = 0; i < 8; ++i) {
        a += s01[i];
        c += s23[i];
      }
      y[b].bsums[2 * g] = int16_t(a);
      y[b].bsums[2 * g + 1] = int16_t(c);
    }
    y[b].d = 1.0f / iscale;
  }
}

}  // namespace

void quantize_activations_avx2(GgmlType wtype, const float* x, int64_t K, uint8_t* dst) {
  if (activation_type(wtype) == GgmlType::kQ8_K) {
    quantize_q8_K_avx2(x, K, reinterpret_cast<BlockQ8_K*>(dst));
  } else {
    quantize_q8_0_avx2(x, K, reinterpret_cast<BlockQ8_0*>(dst));
  }
}

QuantDotRowsFn quant_dot_rows_avx2(GgmlType wtype) { return dot_rows_for<Avx2>(wtype); }

}  // namespace weft
