// Strict determinism (issue 2): with the default (strict) settings, `weft logits` writes
// byte-identical files run to run and for any thread count, and greedy `weft generate` gives the
// same tokens. Prefill batch size is not compared: it may legitimately change summation order.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

using test::read_bytes;

class DeterminismTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::temp_dir("determinism"); }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes n ids drawn from [0, vocab) with a fixed seed; returns the file's path.
  std::string ids_file(int n, int vocab, uint64_t seed) {
    std::mt19937_64 rng(seed);
    const std::string path = dir_ + "/ids-" + std::to_string(n) + "-" + std::to_string(seed) + ".txt";
    std::ofstream out(path);
    for (int i = 0; i < n; ++i) out << rng() % uint64_t(vocab) << (i % 20 == 19 ? '\n' : ' ');
    return path;
  }

  // Runs `weft logits` and returns the output file's bytes (fails the test on a non-zero exit).
  std::string logits(const std::string& model, const std::string& ids, const std::string& extra) {
    const std::string out = dir_ + "/out-" + std::to_string(counter_++) + ".safetensors";
    std::string output;
    const std::string cmd = "timeout 120 " + test::weft_binary() + " logits -m " + model + " --ids-file " + ids +
                            " -o " + out + " " + extra;
    int rc = test::run_command(cmd, &output);
    EXPECT_EQ(rc, 0) << cmd << "\n" << output;
    return read_bytes(out);
  }

  // Byte equality of two logits files; on failure names the first differing logit.
  static void expect_identical(const std::string& a, const std::string& b, const std::string& what) {
    ASSERT_FALSE(a.empty()) << what;
    if (a == b) return;
    ASSERT_EQ(a.size(), b.size()) << what << ": output sizes differ";
    size_t i = 0;
    while (a[i] == b[i]) ++i;
    uint64_t header_len = 0;
    for (int j = 7; j >= 0; --j) header_len = header_len << 8 | uint8_t(a[size_t(j)]);
    const size_t data_start = 8 + size_t(header_len);
    if (i < data_start) FAIL() << what << ": headers differ at byte " << i;
    const size_t k = (i - data_start) / 4;
    float x, y;
    std::memcpy(&x, a.data() + data_start + 4 * k, 4);
    std::memcpy(&y, b.data() + data_start + 4 * k, 4);
    FAIL() << what << ": first mismatch at logit " << k << ": " << x << " vs " << y;
  }

  // threads 1 / 2 / 3 and a repeated threads 2 give the same bytes.
  void check_model(const std::string& model, const std::string& ids, const std::string& extra = "") {
    const std::string t1 = logits(model, ids, "--threads 1 " + extra);
    const std::string t2 = logits(model, ids, "--threads 2 " + extra);
    const std::string t3 = logits(model, ids, "--threads 3 " + extra);
    const std::string t2b = logits(model, ids, "--threads 2 " + extra);
    expect_identical(t1, t2, model + ": threads 1 vs 2");
    expect_identical(t1, t3, model + ": threads 1 vs 3");
    expect_identical(t2, t2b, model + ": threads 2, run 1 vs run 2");
  }

  std::string dir_;
  int counter_ = 0;
};

std::string fixture(const std::string& name) { return test::source_dir() + "/tests/data/fixtures/" + name; }
std::string shipped_model() { return test::source_dir() + "/models/weft-tiny-hybrid"; }

TEST_F(DeterminismTest, QwenMoeHeadDim256) {
  check_model(fixture("qwen35_moe_hd256"), ids_file(100, 256, 1));
}

TEST_F(DeterminismTest, Qwen3NextMoe) {
  check_model(fixture("qwen3next_moe"), ids_file(100, 256, 2));
}

TEST_F(DeterminismTest, LlamaF32) {
  check_model(fixture("llama_f32"), ids_file(100, 257, 3));
}

TEST_F(DeterminismTest, ShippedModelLongerThanOneChunk) {
  // ~300 tokens: full attention spans more than one 256-token chunk / KV page.
  if (!fs::exists(shipped_model() + "/config.json")) GTEST_SKIP() << "no " << shipped_model();
  check_model(shipped_model(), ids_file(300, 8192, 4));
}

TEST_F(DeterminismTest, ShippedModelF32Cache) {
  if (!fs::exists(shipped_model() + "/config.json")) GTEST_SKIP() << "no " << shipped_model();
  const std::string ids = ids_file(280, 8192, 5);
  expect_identical(logits(shipped_model(), ids, "--threads 1 --kv f32"),
                   logits(shipped_model(), ids, "--threads 2 --kv f32"), "kv f32: threads 1 vs 2");
}

TEST_F(DeterminismTest, GreedyGenerateAcrossThreads) {
  if (!fs::exists(shipped_model() + "/tokenizer.json")) GTEST_SKIP() << "no " << shipped_model();
  std::vector<std::vector<int>> tokens;
  for (int threads : {1, 2}) {
    std::string output;
    const std::string cmd = "timeout 120 " + test::weft_binary() + " generate -m " + shipped_model() +
                            " --prompt 'Once upon a time, a little fox' -n 40 --json --ignore-eos --threads " +
                            std::to_string(threads) + " 2>/dev/null";
    ASSERT_EQ(test::run_command(cmd, &output), 0) << cmd << "\n" << output;
    auto j = nlohmann::json::parse(output, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("tokens")) << output;
    tokens.push_back(j["tokens"].get<std::vector<int>>());
  }
  ASSERT_EQ(tokens[0].size(), 40u);
  for (size_t i = 0; i < tokens[0].size(); ++i)
    ASSERT_EQ(tokens[0][i], tokens[1][i]) << "first mismatch at generated token " << i;
}

TEST_F(DeterminismTest, SyntheticModel) {
  const std::string model = dir_ + "/synth";
  std::string output;
  ASSERT_EQ(test::run_command(test::weft_binary() + " synth --preset tiny -q -o " + model, &output), 0) << output;
  auto cfg = nlohmann::json::parse(read_bytes(model + "/config.json"), nullptr, false);
  ASSERT_TRUE(cfg.is_object()) << "synth wrote no config.json";
  const nlohmann::json& t = cfg.contains("text_config") ? cfg["text_config"] : cfg;
  const int vocab = t.value("vocab_size", 0);
  ASSERT_GT(vocab, 0);
  const std::string ids = ids_file(64, vocab, 6);
  expect_identical(logits(model, ids, "--threads 1"), logits(model, ids, "--threads 2"), "synth tiny: threads 1 vs 2");
}

}  // namespace
}  // namespace weft
