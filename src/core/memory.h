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
};

// Plain host memory (64-byte aligned); the default for caches made outside any backend (tests,
// the lab's re-encoding copies).
PageAllocator& host_allocator();

}  // namespace weft
