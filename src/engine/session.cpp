#include "engine/session.h"

#include <algorithm>

#include "model/forward.h"

namespace weft {

Session::Session(const Model& model, const SessionOptions& options)
    : model_(model), options_(options), backend_(make_backend_or_throw({options.device, options.threads})),
      state_(model.config(), options.kv, &backend_->allocator()) {
  if (options_.batch <= 0) options_.batch = prefill_rows_for_model(model);
  options_.batch = std::max<int64_t>(1, (options_.batch + kPrefillChunk - 1) / kPrefillChunk) * kPrefillChunk;
}

Status Session::feed(const int32_t* ids, int64_t n, float* all_logits, float* last_logits) {
  const int64_t V = model_.config().vocab_size;
  WEFT_RETURN_IF_ERROR(check_token_ids(ids, n, V));  // all of them before the first call changes anything
  for (int64_t done = 0; done < n;) {
    SequenceRows rows;
    rows.state = &state_;
    rows.ids = ids + done;
    rows.n = std::min(options_.batch, n - done);
    if (all_logits) {
      rows.logits = all_logits + done * V;
      rows.all_logits = true;
    } else if (last_logits && done + rows.n == n) {
      rows.logits = last_logits;
    }
    WEFT_RETURN_IF_ERROR(forward(model_, *backend_, rows));
    done += rows.n;
  }
  if (all_logits && last_logits && n > 0) std::copy(all_logits + (n - 1) * V, all_logits + n * V, last_logits);
  return Status();
}

Status Session::feed_with_progress(const int32_t* ids, int64_t n, float* all_logits, float* last_logits,
                                  int64_t every, const std::function<void(int64_t, int64_t)>& progress) {
  // Slices are whole multiples of the batch, so the forward calls are the same as feed()'s.
  const int64_t slice = std::max<int64_t>(1, every / options_.batch) * options_.batch;
  const int64_t V = model_.config().vocab_size;
  for (int64_t done = 0; done < n;) {
    const int64_t m = std::min(slice, n - done);
    const bool last = done + m == n;
    WEFT_RETURN_IF_ERROR(feed(ids + done, m, all_logits ? all_logits + done * V : nullptr, last ? last_logits : nullptr));
    done += m;
    if (progress) progress(done, n);
  }
  return Status();
}

Status Session::step(int32_t id, float* logits) {
  SequenceRows rows;
  rows.state = &state_;
  rows.ids = &id;
  rows.n = 1;
  rows.numerics = RowNumerics::kDecode;
  rows.logits = logits;
  return forward(model_, *backend_, rows);
}

Status Session::verify(const int32_t* ids, int64_t n, float* logits) {
  SequenceRows rows;
  rows.state = &state_;
  rows.ids = ids;
  rows.n = n;
  rows.numerics = RowNumerics::kDecode;
  rows.logits = logits;
  rows.all_logits = true;
  return forward(model_, *backend_, rows);
}

Status Session::bind_weights() { return bind_model_weights(model_, *backend_); }

}  // namespace weft
