// weft against llama.cpp on the same GGUF files: the shipped model converted by weft (bf16,
// q8_0, q4_k_m), evaluated teacher-forced by weft and by llama.cpp through node-llama-cpp 3.21.1
// (tools/peers/logits.mjs). Bounds: mean KL(weft || llama.cpp) <= 1e-3 for every type; same
// top-1 on >= 99% of positions for bf16 (issue 10's goal). For q8_0 / q4_k_m the matmul
// arithmetic is llama.cpp's (ggml_interop_test: the same activation bytes, the same products up
// to float order), yet both engines quantize every matmul's activations to 8 bits, which turns
// the f16-level roundings they do differently (llama.cpp rounds Q and attention probabilities to
// f16) into whole code steps; on this small model many positions are near-ties. The test
// measures that noise floor with weft itself: weft with an f32 KV cache instead of f16, a change
// of the same size. Bounds: top-1 agreement >= 98% and every disagreement a near-tie (top-1 vs
// top-2 margin below kNearTie logits in both engines); docs/results.md has the figures.
// Skipped, saying why, where node or the package is absent (install: cd tools/peers && npm ci).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/session.h"
#include "io/gguf.h"
#include "io/tokenizer.h"
#include "model/gguf_convert.h"
#include "model/model.h"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

std::vector<float> weft_logits(const std::string& path, const std::vector<int32_t>& ids, DType kv = DType::kF16) {
  auto model = Model::load(path);
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (!model.ok()) return {};
  const int64_t V = model.value()->config().vocab_size, T = int64_t(ids.size());
  SessionOptions so;
  so.threads = 2;
  so.kv.k_type = kv;
  so.kv.v_type = kv;
  Session session(*model.value(), so);
  std::vector<float> logits(static_cast<size_t>(T * V)), last(static_cast<size_t>(V));
  EXPECT_TRUE(session.feed(ids.data(), T, logits.data(), last.data()).ok());
  return logits;
}

// Agreement of two runs' next-token distributions (logits or log-probabilities, T x V).
struct Agreement {
  double top1 = 0, kl = 0;         // same argmax share; mean KL(a || b)
  int64_t disagree = 0;
  double max_disagree_margin = 0;  // largest top-1 vs top-2 margin (min over both runs) where they disagree
};
Agreement agreement(const std::vector<float>& A, const std::vector<float>& B, int64_t T, int64_t V) {
  Agreement g;
  int64_t agree = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* a = A.data() + t * V;
    const float* b = B.data() + t * V;
    int64_t aw = 0, bw = 0;
    double ma = -1e30, mb = -1e30, za = 0, zb = 0;
    for (int64_t v = 0; v < V; ++v) {
      if (a[v] > a[aw]) aw = v;
      if (b[v] > b[bw]) bw = v;
      ma = std::max(ma, double(a[v]));
      mb = std::max(mb, double(b[v]));
    }
    for (int64_t v = 0; v < V; ++v) {
      za += std::exp(a[v] - ma);
      zb += std::exp(b[v] - mb);
    }
    for (int64_t v = 0; v < V; ++v) {
      const double la = a[v] - ma - std::log(za), lb = b[v] - mb - std::log(zb);
      g.kl += std::exp(la) * (la - std::max(lb, -700.0));
    }
    if (aw == bw) {
      ++agree;
      continue;
    }
    ++g.disagree;
    // Each run's margin between its own top-1 and the other run's top-1.
    const double margin = std::min(double(a[aw]) - a[bw], double(b[bw]) - b[aw]);
    g.max_disagree_margin = std::max(g.max_disagree_margin, margin);
  }
  g.top1 = double(agree) / double(T);
  g.kl /= double(T);
  return g;
}

// A near-tie: the top-1 / top-2 margin that f16-level rounding differences, amplified by 8-bit
// activation codes, move on this model (measured: |margin change| p90 0.03-0.07 logits between
// weft and llama.cpp, largest disagreement margin 0.03-0.14 over 1024 positions).
constexpr double kNearTie = 0.25;

class PeerInterop : public ::testing::Test {
 protected:
  void SetUp() override {
    peers_ = test::source_dir() + "/tools/peers";
    std::string out;
    if (test::run_command("node --version 2>&1", &out) != 0) GTEST_SKIP() << "node not found; llama.cpp peer test skipped";
    if (!fs::exists(peers_ + "/node_modules/node-llama-cpp/package.json"))
      GTEST_SKIP() << "node-llama-cpp not installed; run: cd tools/peers && npm ci   (needs npm registry access)";
  }
  std::string peers_;
};

