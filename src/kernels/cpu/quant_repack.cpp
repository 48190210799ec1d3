// q4_K / q5_K / q6_K / q8_0 x8 repack (quant_repack.h): plain scalar byte moves, run once per matrix at bind time.
#include "kernels/cpu/quant_repack.h"

#include <cassert>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/quant_blocks.h"

namespace weft {

namespace {

// Offsets inside one group column (q5_K: the fifth bits at kOffQh, the codes after them).
constexpr size_t kOffD = 0, kOffDmin = 16, kOffScales = 32, kOffMins = 96, kOffQh = 128;
template <typename Block>
constexpr size_t codes_offset() { return std::is_same_v<Block, BlockQ5_K> ? kOffQh + 256 : kOffQh; }

// The scale entry of row r, sub-block s (quant_repack.h).
inline int scale_entry(int r, int s) {
  const int h = s / 4, sp = s % 4, L = r / 4;
  return 32 * h + 16 * L + 4 * sp + (r - 4 * L);
}

template <typename Block>
void repack_column(const Block* const blk[kX8GroupRows], uint8_t* out) {
  constexpr size_t kCodes = codes_offset<Block>();
  std::memset(out, 0, kX8GroupRows * sizeof(Block));
  for (int r = 0; r < kX8GroupRows; ++r) {
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
      for (int j = 0; j < 8; ++j) std::memcpy(out + kCodes + 32 * (8 * c + j) + 4 * r, blk[r]->qs + 32 * c + 4 * j, 4);
    if constexpr (std::is_same_v<Block, BlockQ5_K>)
      for (int j = 0; j < 8; ++j) std::memcpy(out + kOffQh + 32 * j + 4 * r, blk[r]->qh + 4 * j, 4);
  }
}

template <typename Block>
void unpack_column(const uint8_t* in, int r, Block* blk) {
  constexpr size_t kCodes = codes_offset<Block>();
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
    for (int j = 0; j < 8; ++j) std::memcpy(blk->qs + 32 * c + 4 * j, in + kCodes + 32 * (8 * c + j) + 4 * r, 4);
  if constexpr (std::is_same_v<Block, BlockQ5_K>)
    for (int j = 0; j < 8; ++j) std::memcpy(blk->qh + 4 * j, in + kOffQh + 32 * j + 4 * r, 4);
}

template <typename Block>
void repack_x8_as(const uint8_t* src, size_t row_bytes, int64_t K, uint8_t* dst) {
  for (int64_t b = 0; b < K / kQK_K; ++b) {
    const Block* blk[kX8GroupRows];
    for (int r = 0; r < kX8GroupRows; ++r)
      blk[r] = reinterpret_cast<const Block*>(src + size_t(r) * row_bytes + size_t(b) * sizeof(Block));
    repack_column(blk, dst + size_t(b) * kX8GroupRows * sizeof(Block));
  }
}

template <typename Block>
void unpack_x8_row_as(const uint8_t* group, int64_t K, int i, uint8_t* dst) {
  for (int64_t b = 0; b < K / kQK_K; ++b) {
    Block blk;
    unpack_column(group + size_t(b) * kX8GroupRows * sizeof(Block), i, &blk);
    std::memcpy(dst + size_t(b) * sizeof(Block), &blk, sizeof(Block));
  }
}

// q8_0: per block column, the eight f16 scales, then for position j < 8 the four codes
// 4j..4j+3 of each row (quant_repack.h).
void repack_x8_q8_0(const uint8_t* src, size_t row_bytes, int64_t K, uint8_t* dst) {
  for (int64_t b = 0; b < K / kQK32; ++b) {
    uint8_t* out = dst + size_t(b) * kX8GroupRows * sizeof(BlockQ8_0);
    for (int r = 0; r < kX8GroupRows; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(src + size_t(r) * row_bytes) + b;
      std::memcpy(out + 2 * r, &blk->d, 2);
      for (int j = 0; j < 8; ++j) std::memcpy(out + 16 + 32 * j + 4 * r, blk->qs + 4 * j, 4);
    }
  }
}

void unpack_x8_row_q8_0(const uint8_t* group, int64_t K, int i, uint8_t* dst) {
  for (int64_t b = 0; b < K / kQK32; ++b) {
    const uint8_t* in = group + size_t(b) * kX8GroupRows * sizeof(BlockQ8_0);
    BlockQ8_0 blk;
    std::memcpy(&blk.d, in + 2 * i, 2);
    for (int j = 0; j < 8; ++j) std::memcpy(blk.qs + 4 * j, in + 16 + 32 * j + 4 * i, 4);
    std::memcpy(dst + size_t(b) * sizeof(BlockQ8_0), &blk, sizeof(BlockQ8_0));
  }
}

// q6_K (quant_repack.h): per super-block column the eight f16 d, the 128 signed scales (per
// 32-value group g, the two sub-blocks' scales of rows 0-3, then of rows 4-7: one vpmovsxbw gives
// both 128-bit lanes' int16 scales), then per (half h, position j) the three code registers the
// kernel loads together, in the order it loads them.
constexpr size_t kQ6Scales = 16, kQ6Codes = kQ6Scales + 128;

inline int q6_scale_entry(int r, int s) { return 16 * (s / 2) + 8 * (r / 4) + 4 * (s % 2) + r % 4; }

// The three 4-byte pieces of a row that land in register (h, j): ql[64h + 4j ..), ql[64h + 32 +
// 4j ..), qh[32h + 4j ..); their place in the column is q6_code_offset(h, j, part) + 4r.
inline size_t q6_code_offset(int h, int j, int part) { return kQ6Codes + 96 * size_t(8 * h + j) + 32 * size_t(part); }
inline size_t q6_row_offset(int h, int j, int part) {  // in the plain block
  return part == 2 ? offsetof(BlockQ6_K, qh) + 32 * size_t(h) + 4 * size_t(j) : 64 * size_t(h) + 32 * size_t(part) + 4 * size_t(j);
}

void repack_x8_q6_K(const uint8_t* src, size_t row_bytes, int64_t K, uint8_t* dst) {
  for (int64_t b = 0; b < K / kQK_K; ++b) {
    uint8_t* out = dst + size_t(b) * kX8GroupRows * sizeof(BlockQ6_K);
    for (int r = 0; r < kX8GroupRows; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ6_K*>(src + size_t(r) * row_bytes) + b;
      std::memcpy(out + 2 * r, &blk->d, 2);
      for (int s = 0; s < 16; ++s) std::memcpy(out + kQ6Scales + q6_scale_entry(r, s), &blk->scales[s], 1);
      for (int h = 0; h < 2; ++h)
        for (int j = 0; j < 8; ++j)
          for (int part = 0; part < 3; ++part)
            std::memcpy(out + q6_code_offset(h, j, part) + 4 * r, reinterpret_cast<const uint8_t*>(blk) + q6_row_offset(h, j, part), 4);
    }
  }
}

void unpack_x8_row_q6_K(const uint8_t* group, int64_t K, int i, uint8_t* dst) {
  for (int64_t b = 0; b < K / kQK_K; ++b) {
    const uint8_t* in = group + size_t(b) * kX8GroupRows * sizeof(BlockQ6_K);
    BlockQ6_K blk;
    std::memcpy(&blk.d, in + 2 * i, 2);
    for (int s = 0; s < 16; ++s) std::memcpy(&blk.scales[s], in + kQ6Scales + q6_scale_entry(i, s), 1);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 8; ++j)
        for (int part = 0; part < 3; ++part)
          std::memcpy(reinterpret_cast<uint8_t*>(&blk) + q6_row_offset(h, j, part), in + q6_code_offset(h, j, part) + 4 * i, 4);
    std::memcpy(dst + size_t(b) * sizeof(BlockQ6_K), &blk, sizeof(BlockQ6_K));
  }
}

}  // namespace

