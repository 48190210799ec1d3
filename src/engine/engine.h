// Engine: several sequences of one model decoded together — the unit a server batches users
// with and speculation verifies drafts with. Sequences are added, stepped and retired; every
// call runs the listed sequences' rows in as few forward calls as possible, so each weight is
// read once per call whatever the number of sequences.
//
// Strict tier guarantees (tests/batch_test.cpp):
//   * batch invariance: a sequence's logits and tokens are bit-identical whatever else is in
//     its batch (alone, or beside any other sequences, in any order);
//   * decode()/verify() rows equal single steps bit for bit;
//   * prefill() splits a prompt only at multiples of kPrefillChunk, so its results equal a
//     Session's feed() of the same prompt.
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>

#include "backend/backend_factory.h"
#include "core/thread_pool.h"
#include "core/status.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/state.h"

namespace weft {

struct EngineOptions {
  int threads = 0;              // 0: one per hardware thread
  // Rows per prefill forward call, rounded up to a multiple of kPrefillChunk; 0: sized by memory
  // (prefill_rows_for_model). Results do not depend on it.
  int64_t prefill_batch = 0;
  // Where the forward pass runs (commands check_device first). Last, so positional
  // initialisers written before it keep their meaning.
  Device device = Device::kCpu;
};

using SeqId = int64_t;

struct PrefillInput {
  SeqId seq = 0;
  const int32_t* ids = nullptr;
  int64_t n = 0;
  float* last_logits = nullptr;  // [V] of the last prompt token (optional)
};

struct DecodeInput {
  SeqId seq = 0;
  int32_t token = 0;
  float* logits = nullptr;  // [V] next-token logits (optional)
};

class Engine {
 public:
  Engine(const Model& model, const EngineOptions& options);

  const Model& model() const { return model_; }
  Backend& backend() { return *backend_; }
  // Binds the model's weights to the backend now (the first forward call would otherwise: a CPU
  // backend copies them onto huge pages, a GPU uploads them), so timings after it are the work's.
  Status bind_weights();
  int threads() const { return backend_->threads(); }

  SeqId add(const KvOptions& kv);
  // Frees the sequence's KV pages and state; unknown ids are ignored.
  void retire(SeqId seq);
  bool has(SeqId seq) const { return seqs_.count(seq) != 0; }
  ModelState& state(SeqId seq) { return *seqs_.at(seq); }
  int64_t size() const { return int64_t(seqs_.size()); }

  // Feeds each input's tokens to its sequence. Rows of several sequences share forward calls of
  // up to prefill_batch rows; each sequence's prompt is cut only at multiples of kPrefillChunk.
  // progress (optional) is called after every forward call with (rows done, rows in all).
  Status prefill(std::span<const PrefillInput> inputs,
                 const std::function<void(int64_t done, int64_t total)>& progress = nullptr);
  // One token for each listed sequence, all in one forward call.
  Status decode(std::span<const DecodeInput> inputs);
  // n rows of one sequence in one call with decode numerics; logits [n, V] equal n decode steps.
  Status verify(SeqId seq, const int32_t* ids, int64_t n, float* logits);

 private:
  Result<ModelState*> find(SeqId seq);

  const Model& model_;
  EngineOptions options_;
  std::unique_ptr<Backend> backend_;
  std::map<SeqId, std::unique_ptr<ModelState>> seqs_;
  SeqId next_id_ = 1;
};

}  // namespace weft
