#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "cache/kv_cache.h"
#include "model/forward.h"

namespace weft {

bool GenerationHandle::next(std::vector<GenerationEvent>* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (events_.empty()) cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  if (events_.empty()) return false;
  for (auto& e : events_) out->push_back(std::move(e));
  events_.clear();
  return true;
}

void GenerationHandle::push(GenerationEvent e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

TokenLogprob token_logprob(const float* logits, int64_t vocab, int32_t chosen, int k) {
  float m = logits[0];
  for (int64_t i = 1; i < vocab; ++i) m = std::max(m, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - double(m));
  const double lse = double(m) + std::log(sum);
  TokenLogprob t;
  t.id = chosen;
  t.logprob = float(double(logits[chosen]) - lse);
  if (k > 0) {
    k = int(std::min<int64_t>(k, vocab));
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) ids[size_t(i)] = int32_t(i);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int i = 0; i < k; ++i) t.top.emplace_back(ids[size_t(i)], float(double(logits[ids[size_t(i)]]) - lse));
  }
  return t;
}

struct Scheduler::Job {
  GenerationRequest req;
  std::shared_ptr<GenerationHandle> handle;
};

struct Scheduler::Slot {
  SeqId seq = 0;
  PrefixCache cache;
  std::unique_ptr<Job> job;  // null: idle (its cache stays for the next request)
  bool decoding = false;     // false: prefilling (when job is set)
  int64_t cursor = 0;        // prompt rows fed
  int64_t cached = 0;        // prompt rows reused from the cache
  std::vector<float> logits;
  std::optional<Sampler> sampler;
  std::optional<StreamDecoder> decoder;
  int32_t pending = 0;  // sampled, to be fed by the next decode step
  int64_t generated = 0;
  std::string text;
  size_t emitted = 0;
  std::vector<TokenLogprob> logprobs;
  uint64_t last_used = 0, admitted = 0;
  explicit Slot(int max_checkpoints) : cache(max_checkpoints) {}
};

Scheduler::Scheduler(Engine& engine, const Tokenizer* tokenizer, std::vector<int32_t> eos, const SchedulerOptions& options)
    : engine_(engine), tokenizer_(tokenizer), eos_(std::move(eos)), options_(options) {
  options_.parallel = std::max(1, options_.parallel);
  options_.prefill_chunk = std::max<int64_t>(1, (options_.prefill_chunk + kPrefillChunk - 1) / kPrefillChunk) * kPrefillChunk;
  for (int i = 0; i < options_.parallel; ++i) {
    auto slot = std::make_unique<Slot>(options_.max_checkpoints);
    slot->seq = engine_.add(options_.kv);
    slot->logits.resize(size_t(engine_.model().config().vocab_size));
    slots_.push_back(std::move(slot));
  }
  stats_.slots = options_.parallel;
  stats_.k_type = dtype_name(options_.kv.k_type);
  stats_.v_type = dtype_name(options_.kv.v_type);
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { shutdown(false); }

Submitted Scheduler::submit(GenerationRequest request) {
  Submitted r;
  const int64_t P = int64_t(request.prompt.size());
  const int64_t V = engine_.model().config().vocab_size;
  if (P == 0) return {SubmitCode::kInvalid, "the prompt is empty", nullptr};
  if (P + 1 > options_.ctx)
    return {SubmitCode::kInvalid,
            "the prompt has " + std::to_string(P) + " tokens; this server's context is " + std::to_string(options_.ctx) +
                " tokens per sequence (--ctx)",
            nullptr};
  for (int32_t id : request.prompt)
    if (id < 0 || id >= V) return {SubmitCode::kInvalid, "token id " + std::to_string(id) + " is outside the vocabulary", nullptr};
  if (request.max_tokens < 1) return {SubmitCode::kInvalid, "max_tokens must be at least 1", nullptr};
  auto job = std::make_unique<Job>();
  job->req = std::move(request);
  job->handle = std::make_shared<GenerationHandle>();
  r.handle = job->handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return {SubmitCode::kShuttingDown, "the server is shutting down", nullptr};
    // Requests that will wait for a slot: those queued beyond the slots now idle (a request that
    // arrives while a slot is idle is not waiting, even before the loop has admitted it).
    const int64_t idle = std::max<int64_t>(0, int64_t(options_.parallel) - stats_.active);
    if (int64_t(queue_.size()) >= options_.max_queue + idle) {
      ++stats_.requests_rejected;
      return {SubmitCode::kQueueFull, "the request queue is full (" + std::to_string(options_.max_queue) + " waiting); retry later", nullptr};
    }
    queue_.push_back(std::move(job));
    ++stats_.requests_total;
    stats_.queue_depth = int64_t(queue_.size());
  }
  cv_.notify_all();
  return r;
}

