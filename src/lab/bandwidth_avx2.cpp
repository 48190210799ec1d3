// The bandwidth probe's read pass with 256-bit loads: four independent XOR chains, eight loads
// (256 bytes, four cache lines) per iteration, so loads in flight — not the issue rate of one
// dependent chain — bound it, as they bound a decode's weight and KV streaming.
#include <immintrin.h>

#include "lab/bandwidth.h"

namespace weft::lab {

uint64_t read_xor_avx2(const uint64_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    auto at = [&](size_t k) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + k)); };
    a0 = _mm256_xor_si256(a0, at(0));
    a1 = _mm256_xor_si256(a1, at(4));
    a2 = _mm256_xor_si256(a2, at(8));
    a3 = _mm256_xor_si256(a3, at(12));
    a0 = _mm256_xor_si256(a0, at(16));
    a1 = _mm256_xor_si256(a1, at(20));
    a2 = _mm256_xor_si256(a2, at(24));
    a3 = _mm256_xor_si256(a3, at(28));
  }
  const __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a);
  // XOR is associative and commutative, so the tail and the lanes fold in any order.
  return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3] ^ read_xor_scalar(p + i, n - i);
}

}  // namespace weft::lab
