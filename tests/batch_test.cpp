// The strict tier's batch contract (engine/engine.h, model/forward.h), on every fixture
// architecture plus the shipped model:
//   * batch invariance: 8 different prompts, each prefilled and decoded alone (Session) and all
//     together in one Engine (shared prefill calls, one decode call per step): identical tokens,
//     bit-identical logits at every step;
//   * verify shape: k+1 rows of one sequence in one call == k+1 single steps, bit for bit;
//   * split invariance: a prompt fed whole or in calls cut at multiples of kPrefillChunk gives
//     bit-identical logits;
//   * thread counts 1 and 3 give the same bits in a batch.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/engine.h"
#include "engine/session.h"
#include "test_util.h"

namespace weft {
namespace {

std::string model_dir(const std::string& name) {
  if (name == "weft-tiny-hybrid") return test::source_dir() + "/models/weft-tiny-hybrid";
  return test::source_dir() + "/tests/data/fixtures/" + name;
}

std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, int32_t(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& t : ids) t = d(rng);
  return ids;
}

int32_t argmax(const float* x, int64_t n) { return int32_t(std::max_element(x, x + n) - x); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class BatchTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto m = Model::load(model_dir(GetParam()));
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::move(m.value());
  }
  std::unique_ptr<Model> model_;
};

constexpr int kSeqs = 8;
constexpr int kGen = 6;

TEST_P(BatchTest, EachSequenceAloneEqualsInsideABatch) {
  const int64_t V = model_->config().vocab_size;
  // Lengths straddle the prefill chunk (64) and the KV page (256) edges.
  const int64_t lens[kSeqs] = {1, 7, 63, 64, 65, 130, 257, 300};
  std::vector<std::vector<int32_t>> prompts;
  for (int s = 0; s < kSeqs; ++s) prompts.push_back(random_prompt(lens[s], V, 1000 + s));

  // Alone: one Session per prompt, greedy.
  std::vector<std::vector<std::vector<float>>> alone(kSeqs);
  std::vector<std::vector<int32_t>> alone_tokens(kSeqs);
  for (int s = 0; s < kSeqs; ++s) {
    SessionOptions so;
    so.threads = 2;
    Session session(*model_, so);
    std::vector<float> logits(static_cast<size_t>(V));
    ASSERT_TRUE(session.feed(prompts[s].data(), int64_t(prompts[s].size()), nullptr, logits.data()).ok());
    for (int g = 0; g < kGen; ++g) {
      alone[s].push_back(logits);
      const int32_t next = argmax(logits.data(), V);
      alone_tokens[s].push_back(next);
      ASSERT_TRUE(session.step(next, logits.data()).ok());
    }
  }

  // Together, in a scrambled order, with a small prefill batch so prompts share and split calls.
  for (int threads : {1, 3}) {
    EngineOptions eo;
    eo.threads = threads;
    eo.prefill_batch = 192;
    Engine engine(*model_, eo);
    const int order[kSeqs] = {5, 2, 7, 0, 3, 6, 1, 4};
    std::vector<SeqId> ids(kSeqs);
    for (int s : order) ids[size_t(s)] = engine.add(KvOptions{});
    std::vector<std::vector<float>> logits(kSeqs, std::vector<float>(size_t(V)));
    std::vector<PrefillInput> pre;
    for (int s : order) pre.push_back({ids[size_t(s)], prompts[s].data(), int64_t(prompts[s].size()), logits[size_t(s)].data()});
    ASSERT_TRUE(engine.prefill(pre).ok());
    for (int g = 0; g < kGen; ++g) {
      std::vector<DecodeInput> step;
      for (int s : order) {
        if (s == 3 && g > kGen / 2) continue;  // retired
        ASSERT_TRUE(same_bits(logits[size_t(s)], alone[s][size_t(g)]))
            << GetParam() << ": sequence " << s << " step " << g << " threads " << threads;
        step.push_back({ids[size_t(s)], alone_tokens[s][size_t(g)], logits[size_t(s)].data()});
      }
      // Retire one sequence halfway: the others must not notice.
      if (g == kGen / 2) {
        engine.retire(ids[3]);
        std::erase_if(step, [&](const DecodeInput& d) { return d.seq == ids[3]; });
      }
      ASSERT_TRUE(engine.decode(step).ok());
    }
  }
}

