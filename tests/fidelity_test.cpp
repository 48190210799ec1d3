// Tests of src/lab/fidelity and `weft fidelity`: KL against a hand computation, the self-check
// (an arm against itself is exactly zero), chunked == stepwise teacher forcing, depth buckets, and
// clear errors for bad input through the binary.
#include "lab/fidelity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include "lab/stats.h"
#include "test_util.h"

namespace weft::lab {
namespace {

std::string fixture(const std::string& name) { return weft::test::source_dir() + "/tests/data/fixtures/" + name; }

std::vector<int32_t> random_ids(int64_t n, int32_t vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = int32_t(rng.below(uint64_t(vocab)));
  return ids;
}

std::unique_ptr<Model> load_fixture(const std::string& name) {
  auto m = Model::load(fixture(name));
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(m.value()) : nullptr;
}

std::vector<FidelityArm> arms_of(const std::string& csv) {
  auto a = parse_fidelity_arms(csv);
  EXPECT_TRUE(a.ok()) << a.status().message();
  return a.value();
}

TEST(Fidelity, KlMatchesHandComputation) {
  // P = softmax(0, ln 3) = (1/4, 3/4), Q = softmax(0, 0) = (1/2, 1/2):
  // KL(P||Q) = 1/4 ln(1/2 / ... ) = 1/4 ln((1/4)/(1/2)) + 3/4 ln((3/4)/(1/2)) = 3/4 ln 3 - ln 2.
  const float ref[2] = {0.0f, float(std::log(3.0))};
  const float arm[2] = {0.0f, 0.0f};
  PositionStats s = compare_logits(ref, arm, 2, /*target=*/1);
  EXPECT_NEAR(s.kld, 0.75 * std::log(3.0) - std::log(2.0), 1e-7);
  EXPECT_FALSE(s.top1);  // argmax 1 vs 0 (the tie in Q goes to the lowest index)
  // NLL_ref = -ln(3/4), NLL_arm = -ln(1/2).
  EXPECT_NEAR(s.nll_ref, -std::log(0.75), 1e-7);
  EXPECT_NEAR(s.dnll, std::log(2.0) - std::log(4.0 / 3.0), 1e-7);
  EXPECT_NEAR(s.dp, 0.5 - 0.75, 1e-7);

  // Three tokens, direct definition sum p (log p - log q) in double.
  const float z[3] = {1.5f, -0.25f, 0.75f}, a[3] = {1.25f, 0.5f, 0.5f};
  auto logsm = [](const float* x, int j) {
    double s = 0;
    for (int i = 0; i < 3; ++i) s += std::exp(double(x[i]));
    return double(x[j]) - std::log(s);
  };
  double kl = 0;
  for (int j = 0; j < 3; ++j) kl += std::exp(logsm(z, j)) * (logsm(z, j) - logsm(a, j));
  s = compare_logits(z, a, 3, 2);
  EXPECT_NEAR(s.kld, kl, 1e-12);
  EXPECT_TRUE(s.top1);
  EXPECT_NEAR(s.dnll, -logsm(a, 2) + logsm(z, 2), 1e-12);

  // Softmax is shift invariant: a constant offset is no divergence at all.
  const float shifted[3] = {z[0] + 4.0f, z[1] + 4.0f, z[2] + 4.0f};
  s = compare_logits(z, shifted, 3, 0);
  EXPECT_NEAR(s.kld, 0.0, 1e-12);
  EXPECT_NEAR(s.dnll, 0.0, 1e-6);
  // Identical rows give exactly zero.
  s = compare_logits(z, z, 3, 0);
  EXPECT_EQ(s.kld, 0.0);
  EXPECT_EQ(s.dnll, 0.0);
  EXPECT_EQ(s.dp, 0.0);
}

TEST(Fidelity, DepthBuckets) {
  const std::pair<int64_t, int> cases[] = {{0, 0},     {1023, 0},   {1024, 1},   {4095, 1},   {4096, 2},
                                           {16383, 2}, {16384, 3},  {65535, 3},  {65536, 4},  {262143, 4},
                                           {262144, 5}, {1 << 30, 5}};
  for (auto [pos, b] : cases) EXPECT_EQ(depth_bucket_index(pos), b) << pos;
  EXPECT_EQ(depth_buckets()[0].label(), "0–1K");
  EXPECT_EQ(depth_buckets()[1].label(), "1K–4K");
  EXPECT_EQ(depth_buckets()[4].label(), "64K–256K");
  EXPECT_EQ(depth_buckets()[5].label(), "256K+");
}

TEST(Fidelity, ParsesArms) {
  auto a = parse_fidelity_arms("f16, q8_0/f16 ,q4_0");
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_EQ(a->size(), 3u);
  EXPECT_EQ((*a)[1].name, "q8_0/f16");
  EXPECT_EQ((*a)[1].kv.k_type, DType::kQ8_0);
  EXPECT_EQ((*a)[1].kv.v_type, DType::kF16);
  EXPECT_EQ((*a)[2].kv.k_type, DType::kQ4_0);
  EXPECT_EQ((*a)[2].kv.v_type, DType::kQ4_0);
  EXPECT_TRUE(parse_fidelity_arms("f16,f16").ok());  // the self-check
  EXPECT_FALSE(parse_fidelity_arms("f16").ok());
  auto bad = parse_fidelity_arms("f16,q5_k");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("q5_k"), std::string::npos);
  EXPECT_FALSE(parse_fidelity_arms("f16,q8_0/zz").ok());
  EXPECT_FALSE(parse_fidelity_arms("f16,q8_0,q8_0").ok());
  EXPECT_FALSE(parse_fidelity_arms("f16,,q8_0").ok());
}

TEST(Fidelity, ArmAgainstItselfIsExactlyZero) {
  auto model = load_fixture("qwen35_moe_hd256");
  ASSERT_TRUE(model);
  FidelityOptions o;
  o.batch = 48;
  auto r = run_fidelity(*model, random_ids(200, 256, 7), arms_of("f16,f16"), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->arms.size(), 1u);
  const FidelityArmResult& a = r->arms[0];
  EXPECT_EQ(a.overall.n, 199);
  for (const PositionStats& p : a.positions) {
    EXPECT_EQ(p.kld, 0.0);
    EXPECT_TRUE(p.top1);
    EXPECT_EQ(p.dnll, 0.0);
    EXPECT_EQ(p.dp, 0.0);
  }
  EXPECT_EQ(a.overall.kld_max, 0.0);
  EXPECT_EQ(a.overall.top1, 1.0);
  EXPECT_EQ(a.overall.ppl_ratio, 1.0);
  EXPECT_GT(r->ref_summary.ref_ppl, 1.0);
}

// Chunks at multiples of the prefill chunk (64) are the same forward calls as far as the
// arithmetic goes (model/forward.h: split invariance), so every figure is bit-identical.
TEST(Fidelity, ChunkSizesAtPrefillMultiplesGiveIdenticalResults) {
  auto model = load_fixture("qwen35_moe_hd256");
  ASSERT_TRUE(model);
  const auto ids = random_ids(300, 256, 11);
  FidelityOptions small, large;
  small.batch = 64;
  large.batch = 192;
  auto a = run_fidelity(*model, ids, arms_of("f16,q8_0"), small);
  auto b = run_fidelity(*model, ids, arms_of("f16,q8_0"), large);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  const auto& pa = a->arms[0].positions;
  const auto& pb = b->arms[0].positions;
  ASSERT_EQ(pa.size(), pb.size());
  double max_kl = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].kld, pb[i].kld) << "position " << i;
    EXPECT_EQ(pa[i].top1, pb[i].top1) << "position " << i;
    EXPECT_EQ(pa[i].dnll, pb[i].dnll) << "position " << i;
    EXPECT_EQ(pa[i].nll_ref, pb[i].nll_ref) << "position " << i;
    max_kl = std::max(max_kl, pa[i].kld);
  }
  // q8_0 really differs from f16 (else the comparison above would be vacuous).
  EXPECT_GT(max_kl, 0.0);
}