void Scheduler::shutdown(bool drain) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) drain_ = drain;
    if (!drain) drain_ = false;
    stopping_ = true;
  }
  cv_.notify_all();
  std::lock_guard<std::mutex> lock(join_mu_);
  if (thread_.joinable() && std::this_thread::get_id() != thread_.get_id()) thread_.join();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Scheduler::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stopping_ && !drain_) {
        for (auto& job : queue_) {
          GenerationEvent e;
          e.done = true;
          e.finish_reason = "cancelled";
          e.prompt_tokens = int64_t(job->req.prompt.size());
          job->handle->push(std::move(e));
        }
        queue_.clear();
        for (auto& s : slots_)
          if (s->job) finish(*s, "cancelled");
      }
      const bool busy = std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->job != nullptr; });
      if (!busy && queue_.empty()) {
        if (stopping_) break;
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        continue;
      }
    }
    step();
  }
}

void Scheduler::admit_locked() {
  // Cancelled requests leave first: a waiting one is dropped, a running one frees its slot now.
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((*it)->handle->cancelled()) {
      ++stats_.requests_cancelled;
      GenerationEvent e;  // a waiter on the handle sees its end, as for a running request
      e.done = true;
      e.finish_reason = "cancelled";
      e.prompt_tokens = int64_t((*it)->req.prompt.size());
      (*it)->handle->push(std::move(e));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& s : slots_)
    if (s->job && s->job->handle->cancelled()) {
      ++stats_.requests_cancelled;
      finish(*s, "cancelled");
    }
  while (!queue_.empty()) {
    const std::vector<int32_t>& prompt = queue_.front()->req.prompt;
    Slot* best = nullptr;
    int64_t best_reuse = -1;
    for (auto& s : slots_) {
      if (s->job) continue;
      const int64_t reuse = queue_.front()->req.reuse_prefix ? s->cache.reusable(prompt) : 0;
      if (reuse > best_reuse || (reuse == best_reuse && s->last_used < best->last_used)) {
        best = s.get();
        best_reuse = reuse;
      }
    }
    if (!best) break;
    Slot& s = *best;
    s.job = std::move(queue_.front());
    queue_.pop_front();
    ModelState& state = engine_.state(s.seq);
    if (best_reuse > 0) {
      Status st = state.rewind(best_reuse, *s.cache.checkpoint_at(best_reuse));
      if (!st.ok()) best_reuse = 0;  // cannot happen (the cache mirrors the state); fall back to cold
    }
    if (best_reuse == 0) state.reset();
    s.cache.truncate(best_reuse);
    s.cursor = s.cached = best_reuse;
    s.decoding = false;
    s.generated = 0;
    s.text.clear();
    s.emitted = 0;
    s.logprobs.clear();
    s.sampler.emplace(s.job->req.sampling);
    if (tokenizer_) s.decoder.emplace(*tokenizer_);
    s.admitted = ++clock_;
    ++stats_.active;
    stats_.prompt_tokens += int64_t(s.job->req.prompt.size());
    stats_.cached_tokens += best_reuse;
  }
  stats_.queue_depth = int64_t(queue_.size());
}

