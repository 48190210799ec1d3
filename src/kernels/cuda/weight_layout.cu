#include "kernels/cuda/weight_layout.cuh"

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/quant_blocks.h"  // GGUF's block structs and unpack_scales_k4

namespace weft::cuda {

namespace {

// One row of K weights, GGUF blocks -> the device layout (weight_layout.cuh). Nibbles and 2-bit
// pairs land in weight order: weight k at byte k / 2 (k / 4), bits 4 (k % 2) (2 (k % 4)).
void put_nibble(uint8_t* q, int64_t k, int v) {
  if (k % 2 == 0) q[k / 2] = uint8_t(v);
  else q[k / 2] = uint8_t(q[k / 2] | v << 4);
}

void repack_row_q8_0(const uint8_t* src, uint8_t* q, int64_t K) {
  const auto* blk = reinterpret_cast<const BlockQ8_0*>(src);
  uint8_t* d = q + K;
  for (int64_t b = 0; b < K / 32; ++b) {
    std::memcpy(d + 2 * b, &blk[b].d, 2);
    std::memcpy(q + 32 * b, blk[b].qs, 32);
  }
}

void repack_row_q4_0(const uint8_t* src, uint8_t* q, int64_t K) {
  const auto* blk = reinterpret_cast<const BlockQ4_0*>(src);
  uint8_t* d = q + K / 2;
  for (int64_t b = 0; b < K / 32; ++b) {
    std::memcpy(d + 2 * b, &blk[b].d, 2);
    // GGUF: weight e < 16 is the low nibble of qs[e], weight e >= 16 the high nibble of qs[e - 16].
    for (int e = 0; e < 32; ++e) put_nibble(q, 32 * b + e, e < 16 ? blk[b].qs[e] & 0xF : blk[b].qs[e - 16] >> 4);
  }
}

// q4_K / q5_K (GGUF: weight 64c + l of a super-block is the low nibble of qs[32c + l], weight
// 64c + 32 + l its high nibble): the super-block's 256 nibbles in weight order from k0.
void put_k4_nibbles(const uint8_t* qs, uint8_t* q, int64_t k0) {
  for (int e = 0; e < kQK_K; ++e) {
    const int c = e / 64, l = e % 64;
    put_nibble(q, k0 + e, l < 32 ? qs[32 * c + l] & 0xF : qs[32 * c + l - 32] >> 4);
  }
}

void repack_row_q4_k(const uint8_t* src, uint8_t* q, int64_t K) {
  const auto* blk = reinterpret_cast<const BlockQ4_K*>(src);
  uint8_t* h = q + K / 2;
  for (int64_t b = 0; b < K / kQK_K; ++b) {
    std::memcpy(h + 16 * b, &blk[b], 16);  // d, dmin, scales[12]: the block's first 16 bytes
    put_k4_nibbles(blk[b].qs, q, kQK_K * b);
  }
}

void repack_row_q5_k(const uint8_t* src, uint8_t* q, int64_t K) {
  const auto* blk = reinterpret_cast<const BlockQ5_K*>(src);
  uint8_t* high = q + K / 2;
  uint8_t* h = high + K / 8;
  std::memset(high, 0, size_t(K / 8));
  for (int64_t b = 0; b < K / kQK_K; ++b) {
    std::memcpy(h + 16 * b, &blk[b], 16);  // d, dmin, scales[12]: the block's first 16 bytes
    put_k4_nibbles(blk[b].qs, q, kQK_K * b);
    // GGUF (dequantize_row_q5_K): the fifth bit of weight 64c + l is bit 2c of qh[l % 32] for
    // l < 32, bit 2c + 1 for l >= 32.
    for (int e = 0; e < kQK_K; ++e) {
      const int c = e / 64, hi = (e % 64) / 32;
      const int64_t k = kQK_K * b + e;
      high[k / 8] = uint8_t(high[k / 8] | ((blk[b].qh[e % 32] >> (2 * c + hi)) & 1) << (k % 8));
    }
  }
}

void repack_row_q6_k(const uint8_t* src, uint8_t* lo, int64_t K) {
  const auto* blk = reinterpret_cast<const BlockQ6_K*>(src);
  uint8_t* hi = lo + K / 2;
  uint8_t* h = hi + K / 4;
  std::memset(hi, 0, size_t(K / 4));
  for (int64_t b = 0; b < K / kQK_K; ++b) {
    std::memcpy(h + 18 * b, blk[b].scales, 16);
    std::memcpy(h + 18 * b + 16, &blk[b].d, 2);
    for (int e = 0; e < kQK_K; ++e) {
      // GGUF (dequantize_row_q6_K): half hf = e / 128, within it i = (e % 128) / 32, l = e % 32.
      const int hf = e / 128, i = (e % 128) / 32, l = e % 32;
      const uint8_t lbyte = blk[b].ql[64 * hf + l + (i & 1) * 32];
      const int64_t k = kQK_K * b + e;
      put_nibble(lo, k, i < 2 ? lbyte & 0xF : lbyte >> 4);
      hi[k / 4] = uint8_t(hi[k / 4] | ((blk[b].qh[32 * hf + l] >> (2 * i)) & 3) << (2 * (k % 4)));
    }
  }
}

float f16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return f16_to_f32(v);
}
int nibble_at(const uint8_t* q, int64_t k) { return (q[k / 2] >> (4 * (k % 2))) & 0xF; }
// Weight k of a q4_K / q5_K super-block with header h (d, dmin, scales) and code q:
// d·sc[j] · q - dmin·m[j], as dequantize_row_q4_K / q5_K compute it.
float k4_weight(const uint8_t* h, int64_t k, int q) {
  uint8_t sc[8], m[8];
  unpack_scales_k4(h + 4, sc, m);
  const int j = int((k % kQK_K) / 32);
  return f16_at(h) * float(sc[j]) * float(q) - f16_at(h + 2) * float(m[j]);
}

}  // namespace

