// Index maps of the converter's reorders (gguf_layout.h).
#include "io/gguf_layout.h"

#include <cmath>
#include <cstring>

namespace weft {

std::vector<int64_t> llama_rope_row_map(int64_t n_heads, int64_t head_dim) {
  std::vector<int64_t> map(size_t(n_heads * head_dim));
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) map[size_t(h * head_dim + 2 * i + j)] = h * head_dim + j * half + i;
  return map;
}

std::vector<int64_t> vhead_tiled_map(int64_t n_k, int64_t n_v) {
  const int64_t r = n_v / n_k;
  std::vector<int64_t> map(static_cast<size_t>(n_v));
  for (int64_t k = 0; k < r; ++k)
    for (int64_t g = 0; g < n_k; ++g) map[size_t(k * n_k + g)] = g * r + k;
  return map;
}

std::vector<int64_t> expand_head_map(const std::vector<int64_t>& heads, int64_t per_head, int64_t offset) {
  std::vector<int64_t> map(size_t(offset) + heads.size() * size_t(per_head));
  for (int64_t i = 0; i < offset; ++i) map[size_t(i)] = i;
  for (size_t h = 0; h < heads.size(); ++h)
    for (int64_t e = 0; e < per_head; ++e)
      map[size_t(offset) + h * size_t(per_head) + size_t(e)] = offset + heads[h] * per_head + e;
  return map;
}

std::vector<int64_t> qwen3next_qkvz_row_map(int64_t n_k, int64_t dk, int64_t n_v, int64_t dv) {
  const int64_t r = n_v / n_k, vg = r * dv, group = 2 * dk + 2 * vg;
  std::vector<int64_t> map;
  map.reserve(size_t(n_k * group));
  for (int64_t g = 0; g < n_k; ++g)
    for (int64_t e = 0; e < dk; ++e) map.push_back(g * group + e);  // q
  for (int64_t g = 0; g < n_k; ++g)
    for (int64_t e = 0; e < dk; ++e) map.push_back(g * group + dk + e);  // k
  for (int64_t g = 0; g < n_k; ++g)
    for (int64_t e = 0; e < vg; ++e) map.push_back(g * group + 2 * dk + e);  // v
  for (int64_t g = 0; g < n_k; ++g)
    for (int64_t e = 0; e < vg; ++e) map.push_back(g * group + 2 * dk + vg + e);  // z
  return map;
}

void gather_rows(const void* src, size_t row_bytes, const std::vector<int64_t>& map, void* dst) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < map.size(); ++i) std::memcpy(d + i * row_bytes, s + size_t(map[i]) * row_bytes, row_bytes);
}

void scatter_rows(const void* src, size_t row_bytes, const std::vector<int64_t>& map, void* dst) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < map.size(); ++i) std::memcpy(d + size_t(map[i]) * row_bytes, s + i * row_bytes, row_bytes);
}

bool permute_col_chunks(DType dtype, const void* src, int64_t rows, int64_t cols, int64_t chunk_cols,
                        const std::vector<int64_t>& map, bool scatter, void* dst) {
  if (chunk_cols % dtype_block(dtype) != 0) return false;
  const size_t chunk = dtype_bytes(dtype, size_t(chunk_cols)), row = dtype_bytes(dtype, size_t(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const auto* s = static_cast<const uint8_t*>(src) + size_t(r) * row;
    auto* d = static_cast<uint8_t*>(dst) + size_t(r) * row;
    for (size_t i = 0; i < map.size(); ++i) {
      if (scatter) std::memcpy(d + size_t(map[i]) * chunk, s + i * chunk, chunk);
      else std::memcpy(d + i * chunk, s + size_t(map[i]) * chunk, chunk);
    }
  }
  return true;
}

float a_log_from_ssm_a(float a) {
  const float x0 = std::log(-a);
  float lo = x0, hi = x0;
  for (int step = 0; step <= 8; ++step) {
    if (-std::exp(lo) == a) return lo;
    if (-std::exp(hi) == a) return hi;
    lo = std::nextafter(lo, -INFINITY);
    hi = std::nextafter(hi, INFINITY);
  }
  return x0;
}

}  // namespace weft
