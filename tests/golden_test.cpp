// Golden tests: freeze the strict tier (f16 KV cache) bit for bit on several models.
//
// For each case the test feeds a fixed prompt (teacher forcing, several prefill batches), then
// generates 24 tokens greedily with the cache, and compares with tests/data/golden/golden.json:
// the greedy ids and an FNV-1a 64 checksum of the raw bits of every logit (prompt and
// generation). Any change to the arithmetic of the strict path (matmul, norms, GDN, the frozen
// attention_f16 kernel, ...) changes a checksum; that must be an explicit decision, recorded by
//   WEFT_RECORD_GOLDEN=1 ./build/golden_test      (or tools/record_golden.sh)
// The values are those of the AVX2 dispatch (this dev VM and CI are AVX2 x86). The scalar twins
// keep the same summation orders (design.md, "Strict determinism"), so they must reproduce the
// same bits: GoldenScalar re-runs these cases with WEFT_FORCE_SCALAR=1 and WEFT_GOLDEN_SCALAR=1.
// A plain WEFT_FORCE_SCALAR=1 run, or a machine without AVX2/FMA/F16C, skips.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "core/cpu_features.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "io/safetensors.h"
#include "model/synth.h"
#include "nlohmann/json.hpp"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kGenTokens = 24;

std::string golden_path() { return test::source_dir() + "/tests/data/golden/golden.json"; }
bool recording() {
  const char* e = std::getenv("WEFT_RECORD_GOLDEN");
  return e && std::strcmp(e, "1") == 0;
}

