// AVX-512 VNNI integer dot products of GGML weight blocks with 8-bit activation blocks, in the
// exact order of quant_matmul.h (the scalar twins in quant_matmul.cpp define it), so every
// output is bit-identical to the scalar and AVX2 paths.
//
// What VNNI changes against the AVX2 kernels (same structure: one weight row per pass, 8 int32 /
// float lanes, lane j = bytes 4j..4j+3 of a 32-byte group, token tiles for prefill):
//   q8_0 / q4_0: vpdpbusd multiplies |w| by sign(x, w) and adds each 4 products into an int32
//     lane in one instruction (AVX2: vpmaddubsw into int16 pairs, then vpmaddwd with ones).
//   k-quants: vpmaddubsw (unsigned code x signed activation into int16 pairs; no saturation:
//     2 * 63 * 127 < 32767) then vpdpwssd with the sub-block scales, which multiplies the pairs,
//     adds them into int32 lanes and accumulates in one instruction (AVX2: vpmaddwd + vpaddd).
//   q5_K: the fifth bit is one vptestmb + a masked vpaddb (AVX2: and, compare, and, or).
// The integer sums are exact whatever their order, so the float steps see the AVX2 path's
// integers and run in the contract's order, lane for lane.
//
// Why 256-bit registers: the first version packed two rows into each 512-bit register (row r
// low, row r+1 high, activations broadcast), which halves the per-row fma chain. On the Zen 4
// this was built on it was no faster from L2 (Zen 4 executes a 512-bit op as two 256-bit
// halves, so the work per byte is the same) and 2-3x slower from DRAM (tools/quant_bench, one
// 4096 x 4096 matrix, 1 thread: q4_K 9.6 vs 21.7 GB/s, q8_0 9.1 vs 22.0), even with software
// prefetch of both rows: reading two rows at once interleaves two address streams, the pattern
// the AVX2 path had already measured as ~2x slower for 4 rows. One row per pass keeps one
// sequential stream per thread. A one-row 512-bit form (a chunk's nibbles broadcast to both
// halves and shifted by 0 | 4, meeting 64 contiguous activation bytes: half the instructions)
// was no faster from L2 and 5-10% slower from DRAM: the kernels are bound by vector-pipe work,
// which a double-pumped 512-bit op does not reduce (docs/formats-gguf.md, "The Q4_K_M decode
// step").

#include <immintrin.h>

// GCC 12's AVX-512 headers build cast / broadcast / insert results from a deliberately
// uninitialised vector (_mm512_undefined_*), which -W(maybe-)uninitialized reports once inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/quant_simd_rows.h"

namespace weft {

namespace {

// The VNNI forms of the kernels' integer steps (quant_simd_rows.h).
struct Avx512Vnni {
  static constexpr int kAccs = 4;
  static __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
  static __m256i dot_i16(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_epi32(acc, a, b); }
  static __m256i add_fifth_bit(__m256i q, __m256i bits, __m256i sel) {
    return _mm256_mask_add_epi8(q, _mm256_test_epi8_mask(bits, sel), q, _mm256_set1_epi8(0x10));
  }
};

}  // namespace

QuantDotRowsFn quant_dot_rows_avx512(GgmlType wtype) { return dot_rows_for<Avx512Vnni>(wtype); }

}  // namespace weft
