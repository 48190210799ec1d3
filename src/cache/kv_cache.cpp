#include "cache/kv_cache.h"

#include <cassert>
#include <cstring>

#include "kernels/cpu/kv_quant.h"

namespace weft {

size_t kv_row_bytes(DType type, int64_t head_dim) { return dtype_bytes(type, size_t(head_dim)); }

bool kv_type_supported(DType type, int64_t head_dim) {
  switch (type) {
    case DType::kF32:
    case DType::kF16: return true;
    case DType::kQ8_0:
    case DType::kQ4_0: return head_dim % 32 == 0;
    default: return false;
  }
}

KvCache::KvCache(const KvCacheSpec& spec, PageAllocator* allocator)
    : spec_(spec),
      allocator_(allocator ? allocator : &host_allocator()),
      k_row_bytes_(kv_row_bytes(spec.k_type, spec.head_dim)),
      v_row_bytes_(kv_row_bytes(spec.v_type, spec.head_dim)),
      layers_(size_t(spec.n_layers)) {}

KvCache::~KvCache() {
  for (Layer& L : layers_) release_pages(L, 0);
}

void KvCache::release_pages(Layer& L, size_t keep) {
  while (L.pages.size() > keep) {
    allocator_->release(L.pages.back());
    L.pages.pop_back();
  }
}

KvLayerView KvCache::grow(int64_t layer, int64_t T) {
  Layer& L = layers_[size_t(layer)];
  const size_t need = size_t((L.length + T + spec_.page_tokens - 1) / spec_.page_tokens);
  while (L.pages.size() < need) L.pages.push_back(allocator_->allocate(page_bytes()));
  L.length += T;
  return view(layer);
}

size_t KvCache::page_bytes() const {
  return size_t(spec_.n_kv_heads * spec_.page_tokens) * (k_row_bytes_ + v_row_bytes_);
}

void KvCache::append(int64_t layer, const float* k, const float* v, int64_t T) {
  assert(allocator_->host_accessible());
  const int64_t hd = spec_.head_dim, nkv = spec_.n_kv_heads, pos0 = length(layer);
  const KvLayerView view = grow(layer, T);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = pos0 + t;
    for (int64_t h = 0; h < nkv; ++h) {
      encode_kv_row(spec_.k_type, k + (t * nkv + h) * hd, const_cast<uint8_t*>(view.k_row(h, pos)), hd);
      encode_kv_row(spec_.v_type, v + (t * nkv + h) * hd, const_cast<uint8_t*>(view.v_row(h, pos)), hd);
    }
  }
}

void KvCache::truncate(int64_t length) {
  for (Layer& L : layers_) {
    if (L.length <= length) continue;
    L.length = length;
    release_pages(L, size_t((length + spec_.page_tokens - 1) / spec_.page_tokens));
  }
}

bool KvCache::tile_to(int64_t length) {
  if (layers_.empty()) return true;
  const int64_t base = layers_[0].length;
  for (const Layer& L : layers_)
    if (L.length != base) return false;
  if (base <= 0 || base % spec_.page_tokens != 0 || length < base) return false;
  const size_t n = size_t(base / spec_.page_tokens);
  for (int64_t l = 0; l < spec_.n_layers; ++l) {
    grow(l, length - base);
    Layer& L = layers_[size_t(l)];
    for (size_t p = n; p < L.pages.size(); ++p) allocator_->copy(L.pages[p], L.pages[p % n], page_bytes());
  }
  return true;
}

KvLayerView KvCache::view(int64_t layer) const {
  const Layer& L = layers_[size_t(layer)];
  KvLayerView v;
  v.pages = L.pages.data();
  v.n_pages = int64_t(L.pages.size());
  v.length = L.length;
  v.page_tokens = spec_.page_tokens;
  v.n_kv_heads = spec_.n_kv_heads;
  v.head_dim = spec_.head_dim;
  v.k_type = spec_.k_type;
  v.v_type = spec_.v_type;
  v.k_row_bytes = k_row_bytes_;
  v.v_row_bytes = v_row_bytes_;
  return v;
}

size_t KvCache::bytes_per_token() const {
  return size_t(spec_.n_layers * spec_.n_kv_heads) * (k_row_bytes_ + v_row_bytes_);
}

size_t KvCache::bytes_allocated() const {
  size_t n = 0;
  for (const Layer& L : layers_) n += L.pages.size() * page_bytes();
  return n;
}

void KvCache::copy_pages_from(const KvCache& src) {
  assert(src.spec_.n_layers == spec_.n_layers && src.page_bytes() == page_bytes() &&
         src.spec_.page_tokens == spec_.page_tokens);
  clear();
  // The device side copies (its copy reads and writes host memory too).
  PageAllocator& by = allocator_->host_accessible() ? *src.allocator_ : *allocator_;
  for (int64_t l = 0; l < spec_.n_layers; ++l) {
    const Layer& S = src.layers_[size_t(l)];
    grow(l, S.length);
    for (size_t p = 0; p < S.pages.size(); ++p) by.copy(layers_[size_t(l)].pages[p], S.pages[p], page_bytes());
  }
}

void KvCache::assign_from(const KvCache& src) {
  if (!allocator_->host_accessible() || !src.allocator_->host_accessible()) {
    // A device cache on either side: same format page by page, else through host copies
    // (rows re-encoded on the host exactly as below).
    if (src.spec_.k_type == spec_.k_type && src.spec_.v_type == spec_.v_type &&
        src.spec_.page_tokens == spec_.page_tokens) {
      copy_pages_from(src);
      return;
    }
    KvCache host_src(src.spec_), host_dst(spec_);
    host_src.copy_pages_from(src);
    host_dst.assign_from(host_src);
    copy_pages_from(host_dst);
    return;
  }
  assert(src.spec_.n_layers == spec_.n_layers && src.spec_.n_kv_heads == spec_.n_kv_heads &&
         src.spec_.head_dim == spec_.head_dim);
  clear();
  const int64_t hd = spec_.head_dim, nkv = spec_.n_kv_heads;
  std::vector<float> row(static_cast<size_t>(hd));
  for (int64_t l = 0; l < spec_.n_layers; ++l) {
    const KvLayerView s = src.view(l);
    const KvLayerView d = grow(l, s.length);
    for (int64_t pos = 0; pos < s.length; ++pos) {
      for (int64_t h = 0; h < nkv; ++h) {
        for (int kv = 0; kv < 2; ++kv) {
          const uint8_t* in = kv == 0 ? s.k_row(h, pos) : s.v_row(h, pos);
          uint8_t* out = const_cast<uint8_t*>(kv == 0 ? d.k_row(h, pos) : d.v_row(h, pos));
          const DType st = kv == 0 ? s.k_type : s.v_type, dt = kv == 0 ? d.k_type : d.v_type;
          if (st == dt) {
            std::memcpy(out, in, kv == 0 ? k_row_bytes_ : v_row_bytes_);
          } else {
            decode_kv_row(st, in, row.data(), hd);
            encode_kv_row(dt, row.data(), out, hd);
          }
        }
      }
    }
  }
}

}  // namespace weft
