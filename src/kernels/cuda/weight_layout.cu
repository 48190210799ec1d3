#include "kernels/cuda/weight_layout.cuh"

#include <cstring>
#include <stdexcept>

#include "core/dtype.h"

namespace weft::cuda {

namespace {
constexpr int64_t kQ8Block = 32, kQ8BlockBytes = 34;
}  // namespace

void repack_q8_0_rows(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t K) {
  if (K % kQ8Block != 0) throw std::invalid_argument("repack_q8_0_rows: K must be a multiple of 32");
  const int64_t blocks = K / kQ8Block, row_bytes = blocks * kQ8BlockBytes;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* s = src + r * row_bytes;
    uint8_t* q = dst + r * row_bytes;
    uint8_t* d = q + K;
    for (int64_t b = 0; b < blocks; ++b) {
      std::memcpy(d + 2 * b, s + b * kQ8BlockBytes, 2);
      std::memcpy(q + b * kQ8Block, s + b * kQ8BlockBytes + 2, kQ8Block);
    }
  }
}

float q8_0_device_weight(const uint8_t* row, int64_t K, int64_t k) {
  uint16_t d;
  std::memcpy(&d, row + K + 2 * (k / kQ8Block), 2);
  return float(int8_t(row[k])) * f16_to_f32(d);
}

void repack_q4_0_rows(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t K) {
  if (K % kQ8Block != 0) throw std::invalid_argument("repack_q4_0_rows: K must be a multiple of 32");
  constexpr int64_t kBlockBytes = 18;
  const int64_t blocks = K / kQ8Block, row_bytes = blocks * kBlockBytes;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* s = src + r * row_bytes;
    uint8_t* q = dst + r * row_bytes;
    uint8_t* d = q + K / 2;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* qs = s + b * kBlockBytes + 2;
      std::memcpy(d + 2 * b, s + b * kBlockBytes, 2);
      // GGUF: weight e < 16 is the low nibble of qs[e], weight e >= 16 the high nibble of qs[e - 16].
      auto nibble = [&](int e) { return e < 16 ? qs[e] & 0xF : qs[e - 16] >> 4; };
      for (int m = 0; m < 16; ++m) q[b * 16 + m] = uint8_t(nibble(2 * m) | nibble(2 * m + 1) << 4);
    }
  }
}

float q4_0_device_weight(const uint8_t* row, int64_t K, int64_t k) {
  uint16_t d;
  std::memcpy(&d, row + K / 2 + 2 * (k / kQ8Block), 2);
  return float(((row[k / 2] >> (4 * (k % 2))) & 0xF) - 8) * f16_to_f32(d);
}

int64_t block_row_bytes(bool q4, int64_t K) { return K / kQ8Block * (q4 ? 18 : kQ8BlockBytes); }

namespace {
constexpr int64_t kQK = 256, kQ4KBytes = 144, kQ6KBytes = 210;
}  // namespace

void repack_q4_k_rows(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t K) {
  if (K % kQK != 0) throw std::invalid_argument("repack_q4_k_rows: K must be a multiple of 256");
  const int64_t blocks = K / kQK, row_bytes = blocks * kQ4KBytes;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* s = src + r * row_bytes;
    uint8_t* q = dst + r * row_bytes;
    uint8_t* h = q + K / 2;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* blk = s + b * kQ4KBytes;
      std::memcpy(h + 16 * b, blk, 16);  // d, dmin, scales[12]
      const uint8_t* qs = blk + 16;
      // GGUF: weight 64c + l is the low nibble of qs[32c + l], weight 64c + 32 + l its high nibble.
      auto nibble = [&](int e) {
        const int c = e / 64, l = e % 64;
        return l < 32 ? qs[32 * c + l] & 0xF : qs[32 * c + l - 32] >> 4;
      };
      for (int m = 0; m < 128; ++m) q[b * 128 + m] = uint8_t(nibble(2 * m) | nibble(2 * m + 1) << 4);
    }
  }
}

void repack_q6_k_rows(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t K) {
  if (K % kQK != 0) throw std::invalid_argument("repack_q6_k_rows: K must be a multiple of 256");
  const int64_t blocks = K / kQK, row_bytes = blocks * kQ6KBytes;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* s = src + r * row_bytes;
    uint8_t* lo = dst + r * row_bytes;
    uint8_t* hi = lo + K / 2;
    uint8_t* h = hi + K / 4;
    std::memset(hi, 0, size_t(K / 4));
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* ql = s + b * kQ6KBytes;
      const uint8_t* qh = ql + 128;
      std::memcpy(h + 18 * b, ql + 192, 18);  // scales[16], d
      for (int e = 0; e < 256; ++e) {
        // GGUF (dequantize_row_q6_K): half hf = e / 128, within it i = (e % 128) / 32, l = e % 32.
        const int hf = e / 128, i = (e % 128) / 32, l = e % 32;
        const uint8_t lbyte = ql[64 * hf + l + (i & 1) * 32];
        const int low = i < 2 ? lbyte & 0xF : lbyte >> 4;
        const int high = (qh[32 * hf + l] >> (2 * i)) & 3;
        const int64_t k = b * kQK + e;
        if (k % 2 == 0) lo[k / 2] = uint8_t(low);
        else lo[k / 2] = uint8_t(lo[k / 2] | low << 4);
        hi[k / 4] = uint8_t(hi[k / 4] | (high << (2 * (k % 4))));
      }
    }
  }
}

float q4_k_device_weight(const uint8_t* row, int64_t K, int64_t k) {
  const uint8_t* h = row + K / 2 + 16 * (k / kQK);
  uint16_t d, dmin;
  std::memcpy(&d, h, 2);
  std::memcpy(&dmin, h + 2, 2);
  const uint8_t* s = h + 4;
  const int j = int((k % kQK) / 32), i = j & 3;
  const uint32_t sc = j < 4 ? s[i] & 63u : (s[i + 8] & 0xFu) | ((s[i] >> 6) << 4);
  const uint32_t m = j < 4 ? s[i + 4] & 63u : (s[i + 8] >> 4) | ((s[i + 4] >> 6) << 4);
  const float n = float((row[k / 2] >> (4 * (k % 2))) & 0xF);
  return f16_to_f32(d) * float(sc) * n - f16_to_f32(dmin) * float(m);
}

float q6_k_device_weight(const uint8_t* row, int64_t K, int64_t k) {
  const int low = (row[k / 2] >> (4 * (k % 2))) & 0xF, high = (row[K / 2 + k / 4] >> (2 * (k % 4))) & 3;
  const uint8_t* h = row + K / 2 + K / 4 + 18 * (k / kQK);
  uint16_t d;
  std::memcpy(&d, h + 16, 2);
  const int8_t sc = int8_t(h[(k % kQK) / 16]);
  return f16_to_f32(d) * float(sc) * float((low | high << 4) - 32);
}

}  // namespace weft::cuda
