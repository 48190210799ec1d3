// TensorView: a non-owning typed view of contiguous, row-major tensor bytes (usually inside a
// memory-mapped weight file). Shapes follow the file: a Linear weight is [out_features, in_features].
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace weft {

struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;

  int rank() const { return int(shape.size()); }
  int64_t dim(int i) const { return shape[size_t(i < 0 ? i + rank() : i)]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  bool valid() const { return data != nullptr; }
  template <typename T>
  const T* as() const { return static_cast<const T*>(data); }
};

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace weft
