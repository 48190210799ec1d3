#include "core/memory.h"

#include <cstring>
#include <new>

namespace weft {

void PageAllocator::fill_zero(uint8_t* dst, size_t bytes) {
  if (bytes) std::memset(dst, 0, bytes);
}

void PageAllocator::copy(uint8_t* dst, const uint8_t* src, size_t bytes) {
  if (bytes && dst != src) std::memcpy(dst, src, bytes);
}

namespace {

class HostAllocator final : public PageAllocator {
 public:
  uint8_t* allocate(size_t bytes) override {
    return static_cast<uint8_t*>(::operator new(bytes, std::align_val_t(64)));
  }
  void release(uint8_t* page) override { ::operator delete(page, std::align_val_t(64)); }
  bool host_accessible() const override { return true; }
};

}  // namespace

PageAllocator& host_allocator() {
  static HostAllocator allocator;
  return allocator;
}

}  // namespace weft
