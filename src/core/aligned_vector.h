// A std::vector whose storage starts on a 64-byte (cache-line) boundary. Scratch activations the
// SIMD kernels stream: a plain large std::vector<float> starts at 16 mod 64 with glibc, so every
// other 32-byte load and every 64-byte load of it crosses two cache lines.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace weft {

template <typename T, size_t Align = 64>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U, Align>&) {}
  template <typename U>
  struct rebind {
    using other = AlignedAllocator<U, Align>;
  };
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(Align))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(Align)); }
  template <typename U>
  bool operator==(const AlignedAllocator<U, Align>&) const { return true; }
};

template <typename T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace weft
