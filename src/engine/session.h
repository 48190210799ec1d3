// Session: one sequence being decoded — a model (shared, immutable), a backend (its scratch
// memory and threads) and the sequence's state (KV pages + GDN state). Prefill runs in calls of
// `batch` tokens (a multiple of kPrefillChunk, so results do not depend on it); decode runs one
// token at a time. Several sequences decoded together: see engine/engine.h.
// Thread safety: a session is used by one thread at a time; many sessions may share a Model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "backend/backend_factory.h"
#include "core/thread_pool.h"
#include "core/status.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/state.h"

namespace weft {

struct SessionOptions {
  KvOptions kv;
  int threads = 0;        // 0: one per hardware thread
  // Prefill tokens per forward call, rounded up to a multiple of kPrefillChunk; 0: sized by
  // memory (prefill_rows_for_model). Results do not depend on it.
  int64_t batch = 0;
  // Where the forward pass runs (commands check_device first). Last, so positional
  // initialisers written before it keep their meaning.
  Device device = Device::kCpu;
};

class Session {
 public:
  Session(const Model& model, const SessionOptions& options);

  const Model& model() const { return model_; }
  int64_t position() const { return state_.position(); }
  // Prefill tokens per forward call: SessionOptions::batch rounded up to a multiple of
  // kPrefillChunk. Callers that slice a prompt themselves slice by this to keep results identical.
  int64_t batch() const { return options_.batch; }
  ModelState& state() { return state_; }
  ThreadPool& pool() { return backend_->pool(); }
  Backend& backend() { return *backend_; }
  // Binds the model's weights to the backend now (the first forward call would otherwise: a CPU
  // backend copies them onto huge pages, a GPU uploads them), so timings after it are the work's.
  Status bind_weights();

  // Feeds `n` tokens (prefill or teacher forcing). all_logits (if non-null) receives [n, V]
  // logits of every position; last_logits (if non-null) receives the [V] logits of the last.
  Status feed(const int32_t* ids, int64_t n, float* all_logits, float* last_logits);
  // As feed(), calling progress(done, n) after every slice of about `every` tokens (for long
  // prompts: the CLI prints a progress line). Results are identical to feed().
  Status feed_with_progress(const int32_t* ids, int64_t n, float* all_logits, float* last_logits, int64_t every,
                            const std::function<void(int64_t done, int64_t total)>& progress);
  // One decode step: feeds `id` and writes the next-token logits [V].
  Status step(int32_t id, float* logits);
  // k+1 rows of this sequence in one forward call with decode numerics (speculative verify):
  // logits [n, V] equal, bit for bit, those of n calls to step().
  Status verify(const int32_t* ids, int64_t n, float* logits);
  void reset() { state_.reset(); }

 private:
  const Model& model_;
  SessionOptions options_;
  std::unique_ptr<Backend> backend_;
  ModelState state_;
};

}  // namespace weft
