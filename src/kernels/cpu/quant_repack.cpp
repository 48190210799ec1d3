// q4_K x8 repack (quant_repack.h): plain scalar byte moves, run once per matrix at bind time.
#include "kernels/cpu/quant_repack.h"

#include <cassert>
#include <cstring>

#include "kernels/cpu/quant_blocks.h"

namespace weft {

namespace {

constexpr size_t kQ4KBlock = sizeof(BlockQ4_K);
static_assert(kQ4KGroupBlockBytes == kQ4KGroupRows * sizeof(BlockQ4_K), "a group column is 8 blocks");

// Offsets inside one group column.
constexpr size_t kOffD = 0, kOffDmin = 16, kOffScales = 32, kOffMins = 96, kOffCodes = 128;

// The scale entry of row r, sub-block s (quant_repack.h).
inline int scale_entry(int r, int s) {
  const int h = s / 4, sp = s % 4, L = r / 4;
  return 32 * h + 16 * L + 4 * sp + (r - 4 * L);
}

void repack_column(const BlockQ4_K* const blk[kQ4KGroupRows], uint8_t* out) {
  std::memset(out, 0, kQ4KGroupBlockBytes);
  for (int r = 0; r < kQ4KGroupRows; ++r) {
    std::memcpy(out + kOffD + 2 * r, &blk[r]->d, 2);
    std::memcpy(out + kOffDmin + 2 * r, &blk[r]->dmin, 2);
    uint8_t sc[8], m[8];
    unpack_scales_k4(blk[r]->scales, sc, m);
    for (int s = 0; s < 8; ++s) {
      const int e = scale_entry(r, s);
      out[kOffScales + e] = uint8_t(sc[s] | (m[s] >> 4) << 6);
      out[kOffMins + (e & 31)] |= uint8_t((m[s] & 0xF) << (e >= 32 ? 4 : 0));
    }
    for (int c = 0; c < 4; ++c)
      for (int j = 0; j < 8; ++j) std::memcpy(out + kOffCodes + 32 * (8 * c + j) + 4 * r, blk[r]->qs + 32 * c + 4 * j, 4);
  }
}

void unpack_column(const uint8_t* in, int r, BlockQ4_K* blk) {
  std::memcpy(&blk->d, in + kOffD + 2 * r, 2);
  std::memcpy(&blk->dmin, in + kOffDmin + 2 * r, 2);
  uint8_t sc[8], m[8];
  for (int s = 0; s < 8; ++s) {
    const int e = scale_entry(r, s);
    const uint8_t b = in[kOffScales + e];
    sc[s] = b & 63;
    m[s] = uint8_t(((in[kOffMins + (e & 31)] >> (e >= 32 ? 4 : 0)) & 0xF) | (b >> 6) << 4);
  }
  pack_scales_k4(sc, m, blk->scales);
  for (int c = 0; c < 4; ++c)
    for (int j = 0; j < 8; ++j) std::memcpy(blk->qs + 32 * c + 4 * j, in + kOffCodes + 32 * (8 * c + j) + 4 * r, 4);
}

}  // namespace

bool quant_type_has_groups(GgmlType t) { return t == GgmlType::kQ4_K; }

void repack_q4_K_x8(const uint8_t* src, size_t row_bytes, int64_t K, uint8_t* dst) {
  assert(K % kQK_K == 0);
  for (int64_t b = 0; b < K / kQK_K; ++b) {
    const BlockQ4_K* blk[kQ4KGroupRows];
    for (int r = 0; r < kQ4KGroupRows; ++r)
      blk[r] = reinterpret_cast<const BlockQ4_K*>(src + size_t(r) * row_bytes + size_t(b) * kQ4KBlock);
    repack_column(blk, dst + size_t(b) * kQ4KGroupBlockBytes);
  }
}

void unpack_q4_K_x8_row(const uint8_t* group, int64_t K, int i, uint8_t* dst) {
  for (int64_t b = 0; b < K / kQK_K; ++b) {
    BlockQ4_K blk;
    unpack_column(group + size_t(b) * kQ4KGroupBlockBytes, i, &blk);
    std::memcpy(dst + size_t(b) * kQ4KBlock, &blk, kQ4KBlock);
  }
}

void repack_q4_K_matrix(const uint8_t* src, int64_t rows, int64_t K, uint8_t* dst) {
  const size_t row_bytes = ggml_row_bytes(GgmlType::kQ4_K, K);
  const int64_t grouped = rows / kQ4KGroupRows * kQ4KGroupRows;
  for (int64_t r = 0; r < grouped; r += kQ4KGroupRows)
    repack_q4_K_x8(src + size_t(r) * row_bytes, row_bytes, K, dst + size_t(r) * row_bytes);
  std::memcpy(dst + size_t(grouped) * row_bytes, src + size_t(grouped) * row_bytes, size_t(rows - grouped) * row_bytes);
}

const uint8_t* quant_row_plain(GgmlType t, const uint8_t* w, int64_t K, const QuantLayout& layout, int64_t r,
                               uint8_t* scratch) {
  const size_t row_bytes = ggml_row_bytes(t, K);
  if (r >= layout.grouped_rows) return w + size_t(r) * row_bytes;
  assert(quant_type_has_groups(t));
  const int64_t g = r / kQ4KGroupRows;
  unpack_q4_K_x8_row(w + size_t(g) * kQ4KGroupRows * row_bytes, K, int(r % kQ4KGroupRows), scratch);
  return scratch;
}

}  // namespace weft