// One token per call is a split off the prefill chunk: the chunked GDN then sums in another
// order, so figures agree to float rounding (seen: |Δnll| <= 5e-5 on nll ~ 7, i.e. ~1e-5
// relative), not bit for bit; top-1 agreement is unchanged.
TEST(Fidelity, StepwiseAgreesWithChunkedToRounding) {
  auto model = load_fixture("qwen35_moe_hd256");
  ASSERT_TRUE(model);
  const auto ids = random_ids(300, 256, 11);
  FidelityOptions chunked, stepwise;
  chunked.batch = 64;
  stepwise.batch = 1;
  auto a = run_fidelity(*model, ids, arms_of("f16,q8_0"), chunked);
  auto b = run_fidelity(*model, ids, arms_of("f16,q8_0"), stepwise);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  const auto& pa = a->arms[0].positions;
  const auto& pb = b->arms[0].positions;
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_NEAR(pa[i].kld, pb[i].kld, 1e-5) << "position " << i;
    EXPECT_NEAR(pa[i].dnll, pb[i].dnll, 2e-4) << "position " << i;
    EXPECT_NEAR(pa[i].nll_ref, pb[i].nll_ref, 1e-4 * std::max(1.0, std::abs(pa[i].nll_ref))) << "position " << i;
  }
}

