// Scheduler: continuous batching of generation requests over one Engine, for `weft serve` and
// `weft chat`. It owns N slots (--parallel); each slot is an Engine sequence plus its PrefixCache.
// One thread (run by the scheduler itself) steps the engine:
//
//   loop:  drop cancelled requests (their slots are free at once)
//          admit queued requests into idle slots: the slot whose cache shares the longest
//            reusable prefix (least recently used otherwise), rewound to it (ModelState::rewind)
//          prefill: one Engine::prefill call of at most prefill_chunk rows over the prompts
//            still prefilling, so a long prompt advances a chunk per step and never stalls the
//            sequences that are decoding
//          decode: one Engine::decode call for every decoding slot; sample; emit text
//
// Sequences join and leave between steps. Strict tier: every sequence's tokens equal those of
// a cold single-sequence run (batch invariance of Engine + the reuse rule of prefix_cache.h).
// Thread safety: submit(), stats() and shutdown() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/prefix_cache.h"
#include "engine/sampler.h"
#include "io/tokenizer.h"

namespace weft {

struct SchedulerOptions {
  int parallel = 1;              // slots decoding together
  int max_queue = 64;            // requests waiting for a slot; more are refused (503)
  int64_t ctx = 4096;            // tokens one slot may hold (prompt + generated)
  int64_t prefill_chunk = 512;   // prefill rows per step (rounded up to a multiple of kPrefillChunk)
  int max_checkpoints = 8;       // GDN checkpoints kept per slot
  KvOptions kv;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplerOptions sampling;
  int64_t max_tokens = 256;
  std::vector<std::string> stop;  // stop strings (not part of the returned text)
  bool ignore_eos = false;
  int top_logprobs = -1;          // -1: no logprobs; 0..20: the chosen token's and this many more
  // Test scripting (weft serve --test-reply): these tokens are emitted instead of sampled ones
  // (the model still runs on them), then the reply ends as at an end-of-sequence token.
  std::vector<int32_t> forced;
  bool reuse_prefix = true;  // false: a cold run (no prefix reuse), e.g. to compare with
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

// What a request produced since the last event. The final one has done = true.
struct GenerationEvent {
  std::string text;                   // new text: whole UTF-8 characters, stop strings held back
  std::vector<TokenLogprob> logprobs;  // one per token generated since the last event
  bool done = false;
  std::string finish_reason;          // "stop", "length", "cancelled" or "error" (when done)
  std::string error;
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
};

class GenerationHandle {
 public:
  // Moves the pending events into *out; waits up to `timeout` when there are none. False when
  // nothing arrived in time.
  bool next(std::vector<GenerationEvent>* out, std::chrono::milliseconds timeout);
  // The client went away: the scheduler drops the request at its next step and frees its slot.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  void push(GenerationEvent e);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenerationEvent> events_;
  std::atomic<bool> cancelled_{false};
};

struct SchedulerStats {
  int64_t requests_total = 0, requests_cancelled = 0, requests_rejected = 0;
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  int64_t queue_depth = 0, active = 0, slots = 0;
  double decode_seconds = 0, prefill_seconds = 0;
  int64_t decoded_rows = 0, prefilled_rows = 0;
  size_t k_bytes = 0, v_bytes = 0, checkpoint_bytes = 0;
  std::string k_type, v_type;
};

enum class SubmitCode { kOk, kQueueFull, kInvalid, kShuttingDown };
struct Submitted {
  SubmitCode code = SubmitCode::kOk;
  std::string message;
  std::shared_ptr<GenerationHandle> handle;
};

class Scheduler {
 public:
  // eos: ids that end a reply. tokenizer may be null (text stays empty; ids only).
  Scheduler(Engine& engine, const Tokenizer* tokenizer, std::vector<int32_t> eos, const SchedulerOptions& options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  Submitted submit(GenerationRequest request);
  // Stops taking requests; drain: finishes those queued and running; else cancels them. Blocks
  // until the scheduler thread has exited.
  void shutdown(bool drain);
  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Job;
  struct Slot;
  void loop();
  bool step();  // one prefill and/or decode step; false when there was nothing to do
  void admit_locked();
  void finish(Slot& slot, const std::string& reason, const std::string& error = "");
  void forget(Slot& slot);
  // Samples from slot.logits, emits; returns false when the reply ended.
  bool take_token(Slot& slot);
  void refresh_stats_locked();

  Engine& engine_;
  const Tokenizer* tokenizer_;
  std::vector<int32_t> eos_;
  SchedulerOptions options_;
  std::vector<std::unique_ptr<Slot>> slots_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Job>> queue_;
  bool stopping_ = false, drain_ = true;
  SchedulerStats stats_;
  uint64_t clock_ = 0;  // LRU ticks
  std::thread thread_;
  std::mutex join_mu_;  // shutdown() may be called from two threads (drain, then cancel)
};

// log-softmax of the chosen token and the k most likely (ids ascending on ties).
TokenLogprob token_logprob(const float* logits, int64_t vocab, int32_t chosen, int k);

}  // namespace weft