void Scheduler::finish(Slot& slot, const std::string& reason, const std::string& error) {
  GenerationEvent e;
  e.done = true;
  e.finish_reason = reason;
  e.error = error;
  e.text = slot.text.substr(std::min(slot.emitted, slot.text.size()));
  e.logprobs = std::move(slot.logprobs);
  e.prompt_tokens = int64_t(slot.job->req.prompt.size());
  e.cached_tokens = slot.cached;
  e.completion_tokens = slot.generated;
  stats_.completion_tokens += slot.generated;
  slot.job->handle->push(std::move(e));
  slot.job.reset();
  slot.logprobs.clear();
  slot.last_used = ++clock_;
  --stats_.active;  // now, not at the end of the step: a client may read /metrics the moment it is done
}

void Scheduler::forget(Slot& slot) {
  // After a failed call the sequence may hold rows its cache does not list: start it afresh.
  engine_.state(slot.seq).reset();
  slot.cache.clear();
}

namespace {

// Length of the longest suffix of `text` that is a proper prefix of a stop string: text that
// must be held back until the next token shows whether a stop string is completed.
size_t stop_holdback(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& s : stops)
    for (size_t n = s.empty() ? 0 : std::min(s.size() - 1, text.size()); n > hold; --n)
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
  return hold;
}

}  // namespace

bool Scheduler::take_token(Slot& slot) {
  const GenerationRequest& req = slot.job->req;
  const int64_t V = engine_.model().config().vocab_size;
  std::string reason;
  int32_t t = 0;
  if (!req.forced.empty()) {
    if (slot.generated < int64_t(req.forced.size())) t = req.forced[size_t(slot.generated)];
    else reason = "stop";
  } else {
    t = slot.sampler->sample(slot.logits.data(), V);
  }
  if (reason.empty()) {
    if (req.top_logprobs >= 0) slot.logprobs.push_back(token_logprob(slot.logits.data(), V, t, req.top_logprobs));
    ++slot.generated;
    const bool eos = !req.ignore_eos && std::find(eos_.begin(), eos_.end(), t) != eos_.end();
    if (eos) {
      reason = "stop";
    } else {
      if (slot.decoder) slot.text += slot.decoder->push(t);
      // A stop string may end inside this token's text: search the part that could hold it.
      size_t longest = 0;
      for (const std::string& s : req.stop) longest = std::max(longest, s.size());
      const size_t from = slot.emitted > longest ? slot.emitted - longest : 0;
      size_t cut = std::string::npos;
      for (const std::string& s : req.stop)
        if (!s.empty()) cut = std::min(cut, slot.text.find(s, from));
      if (cut != std::string::npos) {
        slot.text.resize(cut);
        reason = "stop";
      } else if (slot.generated >= req.max_tokens || int64_t(slot.cache.tokens().size()) >= options_.ctx) {
        reason = "length";
      }
      if (reason == "length" && slot.decoder) slot.text += slot.decoder->flush();
    }
  }
  if (!reason.empty()) {
    finish(slot, reason);
    return false;
  }
  slot.pending = t;
  const size_t safe = slot.text.size() - stop_holdback(slot.text, req.stop);
  if (safe > slot.emitted || !slot.logprobs.empty()) {
    GenerationEvent e;
    if (safe > slot.emitted) e.text = slot.text.substr(slot.emitted, safe - slot.emitted);
    slot.emitted = std::max(slot.emitted, safe);
    e.logprobs = std::move(slot.logprobs);
    slot.logprobs.clear();
    slot.job->handle->push(std::move(e));
  }
  return true;
}