TEST(Fidelity, BucketsSplitPositionsByDepth) {
  auto model = load_fixture("qwen35_moe_hd256");
  ASSERT_TRUE(model);
  FidelityOptions o;
  o.batch = 128;
  auto r = run_fidelity(*model, random_ids(1100, 256, 5), arms_of("f16,q8_0,q4_0"), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->arms.size(), 2u);
  for (const FidelityArmResult& a : r->arms) {
    EXPECT_EQ(a.overall.n, 1099);
    ASSERT_EQ(a.buckets.size(), 2u);
    EXPECT_EQ(a.buckets[0].bucket.lo, 0);
    EXPECT_EQ(a.buckets[0].bucket.hi, 1024);
    EXPECT_EQ(a.buckets[0].stats.n, 1024);
    EXPECT_EQ(a.buckets[1].bucket.lo, 1024);
    EXPECT_EQ(a.buckets[1].bucket.hi, 4096);
    EXPECT_EQ(a.buckets[1].stats.n, 75);
    // The overall mean is the n-weighted mean of the buckets.
    const double pooled = (a.buckets[0].stats.kld_mean * 1024 + a.buckets[1].stats.kld_mean * 75) / 1099;
    EXPECT_NEAR(a.overall.kld_mean, pooled, 1e-12 + 1e-9 * pooled);
  }
  // q4_0 keeps fewer bits than q8_0: it should be further from f16.
  EXPECT_GT(r->arms[1].overall.kld_mean, r->arms[0].overall.kld_mean);
  const nlohmann::json j = fidelity_json(r.value(), "fixture");
  EXPECT_EQ(j["ref"], "f16");
  EXPECT_EQ(j["tokens"], 1100);
  EXPECT_EQ(j["arms"]["q8_0"]["n"], 1099);
  EXPECT_EQ(j["arms"]["q4_0"]["buckets"][1]["lo"], 1024);
  EXPECT_EQ(j["arms"]["q4_0"]["buckets"][1]["hi"], 4096);
  EXPECT_NE(fidelity_markdown(r.value()).find("| 1K–4K |"), std::string::npos);
  EXPECT_NE(fidelity_svg(r.value(), "t").find("<svg"), std::string::npos);
}

// ---- through the binary ----

struct CliRun {
  int rc;
  std::string out;
};

CliRun weft(const std::string& args) {
  CliRun r;
  r.rc = weft::test::run_command(weft::test::weft_binary() + " fidelity " + args, &r.out);
  return r;
}

std::string write_ids(const std::string& dir, int64_t n) {
  const std::string path = dir + "/ids.txt";
  std::ofstream f(path);
  for (int32_t id : random_ids(n, 256, 3)) f << id << ' ';
  return path;
}

TEST(FidelityCli, JsonOutputAndFiles) {
  const std::string dir = weft::test::temp_dir("fidelity");
  const std::string ids = write_ids(dir, 120);
  // stdout alone (progress and notes go to stderr) must hold exactly one JSON object.
  CliRun r;
  r.rc = weft::test::run_command("{ " + weft::test::weft_binary() + " fidelity -m " + fixture("qwen35_moe_hd256") +
                                     " --ids-file " + ids + " --arms f16,q8_0,q4_0/f16 --batch 32 --json --out " + dir +
                                     "/out 2>" + dir + "/stderr.txt; }",
                                 &r.out);
  ASSERT_EQ(r.rc, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ref"], "f16");
  EXPECT_EQ(j["tokens"], 120);
  EXPECT_EQ(j["arms"]["q8_0"]["n"], 119);
  EXPECT_TRUE(j["arms"].contains("q4_0/f16"));
  for (const char* key : {"kld_mean", "kld_median", "kld_p99", "kld_max", "top1", "ppl_ratio", "dnll_mean", "dp_mean",
                          "dp_abs_p99", "buckets"})
    EXPECT_TRUE(j["arms"]["q8_0"].contains(key)) << key;
  for (const char* f : {"results.json", "report.md", "kl_by_depth.svg"})
    EXPECT_TRUE(std::ifstream(dir + "/out/" + f).good()) << f;

  // --ctx takes the first N tokens; the Markdown table is the default output.
  r = weft("-m " + fixture("qwen35_moe_hd256") + " --ids-file " + ids + " --arms f16,f32 --ctx 50 2>&1");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("| **f32** | all | 49 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fidelity: 50 / 50 tokens"), std::string::npos) << r.out;  // progress on stderr
}

TEST(FidelityCli, BadInputFailsClearly) {
  const std::string dir = weft::test::temp_dir("fidelity-bad");
  const std::string ids = write_ids(dir, 20);
  const std::string m = "-m " + fixture("qwen35_moe_hd256");

  CliRun r = weft(m + " --text " + dir + "/no-such.txt --arms f16,q8_0");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("no-such.txt"), std::string::npos) << r.out;

  std::ofstream(dir + "/t.txt") << "Some text.\n";
  r = weft(m + " --text " + dir + "/t.txt --arms f16,q8_0");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("tokenizer.json"), std::string::npos) << r.out;

  r = weft(m + " --ids-file " + ids + " --arms f16,q9_0");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("unknown KV cache type 'q9_0'"), std::string::npos) << r.out;

  r = weft(m + " --ids-file " + dir + "/missing-ids.txt --arms f16,q8_0");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("missing-ids.txt"), std::string::npos) << r.out;

  // head_dim 16: quantized caches are refused with the reason.
  r = weft("-m " + fixture("llama_f32") + " --ids-file " + ids + " --arms f16,q8_0");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("head_dim is 16"), std::string::npos) << r.out;

  r = weft(m + " --ids-file " + ids + " --arms f16,q8_0 --bogus");
  EXPECT_EQ(r.rc, 2) << r.out;
  r = weft(m + " --arms f16,q8_0");
  EXPECT_EQ(r.rc, 2) << r.out;
  r = weft("--help");
  EXPECT_EQ(r.rc, 0) << r.out;
}

}  // namespace
}  // namespace weft::lab
