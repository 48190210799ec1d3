// Hard edges of the CLI (issue 8): contexts past max_position_embeddings and KV caches beyond
// MemAvailable are refused before anything is allocated, with a message that says what to do;
// the random-weight default model announces itself. The CLI runs as a child (WEFT_BINARY), as in
// bad_input_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/model.h"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string fixture_dir(const std::string& name) { return test::source_dir() + "/tests/data/fixtures/" + name; }

struct CliResult {
  int rc = 0;
  std::string out;
};

CliResult run_weft(const std::string& args, const std::string& env = "") {
  CliResult r;
  r.rc = test::run_command(env + " timeout 60 " + test::weft_binary() + " " + args, &r.out);
  return r;
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

class CliLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::temp_dir("cli-limits"); }
  void TearDown() override { fs::remove_all(dir_); }

  // qwen35_dense (head_dim 32, so q8_0 applies) with max_position_embeddings set to `max_pos`.
  std::string model_with_max_positions(int64_t max_pos) {
    const std::string d = dir_ + "/model";
    fs::create_directories(d);
    for (const char* f : {"model.safetensors", "generation_config.json"})
      fs::copy_file(fixture_dir("qwen35_dense") + "/" + f, d + "/" + f, fs::copy_options::overwrite_existing);
    std::ifstream in(fixture_dir("qwen35_dense") + "/config.json");
    json c = json::parse(in);
    c["max_position_embeddings"] = max_pos;
    std::ofstream(d + "/config.json") << c.dump(1);
    return d;
  }

  std::string ids_file(int n) {
    const std::string p = dir_ + "/ids" + std::to_string(n) + ".txt";
    std::ofstream out(p);
    for (int i = 0; i < n; ++i) out << (i * 7 + 3) % 200 << ' ';
    return p;
  }

  std::string dir_;
};

TEST_F(CliLimitsTest, MaxPositionEmbeddingsIsParsed) {
  auto m = Model::load(test::source_dir() + "/models/weft-tiny-hybrid");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m.value()->config().max_position_embeddings, 8192);
  auto f = Model::load(model_with_max_positions(16));
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f.value()->config().max_position_embeddings, 16);
}

TEST_F(CliLimitsTest, LogitsRefusesContextPastMaxPositions) {
  const std::string m = model_with_max_positions(16);
  CliResult r = run_weft("logits -m " + m + " --ids-file " + ids_file(20) + " -o " + dir_ + "/l.safetensors");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("20 tokens exceeds the model's max_position_embeddings (16)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--ctx-max"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_ + "/l.safetensors"));
  // At the limit it runs; --ctx-max lets a longer context through.
  r = run_weft("logits -m " + m + " --ids-file " + ids_file(16) + " -o " + dir_ + "/l.safetensors");
  EXPECT_EQ(r.rc, 0) << r.out;
  r = run_weft("logits -m " + m + " --ids-file " + ids_file(20) + " -o " + dir_ + "/l.safetensors --ctx-max 32");
  EXPECT_EQ(r.rc, 0) << r.out;
  r = run_weft("logits -m " + m + " --ids-file " + ids_file(20) + " -o " + dir_ + "/l.safetensors --ctx-max 19");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("exceeds --ctx-max 19"), std::string::npos) << r.out;
}

TEST_F(CliLimitsTest, GenerateCountsPromptAndGeneratedTokens) {
  const std::string m = model_with_max_positions(16);
  CliResult r = run_weft("generate -m " + m + " --ids-file " + ids_file(10) + " -n 10");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("context of 20 tokens exceeds the model's max_position_embeddings (16)"), std::string::npos)
      << r.out;
  r = run_weft("generate -m " + m + " --ids-file " + ids_file(10) + " -n 6 --ignore-eos");
  EXPECT_EQ(r.rc, 0) << r.out;
  r = run_weft("generate -m " + m + " --ids-file " + ids_file(10) + " -n 10 --ctx-max 20 --ignore-eos");
  EXPECT_EQ(r.rc, 0) << r.out;
}

// A context the KV cache cannot hold in memory is refused at once (the timeout would catch an
// attempt to allocate it), with the bytes it needs and what q8_0 would need.
TEST_F(CliLimitsTest, GenerateRefusesKvCacheBeyondAvailableMemory) {
  const std::string m = model_with_max_positions(16);
  CliResult r = run_weft("generate -m " + m + " --ids-file " + ids_file(4) +
                         " -n 100000000000000 --ctx-max 1000000000000000");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("the KV cache for 100000000000004 tokens needs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MemAvailable"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("with --kv q8_0 it would need"), std::string::npos) << r.out;
}