TEST_F(PeerInterop, ShippedModelMatchesLlamaCpp) {
  const std::string dir = test::source_dir() + "/models/weft-tiny-hybrid";
  const std::string tmp = test::temp_dir("peer");
  auto tok = Tokenizer::load_from_dir(dir);
  ASSERT_TRUE(tok.ok());
  // Held-out text: wikitext-2's test split where ../shared is present, else a text written for this
  // repository (tests/data/text/heldout-en.txt, not in the shipped model's training data). Both give
  // the 512 positions the bounds were set on; a short text would judge a 98% bound on a few dozen.
  std::string path = test::shared_dir() + "/data/corpora/heldout/wikitext2-test.txt";
  if (!fs::exists(path)) path = test::source_dir() + "/tests/data/text/heldout-en.txt";
  const std::string text = test::read_bytes(path).substr(0, 10000);
  ASSERT_FALSE(text.empty()) << "cannot read " << path;
  std::vector<int32_t> ids = tok->encode(text);
  ASSERT_GE(ids.size(), 512u) << path << " is too short for the bounds";
  ids.resize(512);
  {
    std::ofstream o(tmp + "/ids.txt");
    for (int32_t id : ids) o << id << ' ';
  }
  ASSERT_TRUE(convert_hf_to_gguf(dir, tmp + "/keep.gguf", WeightScheme::kKeep).ok());
  for (WeightScheme sc : {WeightScheme::kKeep, WeightScheme::kQ8_0, WeightScheme::kQ4_K_M}) {
    const std::string gguf = tmp + "/" + weight_scheme_name(sc) + ".gguf";
    if (sc != WeightScheme::kKeep) ASSERT_TRUE(quantize_gguf(tmp + "/keep.gguf", gguf, sc).ok());
    std::string out;
    const int rc = test::run_command("cd " + peers_ + " && node logits.mjs " + gguf + " " + tmp + "/ids.txt " + tmp +
                                         "/llama.f32 2>&1", &out);
    ASSERT_EQ(rc, 0) << out;
    const std::vector<float> w = weft_logits(gguf, ids);
    const int64_t T = int64_t(ids.size()), V = int64_t(w.size()) / T;
    std::vector<float> l(static_cast<size_t>(T * V));
    {
      std::ifstream in(tmp + "/llama.f32", std::ios::binary);
      in.read(reinterpret_cast<char*>(l.data()), std::streamsize(l.size() * 4));
      ASSERT_EQ(in.gcount(), std::streamsize(l.size() * 4)) << "llama.cpp output has another shape: " << out;
    }
    const Agreement g = agreement(w, l, T, V);
    // The noise floor: the same file through weft with an f32 KV cache instead of f16.
    const Agreement self = agreement(w, weft_logits(gguf, ids, DType::kF32), T, V);
    std::printf("[ %s ] %lld tokens: top-1 agreement %.2f%%, mean KL(weft || llama.cpp) %.3g, largest disagreement margin "
                "%.3f | weft f16 vs f32 KV: top-1 %.2f%%, KL %.3g\n",
                weight_scheme_name(sc), (long long)T, 100 * g.top1, g.kl, g.max_disagree_margin, 100 * self.top1, self.kl);
    EXPECT_LE(g.kl, 1e-3) << weight_scheme_name(sc);
    if (sc == WeightScheme::kKeep) {
      EXPECT_GE(g.top1, 0.99) << weight_scheme_name(sc);
    } else {
      EXPECT_GE(g.top1, 0.98) << weight_scheme_name(sc);
      EXPECT_LT(g.max_disagree_margin, kNearTie) << weight_scheme_name(sc) << ": a disagreement that is not a near-tie";
      // llama.cpp is not much further from weft than weft is from itself under a rounding change.
      EXPECT_LE(g.kl, 6 * self.kl) << weight_scheme_name(sc);
    }
  }
}

// The fixtures have no tokenizer.json: the converter writes a byte-level placeholder vocabulary
// (llama.cpp needs one; the ids are given). Random-weight MoE fixtures have near-tied router
// logits; llama.cpp rounds the router's activations to bf16 (its bf16 matmul), so a top-k choice
// can flip and the sequence diverge from there. With every expert active no choice is left to
// flip, and everything else (stacked experts, routing weights, shared expert) is still compared.
std::string with_all_experts(const std::string& in, const std::string& out) {
  auto f = GgufFile::open(in);
  EXPECT_TRUE(f.ok());
  auto meta = f->metadata();
  EXPECT_TRUE(f->find("tokenizer.ggml.tokens") != nullptr) << "the converter wrote no placeholder vocabulary";
  const GgufValue* experts = nullptr;
  for (const auto& [k, v] : meta)
    if (k.size() > 13 && k.substr(k.size() - 13) == ".expert_count") experts = &v;
  if (experts) {
    const GgufValue all = *experts;
    for (auto& [k, v] : meta)
      if (k.size() > 18 && k.substr(k.size() - 18) == ".expert_used_count") v = all;
  }
  std::vector<GgufTensorToWrite> ts;
  for (const GgufTensor& t : f->tensors()) ts.push_back({t.name, t.type, t.ne, t.data});
  EXPECT_TRUE(write_gguf(out, meta, ts).ok());
  return out;
}

