// PrefixCache: what one server slot remembers of its last conversation so that the next request
// extending it prefills only what is new — the token ids its sequence holds and copies of the
// GDN state (RecurrentState) at prefill boundaries. KV rows need no copy: ModelState::rewind
// truncates them, and the GDN state, which cannot be truncated, is restored from a checkpoint.
//
// The reuse rule (strict tier, f16/f32 KV): a checkpoint is taken only at positions that are
// multiples of kPrefillChunk and were reached by prefill (never by decode), and reuse starts from
// such a checkpoint. Why: decode rows (RowNumerics::kDecode) differ from prefill rows in the last
// bits, and prefill is split-invariant only at multiples of kPrefillChunk, so resuming anywhere
// else would not equal a cold run bit for bit. The quantized tier also checkpoints the end of each
// prompt, which may reuse a little more at the price of split-dependent last bits.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "cache/recurrent_state.h"

namespace weft {

class PrefixCache {
 public:
  explicit PrefixCache(int max_checkpoints = 8) : max_checkpoints_(max_checkpoints) {}

  // Ids held by the sequence, in order (prompt rows and fed generated tokens).
  const std::vector<int32_t>& tokens() const { return tokens_; }
  void push(int32_t id) { tokens_.push_back(id); }
  void push(std::span<const int32_t> ids) { tokens_.insert(tokens_.end(), ids.begin(), ids.end()); }

  // The longest prefix of `prompt` this cache can resume from: the largest checkpoint position p
  // with tokens()[0, p) == prompt[0, p) and p < prompt.size() (one token at least is left to
  // prefill, for the logits of the last). 0 when nothing is reusable (a cold start).
  int64_t reusable(std::span<const int32_t> prompt) const;
  // Common prefix length of tokens() and prompt (for slot choice: ties broken by recency).
  int64_t common_prefix(std::span<const int32_t> prompt) const;

  // Saves `state` as the checkpoint at tokens().size(). Over max_checkpoints, the lowest position
  // is dropped (the newest matter most to a growing conversation).
  void checkpoint(const RecurrentState& state);
  const RecurrentState* checkpoint_at(int64_t position) const;
  // Forgets every token and checkpoint past `position` (after ModelState::rewind to it).
  void truncate(int64_t position);
  void clear() { truncate(0); }
  size_t checkpoint_bytes() const;
  size_t checkpoints() const { return checkpoints_.size(); }

 private:
  int max_checkpoints_;
  std::vector<int32_t> tokens_;
  std::map<int64_t, std::unique_ptr<RecurrentState>> checkpoints_;
};

}  // namespace weft
