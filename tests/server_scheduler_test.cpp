// The scheduler of `weft serve` (engine/scheduler.h) against cold single-sequence runs on the
// shipped model, strict tier:
//   * continuous batching: requests submitted together (more than slots, odd prompt lengths,
//     greedy and seeded sampling) each give exactly the tokens of a Session run alone;
//   * prefix reuse: a follow-up turn that extends a conversation reuses the last prefill
//     checkpoint (a multiple of 64) and gives the same tokens as a cold run of the whole prompt;
//   * a cancelled request frees its slot; a full queue refuses; bad prompts are refused.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "engine/scheduler.h"
#include "engine/session.h"
#include "test_util.h"

namespace weft {
namespace {

std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, int32_t(vocab - 2));  // the last id is EOS
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& t : ids) t = d(rng);
  return ids;
}

// The reference: one Session, prompt fed whole, then n steps with the same sampler.
std::vector<int32_t> cold_run(const Model& model, const std::vector<int32_t>& prompt, int64_t n,
                              const SamplerOptions& so) {
  SessionOptions opt;
  opt.threads = 2;
  Session s(model, opt);
  std::vector<float> logits(size_t(model.config().vocab_size));
  EXPECT_TRUE(s.feed(prompt.data(), int64_t(prompt.size()), nullptr, logits.data()).ok());
  Sampler sampler(so);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = sampler.sample(logits.data(), model.config().vocab_size);
    out.push_back(t);
    if (i + 1 < n) EXPECT_TRUE(s.step(t, logits.data()).ok());
  }
  return out;
}

struct Reply {
  std::vector<int32_t> ids;
  GenerationEvent last;
};

Reply collect(GenerationHandle& h) {
  Reply r;
  for (;;) {
    std::vector<GenerationEvent> events;
    h.next(&events, std::chrono::milliseconds(1000));
    for (GenerationEvent& e : events) {
      for (const TokenLogprob& t : e.logprobs) r.ids.push_back(t.id);
      if (e.done) {
        r.last = e;
        return r;
      }
    }
  }
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = Model::load(test::source_dir() + "/models/weft-tiny-hybrid");
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::move(m.value());
    EngineOptions eo;
    eo.threads = 2;
    engine_ = std::make_unique<Engine>(*model_, eo);
  }
  GenerationRequest request(std::vector<int32_t> prompt, int64_t n, SamplerOptions so = {}) {
    GenerationRequest g;
    g.prompt = std::move(prompt);
    g.max_tokens = n;
    g.sampling = so;
    g.ignore_eos = true;
    g.top_logprobs = 0;  // the ids come back with their logprobs
    return g;
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(SchedulerTest, BatchedRequestsEqualColdRuns) {
  const int64_t V = model_->config().vocab_size;
  SchedulerOptions so;
  so.parallel = 3;
  so.prefill_chunk = 64;  // long prompts take several steps, interleaved with decode
  Scheduler sched(*engine_, nullptr, {}, so);
  const int64_t lens[] = {1, 63, 64, 65, 200, 7, 130};
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplerOptions> samplers;
  std::vector<std::shared_ptr<GenerationHandle>> handles;
  const int64_t n = 9;
  for (size_t i = 0; i < std::size(lens); ++i) {
    prompts.push_back(random_prompt(lens[i], V, 77 + uint32_t(i)));
    SamplerOptions s;
    if (i % 2 == 1) {
      s.temperature = 0.8f;
      s.top_p = 0.9f;
      s.seed = 1234 + i;
    }
    samplers.push_back(s);
    Submitted sub = sched.submit(request(prompts.back(), n, s));
    ASSERT_EQ(sub.code, SubmitCode::kOk) << sub.message;
    handles.push_back(sub.handle);
  }
  for (size_t i = 0; i < handles.size(); ++i) {
    Reply r = collect(*handles[i]);
    EXPECT_EQ(r.last.finish_reason, "length");
    EXPECT_EQ(r.last.completion_tokens, n);
    EXPECT_EQ(r.ids, cold_run(*model_, prompts[i], n, samplers[i])) << "request " << i << " (prompt " << lens[i] << ")";
  }
}

TEST_F(SchedulerTest, FollowUpTurnReusesPrefixAndEqualsColdRun) {
  const int64_t V = model_->config().vocab_size;
  SchedulerOptions so;
  so.parallel = 2;
  Scheduler sched(*engine_, nullptr, {}, so);
  const std::vector<int32_t> turn1 = random_prompt(157, V, 5);
  Reply r1 = collect(*sched.submit(request(turn1, 11)).handle);
  EXPECT_EQ(r1.last.cached_tokens, 0);
  // Turn 2: the conversation so far (prompt + reply) and new text.
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), r1.ids.begin(), r1.ids.end());
  const std::vector<int32_t> more = random_prompt(45, V, 6);
  turn2.insert(turn2.end(), more.begin(), more.end());
  Reply r2 = collect(*sched.submit(request(turn2, 12)).handle);
  // The last multiple of 64 inside turn 1's prompt: rows past it came from decode, or were not
  // prefilled from a chunk boundary, and would not give a cold run's bits.
  EXPECT_EQ(r2.last.cached_tokens, 128);
  EXPECT_EQ(r2.ids, cold_run(*model_, turn2, 12, {}));
  // The same prompt again: now its own prefill left a checkpoint at 192.
  Reply r3 = collect(*sched.submit(request(turn2, 12)).handle);
  EXPECT_EQ(r3.last.cached_tokens, 192);
  EXPECT_EQ(r3.ids, r2.ids);
  // A prompt that diverges at 140 reuses the checkpoint before it (128), nothing past it.
  std::vector<int32_t> other = turn2;
  other[140] = (other[140] + 1) % int32_t(V - 1);
  Reply r4 = collect(*sched.submit(request(other, 5)).handle);
  EXPECT_EQ(r4.last.cached_tokens, 128);
  EXPECT_EQ(r4.ids, cold_run(*model_, other, 5, {}));
}

