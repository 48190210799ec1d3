// KvCache: the keys and values of the full-attention layers of one session, in fixed-size pages.
//
// Growth allocates a new page and never copies old ones, so appending is O(new tokens) at any
// depth and row pointers stay valid for the cache's lifetime (until truncate/clear).
// Page layout, per layer: [K: n_kv_heads x page_tokens rows][V: n_kv_heads x page_tokens rows];
// a row is one head's head_dim values of one token, encoded in the layer's K or V type
// (f32, f16, or the 32-value blocks of q8_0 / q4_0). A head's rows are contiguous inside a page,
// so attention streams them. K is stored after RoPE (as transformers' cache holds it).
// Quantized rows are written once, when the token is appended, and never re-quantized.
// Thread safety: none; one session owns its cache.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/memory.h"
#include "kernels/kv_view.h"

namespace weft {

struct KvCacheSpec {
  int64_t n_layers = 0;      // full-attention layers only
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  DType k_type = DType::kF16;
  DType v_type = DType::kF16;
  int64_t page_tokens = 256;
};

// Encoded bytes of one row of `head_dim` values in `type`.
size_t kv_row_bytes(DType type, int64_t head_dim);
// True for the cache element types weft supports (f32, f16, q8_0, q4_0), with head_dim
// compatible (quantized types need head_dim % 32 == 0).
bool kv_type_supported(DType type, int64_t head_dim);

class KvCache {
 public:
  // Pages come from `allocator` (the owning backend's memory; host memory by default).
  explicit KvCache(const KvCacheSpec& spec, PageAllocator* allocator = nullptr);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvCacheSpec& spec() const { return spec_; }
  int64_t length(int64_t layer) const { return layers_[size_t(layer)].length; }

  // Appends T tokens to `layer`. k, v: f32 [T, n_kv_heads, head_dim] in host memory. Encodes into
  // the cache type (host-accessible pages only; a device backend encodes in its own kernel after
  // `grow`).
  void append(int64_t layer, const float* k, const float* v, int64_t T);
  // Makes room for positions [length, length + T) of `layer` and marks them present (their
  // contents are the caller's to write); returns the view covering them.
  KvLayerView grow(int64_t layer, int64_t T);
  // Drops every token at position >= length in all layers (pages beyond are freed).
  void truncate(int64_t length);
  void clear() { truncate(0); }
  // Grows every layer to `length` tokens by repeating its existing pages in order (page p gets a
  // byte copy of page p mod n, n = the pages held now). For decode-speed measurement at depths
  // too long to prefill (`weft bench --tile-fill`): the tokens it adds carry real rows of the
  // cache's type, so attention reads exactly the bytes of a prefilled cache of that length, but
  // they are meaningless as context. Every layer must hold the same number of tokens, a positive
  // multiple of page_tokens, and length must not be below it; returns false (changing nothing)
  // otherwise.
  bool tile_to(int64_t length);

  KvLayerView view(int64_t layer) const;

  // Bytes one context token costs across all layers (K + V rows for every KV head).
  size_t bytes_per_token() const;
  // Bytes of the pages held now (resident once touched).
  size_t bytes_allocated() const;

  // Makes this cache hold src's tokens, re-encoded into this cache's K/V types (same layers,
  // heads and head_dim; page size may differ). Rows of equal type are copied byte for byte;
  // otherwise each row is decoded to f32 and encoded once (e.g. an f16 prefix quantized to
  // q8_0 exactly as append would have quantized the same f32 row, up to the f16 rounding).
  // Either cache may live in device memory (a device allocator); then rows are re-encoded through
  // host copies.
  void assign_from(const KvCache& src);

 private:
  struct Layer {
    std::vector<uint8_t*> pages;  // the page table, owned through allocator_
    int64_t length = 0;
  };
  size_t page_bytes() const;
  // Byte copy of src's pages (same spec), wherever either cache lives.
  void copy_pages_from(const KvCache& src);
  void release_pages(Layer& layer, size_t keep);

  KvCacheSpec spec_;
  PageAllocator* allocator_;
  size_t k_row_bytes_, v_row_bytes_;
  std::vector<Layer> layers_;
};

}  // namespace weft
