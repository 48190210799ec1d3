// PageAllocator: where a backend keeps per-sequence memory (KV pages). The CPU backend hands out
// host memory; a device backend hands out device memory, and the cache only stores the pointers
// (its page table), so the same KvLayerView describes a cache wherever it lives.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weft {

class PageAllocator {
 public:
  virtual ~PageAllocator() = default;
  // `bytes` of memory aligned to at least 64 bytes; never null (allocation failure throws
  // std::bad_alloc, as new does).
  virtual uint8_t* allocate(size_t bytes) = 0;
  virtual void release(uint8_t* page) = 0;
  // True when the host may read and write the pages directly.
  virtual bool host_accessible() const = 0;
  // Byte operations on this allocator's memory (a device allocator runs them on its device; its
  // copy also takes host memory on either side, so state can be saved to and restored from host).
  virtual void fill_zero(uint8_t* dst, size_t bytes);
  virtual void copy(uint8_t* dst, const uint8_t* src, size_t bytes);
};

// Plain host memory (64-byte aligned); the default for caches made outside any backend (tests,
// the lab's re-encoding copies).
PageAllocator& host_allocator();

}  // namespace weft