// The quantized tier also checkpoints the end of each prompt, so a follow-up reuses all of it.
TEST_F(SchedulerTest, QuantizedTierReusesTheWholePreviousPrompt) {
  const int64_t V = model_->config().vocab_size;
  SchedulerOptions so;
  so.kv.k_type = so.kv.v_type = DType::kQ8_0;
  Scheduler sched(*engine_, nullptr, {}, so);
  const std::vector<int32_t> turn1 = random_prompt(157, V, 8);
  Reply r1 = collect(*sched.submit(request(turn1, 4)).handle);
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), r1.ids.begin(), r1.ids.end());
  turn2.push_back(5);
  Reply r2 = collect(*sched.submit(request(turn2, 4)).handle);
  EXPECT_EQ(r2.last.cached_tokens, 157);
  EXPECT_EQ(r2.last.finish_reason, "length");
  EXPECT_EQ(r2.ids.size(), 4u);
}

// A request that arrives while a slot is idle is not waiting for one, even before the loop has
// admitted it: parallel + queue requests submitted back to back are all accepted, the next is not.
TEST_F(SchedulerTest, IdleSlotsAreNotQueueSpace) {
  const int64_t V = model_->config().vocab_size;
  SchedulerOptions so;
  so.parallel = 2;
  so.max_queue = 1;
  so.ctx = 300;
  Scheduler sched(*engine_, nullptr, {}, so);
  std::vector<Submitted> accepted;
  for (int i = 0; i < 3; ++i) {
    accepted.push_back(sched.submit(request(random_prompt(20, V, 10 + i), 250)));
    EXPECT_EQ(accepted.back().code, SubmitCode::kOk) << i;
  }
  EXPECT_EQ(sched.submit(request(random_prompt(20, V, 13), 250)).code, SubmitCode::kQueueFull);
  for (auto& a : accepted)
    if (a.handle) a.handle->cancel();
  for (auto& a : accepted)
    if (a.handle) collect(*a.handle);
}