// FNV-1a 64 over the raw bytes of the floats: equal iff every bit of every logit is equal.
uint64_t fnv1a(const std::vector<float>& v, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
std::string hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

std::vector<int32_t> reference_prompt(const std::string& fixture) {
  auto f = SafetensorsFile::open(test::source_dir() + "/tests/data/fixtures/" + fixture + "/reference.safetensors");
  EXPECT_TRUE(f.ok()) << f.status().message();
  if (!f.ok()) return {};
  const TensorView& t = *f->find("prompt_ids");
  std::vector<int32_t> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    v[size_t(i)] = t.dtype == DType::kI64 ? int32_t(t.as<int64_t>()[i]) : t.as<int32_t>()[i];
  return v;
}

// The synthetic "tiny" model (seed 20240601), written once per process into a temp dir.
std::string synth_tiny_dir() {
  static const std::string dir = [] {
    auto spec = synth_preset("tiny");
    EXPECT_TRUE(spec.ok());
    spec->seed = 20240601;
    const std::string d = test::temp_dir("golden-synth") + "/tiny";
    Status st = synth_write(*spec, d);
    EXPECT_TRUE(st.ok()) << st.message();
    return d;
  }();
  return dir;
}

struct Case {
  std::string model_dir;
  std::vector<int32_t> prompt;
};

Case make_case(const std::string& name) {
  const std::string src = test::source_dir();
  if (name == "weft_tiny_hybrid") return {src + "/models/weft-tiny-hybrid", reference_prompt("weft_tiny_hybrid_ref")};
  if (name == "synth_tiny") {
    // 64 fixed pseudo-random ids below the special tokens (1022, 1023).
    std::vector<int32_t> p;
    uint32_t x = 12345;
    for (int i = 0; i < 64; ++i) {
      x = x * 1664525u + 1013904223u;
      p.push_back(int32_t((x >> 8) % 1000));
    }
    return {synth_tiny_dir(), p};
  }
  return {src + "/tests/data/fixtures/" + name, reference_prompt(name)};
}

struct Outcome {
  std::vector<int32_t> gen_ids;
  std::string prompt_hash, gen_hash;
};

Outcome run_case(const Case& c, int threads) {
  Outcome r;
  auto model = Model::load(c.model_dir);
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (!model.ok()) return r;
  const int64_t V = model.value()->config().vocab_size, T = int64_t(c.prompt.size());
  SessionOptions so;  // default KV options: the strict f16 cache
  so.threads = threads;
  so.batch = 16;  // several prefill batches
  Session session(*model.value(), so);
  std::vector<float> logits(size_t(T * V)), gen(size_t(kGenTokens * V));
  EXPECT_TRUE(session.feed(c.prompt.data(), T, logits.data(), gen.data()).ok());
  for (int64_t i = 0; i < kGenTokens; ++i) {
    r.gen_ids.push_back(argmax(gen.data() + i * V, V));
    if (i + 1 < kGenTokens) EXPECT_TRUE(session.step(r.gen_ids.back(), gen.data() + (i + 1) * V).ok());
  }
  r.prompt_hash = hex(fnv1a(logits));
  r.gen_hash = hex(fnv1a(gen));
  return r;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

bool scalar_check_run() {
  const char* e = std::getenv("WEFT_GOLDEN_SCALAR");
  return e && std::strcmp(e, "1") == 0;
}

TEST_P(GoldenTest, StrictF16PathBitIdentical) {
  if (!use_avx2() && !scalar_check_run())
    GTEST_SKIP() << "golden values are for the AVX2/FMA/F16C dispatch; this run uses scalar kernels";
  if (scalar_check_run() && recording()) GTEST_SKIP() << "golden values are recorded on the AVX2 dispatch only";
  const std::string name = GetParam();
  const Case c = make_case(name);
  ASSERT_FALSE(c.prompt.empty());
  const Outcome r = run_case(c, 2);

  if (recording()) {
    nlohmann::json j = nlohmann::json::object();
    if (std::ifstream in(golden_path()); in) in >> j;
    j[name] = {{"prompt_tokens", int64_t(c.prompt.size())}, {"prompt_logits_fnv1a64", r.prompt_hash},
               {"gen_ids", r.gen_ids}, {"gen_logits_fnv1a64", r.gen_hash}};
    fs::create_directories(fs::path(golden_path()).parent_path());
    std::ofstream(golden_path()) << j.dump(1) << "\n";
    std::printf("[ recorded %s ] prompt %s gen %s\n", name.c_str(), r.prompt_hash.c_str(), r.gen_hash.c_str());
    return;
  }
  std::ifstream in(golden_path());
  ASSERT_TRUE(in) << "missing " << golden_path() << " (record with WEFT_RECORD_GOLDEN=1)";
  nlohmann::json j;
  in >> j;
  ASSERT_TRUE(j.contains(name)) << "no golden entry for " << name;
  const auto& g = j[name];
  EXPECT_EQ(r.gen_ids, g["gen_ids"].get<std::vector<int32_t>>()) << name << ": greedy ids changed";
  EXPECT_EQ(r.prompt_hash, g["prompt_logits_fnv1a64"].get<std::string>()) << name << ": prompt logits changed";
  EXPECT_EQ(r.gen_hash, g["gen_logits_fnv1a64"].get<std::string>()) << name << ": generation logits changed";

  // The strict tier is thread-count independent: one and three threads give the same bits
  // (checked on the AVX2 run; the scalar re-run only compares the kernels, at 2 threads).
  if (scalar_check_run()) return;
  for (int threads : {1, 3}) {
    const Outcome o = run_case(c, threads);
    EXPECT_EQ(o.prompt_hash, r.prompt_hash) << name << " threads " << threads;
    EXPECT_EQ(o.gen_hash, r.gen_hash) << name << " threads " << threads;
  }
}

// The scalar twins against the same golden values. Kernel dispatch is fixed once per process
// (use_avx2() and the kernels' op tables are statics), so the check runs this test binary again
// as a child with the scalar kernels forced.
TEST(GoldenScalar, ScalarTwinsReproduceTheGoldenBits) {
  if (!use_avx2()) GTEST_SKIP() << "this run already uses the scalar kernels";
  if (recording()) GTEST_SKIP() << "recording";
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  std::string out;
  const int rc = test::run_command(std::string("WEFT_FORCE_SCALAR=1 WEFT_GOLDEN_SCALAR=1 ") + self +
                                       " --gtest_filter='All/GoldenTest.*'",
                                   &out);
  EXPECT_EQ(rc, 0) << "the scalar twins differ from the AVX2 golden values:\n" << out;
  EXPECT_EQ(out.find("[  SKIPPED ]"), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(All, GoldenTest,
                         ::testing::Values("qwen35_moe_hd256", "qwen3next_moe", "llama_f32", "qwen3_tied_f16",
                                           "weft_tiny_hybrid", "synth_tiny"));

}  // namespace
}  // namespace weft
