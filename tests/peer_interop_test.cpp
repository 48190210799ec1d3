// weft against llama.cpp on the same GGUF files: the shipped model converted by weft (bf16,
// q8_0, q4_k_m), evaluated teacher-forced by weft and by llama.cpp through node-llama-cpp 3.21.1
// (tools/peers/logits.mjs). Bounds: mean KL(weft || llama.cpp) <= 1e-3 for every type; same
// top-1 on >= 99% of positions for bf16 (issue 10's goal). For q8_0 / q4_k_m weft reaches 98% /
// 97% on this small model (flat distributions, many near-ties), short of the 99%: both
// quantize activations to 8 bits with the same rule, but the remaining per-matmul differences
// are not yet traced, so those two are held to 96% here. Skipped, saying why, where node or
// the package is absent (install: cd tools/peers && npm ci).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/session.h"
#include "io/tokenizer.h"
#include "model/gguf_convert.h"
#include "model/model.h"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

std::vector<float> weft_logits(const std::string& path, const std::vector<int32_t>& ids) {
  auto model = Model::load(path);
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (!model.ok()) return {};
  const int64_t V = model.value()->config().vocab_size, T = int64_t(ids.size());
  SessionOptions so;
  so.threads = 2;
  Session session(*model.value(), so);
  std::vector<float> logits(static_cast<size_t>(T * V)), last(static_cast<size_t>(V));
  EXPECT_TRUE(session.feed(ids.data(), T, logits.data(), last.data()).ok());
  return logits;
}

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
  std::string text =
      "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in "
      "want of a wife. However little known the feelings or views of such a man may be on his first entering a "
      "neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is "
      "considered the rightful property of some one or other of their daughters.";
  const std::string heldout = test::shared_dir() + "/data/corpora/heldout/wikitext2-test.txt";
  if (fs::exists(heldout)) {
    std::ifstream in(heldout);
    text = std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()).substr(0, 4096);
  }
  std::vector<int32_t> ids = tok->encode(text);
  if (ids.size() > 256) ids.resize(256);
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
    double kl = 0;
    int64_t agree = 0;
    for (int64_t t = 0; t < T; ++t) {
      const float* a = w.data() + t * V;
      const float* b = l.data() + t * V;
      double m = -1e30, z = 0;
      int64_t aw = 0, al = 0;
      for (int64_t v = 0; v < V; ++v) {
        if (a[v] > a[aw]) aw = v;
        if (b[v] > b[al]) al = v;
        m = std::max(m, double(a[v]));
      }
      for (int64_t v = 0; v < V; ++v) z += std::exp(a[v] - m);
      for (int64_t v = 0; v < V; ++v) {
        const double lp = a[v] - m - std::log(z);
        kl += std::exp(lp) * (lp - std::max(double(b[v]), -700.0));
      }
      agree += aw == al;
    }
    const double top1 = double(agree) / double(T);
    kl /= double(T);
    std::printf("[ %s ] %lld tokens: top-1 agreement %.2f%%, mean KL(weft || llama.cpp) %.3g\n", weight_scheme_name(sc),
                (long long)T, 100 * top1, kl);
    EXPECT_GE(top1, sc == WeightScheme::kKeep ? 0.99 : 0.96) << weight_scheme_name(sc);
    EXPECT_LE(kl, 1e-3) << weight_scheme_name(sc);
  }
}

}  // namespace
}  // namespace weft
