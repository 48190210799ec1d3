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

}  // namespace weft::cuda
