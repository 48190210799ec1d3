// Software prefetch spread across a compute loop: the lines of a few upcoming rows (KV cache
// rows, 64-byte lines), a given number per step, towards L2 (prefetcht1).
//
// Why spread, and why not leave it to the hardware: the attention kernels read a chunk's rows in
// bursts (a block of keys widened, then arithmetic on it). A block prefetched at once overflows
// the core's line fill buffers and stalls it until the block has arrived, and the hardware
// prefetcher runs only a little ahead of plain loads, so either way the reads and the arithmetic
// add up instead of overlapping. Measured in isolation from DRAM on a Xeon (AVX-512, 1 thread):
// the f16 score primitive at 80 ns per key without software prefetch, 66 with the next block
// prefetched into L1 at once, 59 spread into L2, against 38 in L1 (docs/results.md 8.6).
#pragma once

#include <cstdint>

namespace weft {

template <typename T>
struct SpreadPrefetch {
  const T* const* rows = nullptr;  // the rows to bring in, in order
  int64_t n_rows = 0, row_bytes = 0;
  int64_t r = 0, off = 0;  // the next line: row r, byte off

  SpreadPrefetch() = default;
  SpreadPrefetch(const T* const* rows_, int64_t n_rows_, int64_t row_bytes_)
      : rows(rows_), n_rows(n_rows_ > 0 ? n_rows_ : 0), row_bytes(row_bytes_) {}

  // Issues up to `lines` prefetches (none once every row is on its way).
  inline void step(int lines) {
    for (int i = 0; i < lines && r < n_rows; ++i) {
      __builtin_prefetch(reinterpret_cast<const char*>(rows[r]) + off, 0, 2);
      off += 64;
      if (off >= row_bytes) off = 0, ++r;
    }
  }
};

}  // namespace weft