TEST_P(BatchTest, VerifyRowsEqualSingleSteps) {
  const int64_t V = model_->config().vocab_size;
  const auto prompt = random_prompt(97, V, 7);
  const auto draft = random_prompt(5, V, 8);
  SessionOptions so;
  so.threads = 2;
  Session stepper(*model_, so), verifier(*model_, so);
  ASSERT_TRUE(stepper.feed(prompt.data(), int64_t(prompt.size()), nullptr, nullptr).ok());
  ASSERT_TRUE(verifier.feed(prompt.data(), int64_t(prompt.size()), nullptr, nullptr).ok());
  std::vector<float> one(draft.size() * size_t(V)), all(draft.size() * size_t(V));
  for (size_t i = 0; i < draft.size(); ++i) ASSERT_TRUE(stepper.step(draft[i], one.data() + i * size_t(V)).ok());
  ASSERT_TRUE(verifier.verify(draft.data(), int64_t(draft.size()), all.data()).ok());
  EXPECT_TRUE(same_bits(one, all)) << GetParam();
  EXPECT_EQ(stepper.position(), verifier.position());
}

TEST_P(BatchTest, PrefillSplitsAtChunkMultiplesAreInvisible) {
  const int64_t V = model_->config().vocab_size;
  const auto prompt = random_prompt(3 * kPrefillChunk + 17, V, 11);
  const int64_t n = int64_t(prompt.size());
  std::vector<float> whole(static_cast<size_t>(n * V)), split(static_cast<size_t>(n * V));
  SessionOptions so;
  so.threads = 2;
  so.batch = 4 * kPrefillChunk;
  Session a(*model_, so);
  ASSERT_TRUE(a.feed(prompt.data(), n, whole.data(), nullptr).ok());
  Session b(*model_, so);
  const int64_t cuts[] = {kPrefillChunk, 3 * kPrefillChunk, n};
  int64_t done = 0;
  for (int64_t cut : cuts) {
    ASSERT_TRUE(b.feed(prompt.data() + done, cut - done, split.data() + done * V, nullptr).ok());
    done = cut;
  }
  EXPECT_TRUE(same_bits(whole, split)) << GetParam();
}

TEST_P(BatchTest, BadInputChangesNothing) {
  Engine engine(*model_, EngineOptions{});
  const SeqId a = engine.add(KvOptions{}), b = engine.add(KvOptions{});
  const int32_t good[2] = {1, 2}, bad[2] = {3, int32_t(model_->config().vocab_size)};
  const PrefillInput inputs[2] = {{a, good, 2, nullptr}, {b, bad, 2, nullptr}};
  EXPECT_FALSE(engine.prefill(inputs).ok());
  EXPECT_EQ(engine.state(a).position(), 0);
  EXPECT_EQ(engine.state(b).position(), 0);
  const DecodeInput twice[2] = {{a, 1, nullptr}, {a, 2, nullptr}};
  EXPECT_FALSE(engine.decode(twice).ok());
  EXPECT_EQ(engine.state(a).position(), 0);
  const DecodeInput unknown[1] = {{12345, 1, nullptr}};
  EXPECT_FALSE(engine.decode(unknown).ok());
}

INSTANTIATE_TEST_SUITE_P(All, BatchTest,
                         ::testing::Values("qwen35_dense", "qwen35_moe_experts_f16", "qwen35_moe_hd256",
                                           "qwen3next_moe", "qwen3_tied_f16", "llama_f32", "weft-tiny-hybrid"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// `weft generate` with several inputs decodes them as one batch; each input's tokens equal those
// of the same input run alone (greedy), and --json prints one line per input in input order.
TEST(GenerateCli, SeveralInputsEqualEachAlone) {
  const std::string dir = test::temp_dir("batch-cli");
  const std::vector<std::string> prompts = {"12 7 99 4", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", "42"};
  std::string files, out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string f = dir + "/p" + std::to_string(i) + ".txt";
    FILE* fp = std::fopen(f.c_str(), "w");
    std::fputs(prompts[i].c_str(), fp);
    std::fclose(fp);
    files += " --ids-file " + f;
  }
  const std::string base = test::weft_binary() + " generate --ignore-eos -n 12 --json --threads 2";
  ASSERT_EQ(test::run_command(base + files + " 2>/dev/null", &out), 0) << out;
  std::vector<std::string> lines;
  for (size_t p = 0; (p = out.find("{\"batch\"", p)) != std::string::npos; ++p) lines.push_back(out.substr(p, out.find('\n', p) - p));
  ASSERT_EQ(lines.size(), prompts.size()) << out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::string alone;
    ASSERT_EQ(test::run_command(base + " --ids-file " + dir + "/p" + std::to_string(i) + ".txt 2>/dev/null", &alone), 0);
    auto tokens = [](const std::string& line) { return line.substr(line.find("\"tokens\""), line.find(']', line.find("\"tokens\"")) - line.find("\"tokens\"")); };
    EXPECT_EQ(tokens(lines[i]), tokens(alone)) << "input " << i;
    EXPECT_NE(lines[i].find("\"batch\":3"), std::string::npos);
  }
}

}  // namespace
}  // namespace weft