bool quant_type_has_groups(GgmlType t) {
  return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ6_K || t == GgmlType::kQ8_0;
}

void repack_x8(GgmlType t, const uint8_t* src, size_t row_bytes, int64_t K, uint8_t* dst) {
  assert(quant_type_has_groups(t) && K % ggml_block_size(t) == 0);
  if (t == GgmlType::kQ8_0) repack_x8_q8_0(src, row_bytes, K, dst);
  else if (t == GgmlType::kQ6_K) repack_x8_q6_K(src, row_bytes, K, dst);
  else if (t == GgmlType::kQ4_K) repack_x8_as<BlockQ4_K>(src, row_bytes, K, dst);
  else repack_x8_as<BlockQ5_K>(src, row_bytes, K, dst);
}

void unpack_x8_row(GgmlType t, const uint8_t* group, int64_t K, int i, uint8_t* dst) {
  assert(quant_type_has_groups(t));
  if (t == GgmlType::kQ8_0) unpack_x8_row_q8_0(group, K, i, dst);
  else if (t == GgmlType::kQ6_K) unpack_x8_row_q6_K(group, K, i, dst);
  else if (t == GgmlType::kQ4_K) unpack_x8_row_as<BlockQ4_K>(group, K, i, dst);
  else unpack_x8_row_as<BlockQ5_K>(group, K, i, dst);
}

void repack_matrix_x8(GgmlType t, const uint8_t* src, int64_t rows, int64_t K, uint8_t* dst) {
  const size_t row_bytes = ggml_row_bytes(t, K);
  const int64_t grouped = rows / kX8GroupRows * kX8GroupRows;
  for (int64_t r = 0; r < grouped; r += kX8GroupRows)
    repack_x8(t, src + size_t(r) * row_bytes, row_bytes, K, dst + size_t(r) * row_bytes);
  std::memcpy(dst + size_t(grouped) * row_bytes, src + size_t(grouped) * row_bytes, size_t(rows - grouped) * row_bytes);
}

const uint8_t* quant_row_plain(GgmlType t, const uint8_t* w, int64_t K, const QuantLayout& layout, int64_t r,
                               uint8_t* scratch) {
  const size_t row_bytes = ggml_row_bytes(t, K);
  if (r >= layout.grouped_rows) return w + size_t(r) * row_bytes;
  assert(quant_type_has_groups(t));
  const int64_t g = r / kX8GroupRows;
  unpack_x8_row(t, w + size_t(g) * kX8GroupRows * row_bytes, K, int(r % kX8GroupRows), scratch);
  return scratch;
}

}  // namespace weft
