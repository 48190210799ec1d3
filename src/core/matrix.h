// Matrix: a view of a weight matrix in its stored type, as kernels of every backend see it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace weft {

// A matrix [rows, cols] of dtype `dtype`, possibly a slice of a larger tensor (fused experts).
struct Matrix {
  DType dtype = DType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t bytes() const { return size_t(rows * cols) * dtype_size(dtype); }
  // Rows [begin, begin + count) as a matrix of its own.
  Matrix row_slice(int64_t begin, int64_t count) const {
    return {dtype, static_cast<const uint8_t*>(data) + size_t(begin * cols) * dtype_size(dtype), count, cols};
  }
};

}  // namespace weft
