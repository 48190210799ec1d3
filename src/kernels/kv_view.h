// KvLayerView: how attention kernels (CPU now, CUDA later) see one layer of the paged KV cache.
// The cache (src/cache/kv_cache.h) owns the pages; kernels only read through this view.
// Page layout: [K: n_kv_heads x page_tokens rows][V: n_kv_heads x page_tokens rows].
// The view is a page table: the base pointer of every page, in position order. The pointers are
// in the memory of the backend that owns the cache (host for the CPU backend), so a device
// cache is described by the same struct.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/check.h"
#include "core/dtype.h"

namespace weft {

// Read-only view of one layer, for attention kernels.
struct KvLayerView {
  const uint8_t* const* pages = nullptr;  // page table: pages[i] holds positions [i, i + 1)·page_tokens
  int64_t n_pages = 0;
  int64_t length = 0;
  int64_t page_tokens = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  DType k_type = DType::kF16, v_type = DType::kF16;
  size_t k_row_bytes = 0, v_row_bytes = 0;

  // Rows [0, length) of heads [0, n_kv_heads) exist; kernels never read past them (asserted in
  // Debug and WEFT_CHECKS builds: a position past the cache is a bug in the caller).
  const uint8_t* k_row(int64_t head, int64_t pos) const {
    WEFT_ASSERT(pos >= 0 && pos < length && head >= 0 && head < n_kv_heads, "K row read outside the KV cache");
    const uint8_t* page = pages[pos / page_tokens];
    return page + size_t(head * page_tokens + pos % page_tokens) * k_row_bytes;
  }
  const uint8_t* v_row(int64_t head, int64_t pos) const {
    WEFT_ASSERT(pos >= 0 && pos < length && head >= 0 && head < n_kv_heads, "V row read outside the KV cache");
    const uint8_t* page = pages[pos / page_tokens];
    return page + size_t(n_kv_heads * page_tokens) * k_row_bytes +
           size_t(head * page_tokens + pos % page_tokens) * v_row_bytes;
  }

  // The K (or V) rows of `head` at positions [pos, pos + n) into out[0..n): the same pointers as
  // k_row / v_row, with one division for the run and a step per row (a page's rows of one head are
  // contiguous). Each k_row / v_row call divides by page_tokens; three of them per key were ~10%
  // of a q8_0 decode-attention call at 32K.
  template <typename Row>
  void k_rows(int64_t head, int64_t pos, int64_t n, Row** out) const { rows_of(false, head, pos, n, out); }
  template <typename Row>
  void v_rows(int64_t head, int64_t pos, int64_t n, Row** out) const { rows_of(true, head, pos, n, out); }

 private:
  template <typename Row>
  void rows_of(bool v, int64_t head, int64_t pos, int64_t n, Row** out) const {
    WEFT_ASSERT(n >= 0 && pos >= 0 && pos + n <= length && head >= 0 && head < n_kv_heads,
                "KV rows read outside the KV cache");
    if (n <= 0) return;
    const size_t rb = v ? v_row_bytes : k_row_bytes;
    const size_t base = (v ? size_t(n_kv_heads * page_tokens) * k_row_bytes : 0) + size_t(head * page_tokens) * rb;
    int64_t page = pos / page_tokens, off = pos % page_tokens;
    const uint8_t* p = pages[page] + base + size_t(off) * rb;
    for (int64_t j = 0;;) {
      out[j] = reinterpret_cast<Row*>(p);
      if (++j == n) return;
      p += rb;
      if (++off == page_tokens) {  // the next row opens the next page (read only when there is one)
        off = 0;
        p = pages[++page] + base;
      }
    }
  }
};

}  // namespace weft
