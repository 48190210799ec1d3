// The forward pass of every supported decoder over a batch of rows from one or more sequences:
// embed, then one loop over layers whose kind (gated full attention or Gated DeltaNet; dense or
// MoE FFN) was fixed at weight binding, then the final norm and the output head. Written against
// the Backend interface (src/backend/backend.h); reads top to bottom in forward.cpp.
//
// A batch is a list of SequenceRows: some consecutive tokens of one sequence each. Matrix
// products run once over all rows of the batch (each weight is read once per call, whatever the
// number of sequences), MoE routes the whole batch at once, while attention and the GDN
// recurrence run per sequence on that sequence's KV pages and recurrent state.
//
// Strict tier (f16 KV): every output row is computed with arithmetic that depends only on its
// own sequence — not on the thread count nor on the other rows in the batch. Two numerics exist
// for a sequence's rows:
//   * decode (kDecode): n rows give exactly the bits of n single-token steps (decode of N users,
//     and the k+1-row verify of speculation);
//   * prefill (kPrefill): the GDN recurrence may run in its chunked form, chunks counted from the
//     first row of the call, so a prompt fed in calls whose sizes are multiples of the prefill
//     chunk (kPrefillChunk) gives the same bits however it is split.
#pragma once

#include <cstdint>
#include <span>

#include "backend/backend.h"
#include "core/status.h"
#include "model/model.h"
#include "model/state.h"

namespace weft {

// Splits of a prompt at multiples of this many tokens give identical prefill results.
constexpr int64_t kPrefillChunk = 64;

enum class RowNumerics { kPrefill, kDecode };

// Prefill rows per forward call sized by memory: as many as keep the forward pass's scratch
// (activations, projections, MoE slots) within `budget_bytes`, a multiple of kPrefillChunk in
// [kPrefillChunk, 4096]. Bigger calls read each weight (and each MoE expert) fewer times per
// prompt; the result does not depend on the size (split invariance).
int64_t prefill_rows_for_memory(const ModelConfig& config, int64_t budget_bytes = int64_t(1) << 30);
// The engine's choice for a model: prefill_rows_for_memory with the budget capped at the model's
// weight bytes (at least 64 MiB). A call only has to be large enough to amortise one pass over
// the weights; for a model smaller than the 1 GiB budget, larger calls only touch more fresh
// scratch and push activations out of cache (the shipped 39 MiB model: 4096-row calls were 0.89x
// the speed of 1408-row ones on a 4096-token prompt, docs/results.md 8.10).
int64_t prefill_rows_for_model(const Model& model);

struct SequenceRows {
  ModelState* state = nullptr;  // the sequence: its rows sit at positions [state->position(), + n)
  const int32_t* ids = nullptr;  // host
  int64_t n = 0;
  RowNumerics numerics = RowNumerics::kPrefill;
  // Host output: logits of every row ([n, V]) when all_logits, else of the last row ([V]); null
  // computes none for this sequence.
  float* logits = nullptr;
  bool all_logits = false;
};

// An error naming the first id outside [0, vocab), if any.
Status check_token_ids(const int32_t* ids, int64_t n, int64_t vocab);

// Binds the model's weights to the backend if they are not bound yet (what forward() does on its
// first call): a CPU backend copies them onto huge pages, a GPU uploads them. Callers that time
// their first forward call bind first, so the one-time cost is not counted as prefill.
Status bind_model_weights(const Model& model, Backend& be);

// Runs every sequence's rows and advances each state by its n. Fails, changing nothing, on a
// token id outside the vocabulary, a sequence listed twice, or a --kv-rotate the model cannot take.
Status forward(const Model& model, Backend& backend, std::span<const SequenceRows> batch);

// One sequence (the common case).
Status forward(const Model& model, Backend& backend, const SequenceRows& rows);

}  // namespace weft
