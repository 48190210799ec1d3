#include "engine/prefix_cache.h"

#include <algorithm>

namespace weft {

int64_t PrefixCache::common_prefix(std::span<const int32_t> prompt) const {
  const size_t n = std::min(prompt.size(), tokens_.size());
  size_t i = 0;
  while (i < n && tokens_[i] == prompt[i]) ++i;
  return int64_t(i);
}

int64_t PrefixCache::reusable(std::span<const int32_t> prompt) const {
  const int64_t limit = std::min<int64_t>(common_prefix(prompt), int64_t(prompt.size()) - 1);
  if (limit <= 0) return 0;
  auto it = checkpoints_.upper_bound(limit);  // first checkpoint past the limit
  if (it == checkpoints_.begin()) return 0;
  return std::prev(it)->first;
}

void PrefixCache::checkpoint(const RecurrentState& state) {
  const int64_t at = int64_t(tokens_.size());
  if (at == 0) return;  // position 0 is the reset state: nothing to keep
  auto& slot = checkpoints_[at];
  if (!slot) slot = std::make_unique<RecurrentState>(state.spec());
  slot->assign_from(state);
  while (max_checkpoints_ > 0 && checkpoints_.size() > size_t(max_checkpoints_)) checkpoints_.erase(checkpoints_.begin());
}

const RecurrentState* PrefixCache::checkpoint_at(int64_t position) const {
  auto it = checkpoints_.find(position);
  return it == checkpoints_.end() ? nullptr : it->second.get();
}

void PrefixCache::truncate(int64_t position) {
  if (position < int64_t(tokens_.size())) tokens_.resize(size_t(std::max<int64_t>(position, 0)));
  checkpoints_.erase(checkpoints_.upper_bound(position), checkpoints_.end());
}

size_t PrefixCache::checkpoint_bytes() const {
  size_t b = 0;
  for (const auto& [pos, s] : checkpoints_) b += s->bytes();
  return b;
}

}  // namespace weft