TEST_F(SchedulerTest, CancelFreesTheSlotAndLimitsHold) {
  const int64_t V = model_->config().vocab_size;
  SchedulerOptions so;
  so.parallel = 1;
  so.max_queue = 1;
  so.ctx = 300;
  Scheduler sched(*engine_, nullptr, {}, so);
  Submitted a = sched.submit(request(random_prompt(20, V, 1), 250));
  ASSERT_EQ(a.code, SubmitCode::kOk);
  while (sched.stats().active == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // The slot is busy with a; b waits; c finds the queue full.
  Submitted b = sched.submit(request(random_prompt(20, V, 2), 3));
  Submitted c = sched.submit(request(random_prompt(20, V, 3), 3));
  EXPECT_EQ(b.code, SubmitCode::kOk);
  EXPECT_EQ(c.code, SubmitCode::kQueueFull);
  a.handle->cancel();
  Reply ra = collect(*a.handle);
  EXPECT_EQ(ra.last.finish_reason, "cancelled");
  EXPECT_LT(ra.last.completion_tokens, 250);
  Reply rb = collect(*b.handle);
  EXPECT_EQ(rb.last.finish_reason, "length");
  EXPECT_EQ(sched.stats().active, 0);
  EXPECT_EQ(sched.stats().requests_cancelled, 1);
  // Refused before queueing: empty, too long for --ctx, ids outside the vocabulary.
  EXPECT_EQ(sched.submit(request({}, 3)).code, SubmitCode::kInvalid);
  EXPECT_EQ(sched.submit(request(random_prompt(300, V, 4), 3)).code, SubmitCode::kInvalid);
  EXPECT_EQ(sched.submit(request({int32_t(V)}, 3)).code, SubmitCode::kInvalid);
  // A reply that reaches --ctx stops with "length".
  Reply rl = collect(*sched.submit(request(random_prompt(290, V, 5), 100)).handle);
  EXPECT_EQ(rl.last.finish_reason, "length");
  EXPECT_LE(290 + rl.last.completion_tokens, 301);
  sched.shutdown(true);
  EXPECT_EQ(sched.submit(request(random_prompt(5, V, 6), 3)).code, SubmitCode::kShuttingDown);
}

TEST_F(SchedulerTest, StopStringsAndEosEndTheReply) {
  auto tok = Tokenizer::load_from_dir(test::source_dir() + "/models/weft-tiny-hybrid");
  ASSERT_TRUE(tok.ok());
  SchedulerOptions so;
  Scheduler sched(*engine_, &tok.value(), {8191}, so);
  // Forced replies make the text known: the stop string cuts it, EOS ends it.
  GenerationRequest g = request(tok.value().encode("Once upon a time"), 50);
  g.forced = tok.value().encode(" there was a cat. The end of it all");
  g.stop = {"end"};
  Reply r = collect(*sched.submit(g).handle);
  EXPECT_EQ(r.last.finish_reason, "stop");
  std::string text;
  // collect() kept only the last event's text; re-run to gather the whole text.
  auto h = sched.submit(g).handle;
  for (bool done = false; !done;) {
    std::vector<GenerationEvent> ev;
    h->next(&ev, std::chrono::milliseconds(1000));
    for (auto& e : ev) {
      text += e.text;
      done = done || e.done;
    }
  }
  EXPECT_EQ(text, " there was a cat. The ");
  GenerationRequest e = request(tok.value().encode("Once upon a time"), 50);
  e.forced = {tok.value().encode(" hi")[0], 8191, 100, 101};
  e.ignore_eos = false;
  Reply re = collect(*sched.submit(e).handle);
  EXPECT_EQ(re.last.finish_reason, "stop");
  EXPECT_EQ(re.last.completion_tokens, 2);
}

}  // namespace
}  // namespace weft