TEST_F(CliLimitsTest, BenchRefusesDepthPastMaxPositions) {
  const std::string m = model_with_max_positions(64);
  CliResult r = run_weft("bench -m " + m + " --ctx 128 --arms f16 --repeats 1 --gen 2 --bandwidth-mib 1 -q");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("context of 130 tokens exceeds the model's max_position_embeddings (64)"), std::string::npos)
      << r.out;
  r = run_weft("bench -m " + m + " --ctx 1000000000000 --arms f16,q8_0 --repeats 1 --gen 2 --bandwidth-mib 1 -q");
  EXPECT_EQ(r.rc, 1) << r.out;
}

// Without the shipped model the CLI falls back to a random-weight synthetic model; it must say
// so once per run, and say how to get real output.
TEST_F(CliLimitsTest, RandomWeightDefaultModelIsAnnounced) {
  const std::string env = "WEFT_SHIPPED_MODEL=" + dir_ + "/no-shipped-model XDG_CACHE_HOME=" + dir_ + "/cache";
  const std::string ids = ids_file(4);
  for (int run = 0; run < 2; ++run) {  // first run writes the model, the second reuses it
    CliResult r = run_weft("generate --ids-file " + ids + " -n 2", env);
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(count(r.out, "RANDOM-WEIGHT"), 1u) << "run " << run << ":\n" << r.out;
    EXPECT_NE(r.out.find("-m DIR"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("models/weft-tiny-hybrid"), std::string::npos) << r.out;
  }
  EXPECT_TRUE(fs::exists(dir_ + "/cache/weft/synth-tiny/config.json"));
  // With the shipped model present there is nothing to warn about.
  CliResult r = run_weft("generate --ids-file " + ids + " -n 2");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(count(r.out, "RANDOM-WEIGHT"), 0u) << r.out;
}

// Bad numbers in flags are refused before any model is opened (exit 2), with a message that says
// what is wanted, not CLI11's range up to DBL_MAX written out in 300 digits.
TEST_F(CliLimitsTest, BadNumericFlagsSayWhatIsWanted) {
  struct Case {
    const char* args;
    const char* flag;
    const char* says;
  };
  const Case cases[] = {
      {"generate -p hi -n -1", "--n-tokens", "-1 is negative; it must be 0 or more"},
      {"generate -p hi --temp -0.5", "--temp", "-0.5 is negative; it must be 0 or more"},
      {"generate -p hi --temp nan", "--temp", "nan is not a finite number"},
      {"generate -p hi --top-k -2", "--top-k", "-2 is negative"},
      {"bench --repeats 0", "--repeats", "0 is not positive; it must be more than 0"},
      {"bench --gen -4", "--gen", "-4 is not positive"},
      {"fidelity --text /nonexistent.txt --batch 0", "--batch", "0 is not positive"},
  };
  for (const Case& c : cases) {
    CliResult r = run_weft(std::string(c.args) + " -m /nonexistent-model");
    EXPECT_EQ(r.rc, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.flag), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("179769313486231570814527"), std::string::npos) << c.args << "\n" << r.out;
  }
  // In range, the value reaches the command: sampling settings are printed as they will run.
  CliResult ok = run_weft("generate -m " + test::source_dir() + "/models/weft-tiny-hybrid -p hi -n 2 --temp 0.5 --seed 3");
  EXPECT_EQ(ok.rc, 0) << ok.out;
  EXPECT_NE(ok.out.find("sampling: temperature 0.5"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("flags over"), std::string::npos) << ok.out;
}

// Progress on a pipe or in a log file is lines, not carriage returns: each printed update ends
// in a newline and the last one (the total) is always printed.
TEST_F(CliLimitsTest, ProgressIsLinesWhenStderrIsNotATerminal) {
  // The tiny fixture, so a Debug + sanitizer build runs it in seconds too.
  const std::string m = model_with_max_positions(4096);
  CliResult g = run_weft("generate -m " + m + " --ids-file " + ids_file(2100) + " -n 1 --json");
  ASSERT_EQ(g.rc, 0) << g.out;
  EXPECT_NE(g.out.find("weft: prefill 2100 / 2100 tokens\n"), std::string::npos) << g.out;
  CliResult b = run_weft("bench -m " + m + " --ctx 64 --arms f16,q8_0 --repeats 2 --gen 2 --bandwidth-mib 8");
  ASSERT_EQ(b.rc, 0) << b.out;
  EXPECT_NE(b.out.find("[bench] prefill 64/64"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("repeat 2/2  q8_0"), std::string::npos) << b.out;
  for (const CliResult* r : {&g, &b}) EXPECT_EQ(r->out.find('\r'), std::string::npos) << r->out;
}

}  // namespace
}  // namespace weft