class PeerFixture : public PeerInterop, public ::testing::WithParamInterface<std::string> {};

// Every fixture architecture, converted by weft ("keep": the checkpoint's own types), against
// llama.cpp: checks weft's writer conventions (names, Llama's Q/K permutation, Qwen3-Next's
// regrouped qkvz, tiled V heads, ssm_a, stacked experts, folded norms) against the real loader.
TEST_P(PeerFixture, MatchesLlamaCpp) {
  const std::string dir = test::source_dir() + "/tests/data/fixtures/" + GetParam();
  const std::string tmp = test::temp_dir("peerfx");
  ASSERT_TRUE(convert_hf_to_gguf(dir, tmp + "/raw.gguf", WeightScheme::kKeep).ok());
  auto hf = Model::load(dir);
  ASSERT_TRUE(hf.ok());
  const int64_t V = hf.value()->config().vocab_size;
  const std::string gguf = with_all_experts(tmp + "/raw.gguf", tmp + "/model.gguf");
  std::vector<int32_t> ids;
  uint64_t st = 7;
  for (int i = 0; i < 64; ++i) {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    ids.push_back(int32_t((st >> 33) % uint64_t(V)));
  }
  {
    std::ofstream o(tmp + "/ids.txt");
    for (int32_t id : ids) o << id << ' ';
  }
  std::string out;
  const int rc = test::run_command("cd " + peers_ + " && node logits.mjs " + gguf + " " + tmp + "/ids.txt " + tmp + "/llama.f32 2>&1", &out);
  ASSERT_EQ(rc, 0) << out;
  const std::vector<float> w = weft_logits(gguf, ids);
  const int64_t T = int64_t(ids.size());
  ASSERT_EQ(int64_t(w.size()), T * V);
  std::vector<float> l(static_cast<size_t>(T * V));
  std::ifstream in(tmp + "/llama.f32", std::ios::binary);
  in.read(reinterpret_cast<char*>(l.data()), std::streamsize(l.size() * 4));
  ASSERT_EQ(in.gcount(), std::streamsize(l.size() * 4)) << out;
  double kl = 0;
  int64_t agree = 0, close = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* a = w.data() + t * V;
    const float* b = l.data() + t * V;
    double m = -1e30, z = 0, kt = 0;
    int64_t aw = 0, al = 0;
    for (int64_t v = 0; v < V; ++v) {
      if (a[v] > a[aw]) aw = v;
      if (b[v] > b[al]) al = v;
      m = std::max(m, double(a[v]));
    }
    for (int64_t v = 0; v < V; ++v) z += std::exp(a[v] - m);
    for (int64_t v = 0; v < V; ++v) {
      const double lp = a[v] - m - std::log(z);
      kt += std::exp(lp) * (lp - std::max(double(b[v]), -700.0));
    }
    kl += kt;
    close += kt <= 1e-3;
    agree += aw == al;
    if (std::getenv("WEFT_PEER_VERBOSE")) std::printf("  position %lld: KL %.3g\n", (long long)t, kt);
  }
  kl /= double(T);
  std::printf("[ %s ] %lld tokens: top-1 agreement %.2f%%, mean KL(weft || llama.cpp) %.3g, positions with KL <= 1e-3 %.1f%%\n",
              GetParam().c_str(), (long long)T, 100.0 * double(agree) / double(T), kl, 100.0 * double(close) / double(T));
  // The hybrid MoE fixture stays further apart (mean KL 1.7e-3, position 0 at 7e-5): random
  // weights amplify llama.cpp's bf16 rounding of matmul activations over positions; the trained
  // shipped model (same GDN and gated attention) agrees to 1.5e-5. Not yet traced further.
  const bool hybrid_moe = GetParam() == "qwen35_moe_hd256";
  EXPECT_LE(kl, hybrid_moe ? 5e-3 : 1e-3) << GetParam();
  EXPECT_GE(double(close) / double(T), hybrid_moe ? 0.5 : 0.95) << GetParam();
  EXPECT_GE(double(agree) / double(T), hybrid_moe ? 0.9 : 0.95) << GetParam();
}

// Not listed: qwen35_dense, qwen35_moe_experts_f16, qwen35_vl_tied_sharded and qwen3next_moe
// have linear_value_head_dim (24) != linear_key_head_dim (16), which this llama.cpp does not
// load ("attn_qkv has wrong shape; expected 64, 128": it sizes V from the key head dim), and
// qwen3next_moe also has a dense layer (mlp_only_layers), which its qwen3next does not.
INSTANTIATE_TEST_SUITE_P(All, PeerFixture, ::testing::Values("qwen35_moe_hd256", "qwen3_tied_f16", "llama_f32"));

}  // namespace
}  // namespace weft