void repack_rows(DType t, const uint8_t* src, uint8_t* dst, int64_t rows, int64_t K) {
  void (*row_fn)(const uint8_t*, uint8_t*, int64_t) = nullptr;
  switch (t) {
    case DType::kQ8_0: row_fn = repack_row_q8_0; break;
    case DType::kQ4_0: row_fn = repack_row_q4_0; break;
    case DType::kQ4_K: row_fn = repack_row_q4_k; break;
    case DType::kQ5_K: row_fn = repack_row_q5_k; break;
    case DType::kQ6_K: row_fn = repack_row_q6_k; break;
    default: throw std::invalid_argument(std::string("repack_rows: no device layout for ") + dtype_name(t));
  }
  if (K % dtype_block(t) != 0)
    throw std::invalid_argument(std::string("repack_rows: ") + dtype_name(t) + " rows of " + std::to_string(K) +
                                " weights (not a multiple of the block)");
  const size_t row_bytes = dtype_bytes(t, size_t(K));
  for (int64_t r = 0; r < rows; ++r) row_fn(src + size_t(r) * row_bytes, dst + size_t(r) * row_bytes, K);
}

float device_weight(DType t, const uint8_t* row, int64_t K, int64_t k) {
  switch (t) {
    case DType::kQ8_0: return float(int8_t(row[k])) * f16_at(row + K + 2 * (k / 32));
    case DType::kQ4_0: return float(nibble_at(row, k) - 8) * f16_at(row + K / 2 + 2 * (k / 32));
    case DType::kQ4_K: return k4_weight(row + K / 2 + 16 * (k / kQK_K), k, nibble_at(row, k));
    case DType::kQ5_K:
      return k4_weight(row + K / 2 + K / 8 + 16 * (k / kQK_K), k,
                       nibble_at(row, k) | ((row[K / 2 + k / 8] >> (k % 8)) & 1) << 4);
    case DType::kQ6_K: {
      const int high = (row[K / 2 + k / 4] >> (2 * (k % 4))) & 3;
      const uint8_t* h = row + K / 2 + K / 4 + 18 * (k / kQK_K);
      return f16_at(h + 16) * float(int8_t(h[(k % kQK_K) / 16])) * float((nibble_at(row, k) | high << 4) - 32);
    }
    default: throw std::invalid_argument(std::string("device_weight: no device layout for ") + dtype_name(t));
  }
}

}  // namespace weft::cuda
