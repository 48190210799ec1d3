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

}  // namespace weft::cuda
