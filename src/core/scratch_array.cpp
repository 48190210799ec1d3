#include "core/scratch_array.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <new>

namespace weft {

namespace {

constexpr size_t kHugePage = size_t(2) << 20;
// Below this an array lives on ordinary pages (a huge page would mostly stay unused).
constexpr size_t kHugeFrom = kHugePage;

}  // namespace

ScratchArray::~ScratchArray() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
}

float* ScratchArray::resize(size_t n) {
  if (n <= capacity_) {
    if (n > size_) size_ = n;  // never-touched floats of the mapping are still zero
    return data_;
  }
  if (n > (SIZE_MAX - 2 * kHugePage) / sizeof(float)) throw std::bad_alloc();
  // Grow geometrically so a sequence of slightly larger requests maps O(log n) times.
  size_t want = n * sizeof(float);
  if (want < capacity_ * sizeof(float) * 3 / 2) want = capacity_ * sizeof(float) * 3 / 2;
  const bool huge = want >= kHugeFrom;
  const size_t page = huge ? kHugePage : 4096;
  want = (want + page - 1) / page * page;
  const size_t map_bytes = huge ? want + kHugePage : want;  // room to align the start to 2 MiB
  void* p = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  auto* base = reinterpret_cast<uint8_t*>(p);
  if (huge) {
    base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1));
    madvise(base, want, MADV_HUGEPAGE);  // a hint: on 4 KiB pages the array works the same
  }
  auto* fresh = reinterpret_cast<float*>(base);
  if (size_ > 0) std::memcpy(fresh, data_, size_ * sizeof(float));
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
  mapping_ = p;
  mapping_bytes_ = map_bytes;
  data_ = fresh;
  capacity_ = want / sizeof(float);
  size_ = n;
  return data_;
}

}  // namespace weft
