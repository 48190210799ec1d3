// OwnedBytes: a block of bytes together with the function that frees it, so one owner (e.g. an
// in-memory ModelFiles) can hold host blocks (new[]) and device blocks (cudaMalloc) alike without
// knowing which is which. The deleter is a plain function pointer: core stays free of any backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

namespace weft {

using OwnedBytes = std::unique_ptr<uint8_t[], void (*)(uint8_t*)>;

inline void free_host_bytes(uint8_t* p) { delete[] p; }

// `bytes` of host memory (at least one byte), not zero-filled: the callers overwrite every byte,
// and zero-filling gigabytes would cost as much as generating them. nullptr when memory runs out.
// new[] of uint8_t is aligned for every scalar type.
inline OwnedBytes host_bytes(size_t bytes) {
  return OwnedBytes(new (std::nothrow) uint8_t[bytes > 0 ? bytes : 1], free_host_bytes);
}

}  // namespace weft
