#include "engine/engine.h"

#include <algorithm>
#include <vector>

#include "model/forward.h"

namespace weft {

Engine::Engine(const Model& model, const EngineOptions& options)
    : model_(model), options_(options), backend_(make_backend_or_throw({options.device, options.threads})) {
  if (options_.prefill_batch <= 0) options_.prefill_batch = prefill_rows_for_model(model);
  options_.prefill_batch =
      std::max<int64_t>(1, (options_.prefill_batch + kPrefillChunk - 1) / kPrefillChunk) * kPrefillChunk;
}

SeqId Engine::add(const KvOptions& kv) {
  const SeqId id = next_id_++;
  seqs_.emplace(id, std::make_unique<ModelState>(model_.config(), kv, &backend_->allocator()));
  return id;
}

void Engine::retire(SeqId seq) { seqs_.erase(seq); }

Result<ModelState*> Engine::find(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return Status::error("unknown sequence id " + std::to_string(seq));
  return it->second.get();
}

Status Engine::prefill(std::span<const PrefillInput> inputs,
                       const std::function<void(int64_t, int64_t)>& progress) {
  struct Pending {
    ModelState* state;
    const PrefillInput* in;
    int64_t done;
  };
  // Everything is checked before the first call, so a bad input changes no sequence.
  const int64_t V = model_.config().vocab_size;
  std::vector<Pending> pending;
  int64_t total = 0, done = 0;
  for (const PrefillInput& in : inputs) {
    auto st = find(in.seq);
    if (!st.ok()) return st.status();
    for (const Pending& p : pending)
      if (p.state == st.value()) return Status::error("prefill: sequence " + std::to_string(in.seq) + " listed twice");
    WEFT_RETURN_IF_ERROR(check_token_ids(in.ids, in.n, V));
    if (in.n > 0) pending.push_back({st.value(), &in, 0});
    total += in.n;
  }
  std::vector<SequenceRows> batch;
  while (!pending.empty()) {
    // Fill one call of up to prefill_batch rows, sequences in input order; a sequence that does
    // not finish in this call contributes a multiple of kPrefillChunk rows.
    batch.clear();
    int64_t budget = options_.prefill_batch;
    for (Pending& p : pending) {
      const int64_t left = p.in->n - p.done;
      int64_t take = std::min(left, budget);
      if (take < left) take -= take % kPrefillChunk;
      if (take <= 0) continue;
      SequenceRows rows;
      rows.state = p.state;
      rows.ids = p.in->ids + p.done;
      rows.n = take;
      if (take == left && p.in->last_logits) rows.logits = p.in->last_logits;
      batch.push_back(rows);
      budget -= take;
    }
    WEFT_RETURN_IF_ERROR(forward(model_, *backend_, std::span<const SequenceRows>(batch)));
    size_t b = 0;
    for (Pending& p : pending)
      if (b < batch.size() && batch[b].state == p.state) {
        p.done += batch[b].n;
        done += batch[b++].n;
      }
    if (progress) progress(done, total);
    std::erase_if(pending, [](const Pending& p) { return p.done == p.in->n; });
  }
  return Status();
}

Status Engine::decode(std::span<const DecodeInput> inputs) {
  std::vector<SequenceRows> batch;
  batch.reserve(inputs.size());
  for (const DecodeInput& in : inputs) {
    auto st = find(in.seq);
    if (!st.ok()) return st.status();
    SequenceRows rows;
    rows.state = st.value();
    rows.ids = &in.token;
    rows.n = 1;
    rows.numerics = RowNumerics::kDecode;
    rows.logits = in.logits;
    batch.push_back(rows);
  }
  return forward(model_, *backend_, std::span<const SequenceRows>(batch));
}

Status Engine::verify(SeqId seq, const int32_t* ids, int64_t n, float* logits) {
  auto st = find(seq);
  if (!st.ok()) return st.status();
  SequenceRows rows;
  rows.state = st.value();
  rows.ids = ids;
  rows.n = n;
  rows.numerics = RowNumerics::kDecode;
  rows.logits = logits;
  rows.all_logits = true;
  return forward(model_, *backend_, rows);
}

Status Engine::bind_weights() { return bind_model_weights(model_, *backend_); }

}  // namespace weft
