// ScratchArray: a growable float array for a backend's scratch activations, as std::vector's
// resize() behaves (contents kept on growth, new elements zero) but taken from the kernel in whole
// pages: large arrays are mapped on 2 MiB boundaries with MADV_HUGEPAGE, so a prefill's first
// touch of a few hundred MiB of activations costs hundreds of page faults rather than tens of
// thousands, and nothing is zeroed in user space (fresh anonymous pages are zero).
//
// Measured (docs/results.md §8.10): on a 2-core Zen 5 VM, page faults and the zero-filling memset
// of vector::resize were ~15% of the shipped model's 4096-token prefill.
#pragma once

#include <cstddef>

namespace weft {

class ScratchArray {
 public:
  ScratchArray() = default;
  ScratchArray(const ScratchArray&) = delete;
  ScratchArray& operator=(const ScratchArray&) = delete;
  ~ScratchArray();

  // At least n floats; the first size() keep their values, the rest are zero the first time
  // they are handed out. Throws std::bad_alloc when the memory is not there.
  float* resize(size_t n);
  float* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  float* data_ = nullptr;
  size_t size_ = 0;          // floats in use (the high-water mark of resize)
  void* mapping_ = nullptr;  // the mmap'd region (data_ lies inside it)
  size_t mapping_bytes_ = 0;
  size_t capacity_ = 0;      // floats that fit from data_ to the end of the mapping
};

}  // namespace weft
