// ModelState: everything one sequence carries between forward calls — the paged KV cache of the
// full-attention layers, the recurrent state of the GDN layers, and the position reached.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/recurrent_state.h"
#include "core/status.h"
#include "model/config.h"

namespace weft {

struct KvOptions {
  DType k_type = DType::kF16;  // strict default
  DType v_type = DType::kF16;
  int64_t page_tokens = 256;
  // Opt-in Hadamard rotation of the quantized tier (--kv-rotate): a quantized K cache stores H·k
  // (and queries are rotated alike), a quantized V cache stores H·v (and the attention output is
  // rotated back). f16/f32 caches never rotate, so the strict tier is untouched by this flag.
  bool rotate = false;
  bool rotates_k() const { return rotate && (k_type == DType::kQ8_0 || k_type == DType::kQ4_0); }
  bool rotates_v() const { return rotate && (v_type == DType::kQ8_0 || v_type == DType::kQ4_0); }
};

class ModelState {
 public:
  // KV pages and the GDN state come from `allocator` (the backend's memory; host memory when null).
  ModelState(const ModelConfig& config, const KvOptions& kv, PageAllocator* allocator = nullptr);

  int64_t position() const { return position_; }
  void advance(int64_t n) { position_ += n; }
  // Back to the empty sequence.
  void reset();
  // Becomes a copy of src: its KV rows re-encoded into this state's cache types (see
  // KvCache::assign_from), its GDN state and its position. Rows are rotated or un-rotated when
  // the two states differ in KvOptions::rotates_k / rotates_v.
  void assign_from(const ModelState& src);
  // Rewinds to `position` (0 <= position <= position()): drops KV rows from there on and sets
  // the GDN state to `recurrent`, which must be the state saved at that position. O(GDN state),
  // not O(context). A position outside [0, position()] is an error and changes nothing: there
  // are no cached rows to rewind to.
  Status rewind(int64_t position, const RecurrentState& recurrent);
  // Decode-speed measurement only (`weft bench --tile-fill`): extends the sequence to `position`
  // by repeating its KV pages (KvCache::tile_to); the GDN state stays that of the tokens actually
  // fed. A decode step afterwards reads the bytes of a `position`-token context, but its logits
  // mean nothing. Needs position() to be a positive multiple of the page size, not above
  // `position`; an error otherwise, changing nothing.
  Status tile_to(int64_t position);

  KvCache& kv() { return kv_; }
  const KvCache& kv() const { return kv_; }
  RecurrentState& recurrent() { return recurrent_; }
  const RecurrentState& recurrent() const { return recurrent_; }
  const KvOptions& kv_options() const { return kv_options_; }
  // Index of model layer i inside the KV cache (full attention) or recurrent state (GDN).
  int64_t slot(int64_t layer) const { return slot_[size_t(layer)]; }

 private:
  KvOptions kv_options_;
  KvCache kv_;
  RecurrentState recurrent_;
  std::vector<int64_t> slot_;
  int64_t position_ = 0;
};

KvCacheSpec kv_cache_spec(const ModelConfig& config, const KvOptions& kv);
RecurrentStateSpec recurrent_state_spec(const ModelConfig& config);

}  // namespace weft
