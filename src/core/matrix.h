// Matrix: a view of a weight matrix in its stored type, as kernels of every backend see it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace weft {

// A matrix [rows, cols] of type `dtype`, possibly a slice of a larger tensor (fused experts).
// Rows are contiguous, row_bytes() apart. For the GGML block types (q8_0, q4_0, q4_K, q5_K,
// q6_K) a row is cols / dtype_block(dtype) whole blocks, so row_bytes() is never assumed to be
// cols * an element size; cols must be a multiple of the block (checked at weight binding).
struct Matrix {
  DType dtype = DType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes() const { return dtype_bytes(dtype, size_t(cols)); }
  size_t bytes() const { return size_t(rows) * row_bytes(); }
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + size_t(r) * row_bytes(); }
  // Rows [begin, begin + count) as a matrix of its own.
  Matrix row_slice(int64_t begin, int64_t count) const { return {dtype, row(begin), count, cols}; }
};

}  // namespace weft