bool Scheduler::step() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    admit_locked();
  }
  const bool strict = options_.kv.k_type == DType::kF16 || options_.kv.k_type == DType::kF32;
  const bool strict_v = options_.kv.v_type == DType::kF16 || options_.kv.v_type == DType::kF32;
  bool worked = false;

  // Prefill: prompts still being fed share one call of at most prefill_chunk rows, oldest first.
  std::vector<Slot*> order;
  for (auto& s : slots_)
    if (s->job && !s->decoding) order.push_back(s.get());
  std::sort(order.begin(), order.end(), [](Slot* a, Slot* b) { return a->admitted < b->admitted; });
  std::vector<PrefillInput> inputs;
  std::vector<Slot*> fed;
  std::vector<int64_t> ends;
  int64_t budget = options_.prefill_chunk;
  for (Slot* s : order) {
    const int64_t P = int64_t(s->job->req.prompt.size());
    int64_t end = std::min(P, s->cursor + budget);
    // Cut at the last multiple of kPrefillChunk inside the prompt too, so a checkpoint lands
    // there: the point the next turn of this conversation resumes from.
    const int64_t last_boundary = P / kPrefillChunk * kPrefillChunk;
    if (last_boundary > s->cursor && last_boundary < end) end = last_boundary;
    if (end < P) end -= end % kPrefillChunk;
    if (end <= s->cursor) continue;
    budget -= end - s->cursor;
    inputs.push_back({s->seq, s->job->req.prompt.data() + s->cursor, end - s->cursor, end == P ? s->logits.data() : nullptr});
    fed.push_back(s);
    ends.push_back(end);
  }
  if (!inputs.empty()) {
    worked = true;
    const auto t0 = std::chrono::steady_clock::now();
    Status st = engine_.prefill(inputs);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int64_t rows = 0;
    for (size_t i = 0; i < fed.size(); ++i) {
      Slot& s = *fed[i];
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        finish(s, "error", st.message());
        forget(s);
        continue;
      }
      const int64_t P = int64_t(s.job->req.prompt.size());
      s.cache.push(std::span<const int32_t>(s.job->req.prompt.data() + s.cursor, size_t(ends[i] - s.cursor)));
      rows += ends[i] - s.cursor;
      s.cursor = ends[i];
      if (s.cursor % kPrefillChunk == 0 || (!(strict && strict_v) && s.cursor == P))
        s.cache.checkpoint(engine_.state(s.seq).recurrent());
      if (s.cursor == P) {
        s.decoding = true;
        std::lock_guard<std::mutex> lock(mu_);
        take_token(s);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    stats_.prefill_seconds += secs;
    stats_.prefilled_rows += rows;
  }

  // Decode: every sequence that has a sampled token to feed, in one call.
  std::vector<DecodeInput> steps;
  std::vector<Slot*> stepped;
  for (auto& s : slots_)
    if (s->job && s->decoding) {
      steps.push_back({s->seq, s->pending, s->logits.data()});
      stepped.push_back(s.get());
    }
  if (!steps.empty()) {
    worked = true;
    const auto t0 = std::chrono::steady_clock::now();
    Status st = engine_.decode(steps);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard<std::mutex> lock(mu_);
    for (Slot* s : stepped) {
      if (!st.ok()) {
        finish(*s, "error", st.message());
        forget(*s);
        continue;
      }
      s->cache.push(s->pending);
      take_token(*s);
    }
    stats_.decode_seconds += secs;
    stats_.decoded_rows += int64_t(steps.size());
  }
  std::lock_guard<std::mutex> lock(mu_);
  refresh_stats_locked();
  return worked;
}

void Scheduler::refresh_stats_locked() {
  int64_t active = 0;
  size_t kv = 0, cp = 0;
  for (auto& s : slots_) {
    if (s->job) ++active;
    kv += engine_.state(s->seq).kv().bytes_allocated();
    cp += s->cache.checkpoint_bytes();
  }
  const int64_t hd = engine_.model().config().head_dim;
  const double kr = double(kv_row_bytes(options_.kv.k_type, hd)), vr = double(kv_row_bytes(options_.kv.v_type, hd));
  stats_.k_bytes = size_t(double(kv) * kr / (kr + vr));
  stats_.v_bytes = kv - stats_.k_bytes;
  stats_.checkpoint_bytes = cp;
  stats_.active = active;
  stats_.queue_depth = int64_t(queue_.size());
}

}  // namespace weft
