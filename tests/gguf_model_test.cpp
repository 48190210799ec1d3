// GGUF models end to end: a checkpoint converted by convert_hf_to_gguf ("keep": the checkpoint's
// own weight types) and loaded back through Model::load gives logits bit-identical to the
// safetensors original on every fixture architecture and the shipped model; quantized
// conversions stay close; the tokenizer survives the trip; hostile files fail cleanly via the CLI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/session.h"
#include "io/gguf.h"
#include "io/gguf_layout.h"
#include "io/model_files.h"
#include "io/tokenizer.h"
#include "model/gguf_convert.h"
#include "model/model.h"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

std::vector<int32_t> test_ids(int64_t V, int64_t T) {
  std::vector<int32_t> ids;
  uint64_t s = 12345;
  for (int64_t i = 0; i < T; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    ids.push_back(int32_t((s >> 33) % uint64_t(V)));
  }
  return ids;
}

std::vector<float> logits_of(const std::string& path, const std::vector<int32_t>& ids) {
  auto model = Model::load(path);
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (!model.ok()) return {};
  const int64_t V = model.value()->config().vocab_size, T = int64_t(ids.size());
  SessionOptions so;
  so.threads = 2;
  so.batch = 16;
  Session session(*model.value(), so);
  std::vector<float> logits(static_cast<size_t>(T * V)), last(static_cast<size_t>(V));
  EXPECT_TRUE(session.feed(ids.data(), T, logits.data(), last.data()).ok());
  return logits;
}

std::string model_dir_of(const std::string& name) {
  if (name == "weft-tiny-hybrid") return test::source_dir() + "/models/weft-tiny-hybrid";
  return test::source_dir() + "/tests/data/fixtures/" + name;
}

class GgufRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufRoundTrip, SameTypeBitIdentical) {
  const std::string dir = model_dir_of(GetParam());
  const std::string out = test::temp_dir("gguf_rt") + "/model.gguf";
  auto hf = Model::load(dir);
  ASSERT_TRUE(hf.ok());
  // --type bf16 for a bf16 checkpoint, f16 for f16, f32 for f32 (what "keep" picks).
  const DType d = hf.value()->weights().embed_tokens.dtype;
  const WeightScheme scheme = d == DType::kBF16 ? WeightScheme::kBF16 : d == DType::kF16 ? WeightScheme::kF16 : WeightScheme::kF32;
  Status s = convert_hf_to_gguf(dir, out, scheme);
  ASSERT_TRUE(s.ok()) << s.message();
  const std::vector<int32_t> ids = test_ids(hf.value()->config().vocab_size, 40);
  const std::vector<float> a = logits_of(dir, ids), b = logits_of(out, ids);
  ASSERT_EQ(a.size(), b.size());
  size_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += std::memcmp(&a[i], &b[i], 4) != 0;
  EXPECT_EQ(diff, 0u) << GetParam() << ": " << diff << " of " << a.size() << " logits differ";
}

INSTANTIATE_TEST_SUITE_P(All, GgufRoundTrip,
                         ::testing::Values("qwen35_dense", "qwen35_moe_hd256", "qwen35_moe_experts_f16",
                                           "qwen35_vl_tied_sharded", "qwen3next_moe", "qwen3_tied_f16", "llama_f32",
                                           "weft-tiny-hybrid"));

struct Fidelity {
  double kl = 0, top1 = 0, ppl_ratio = 1;
};

// Teacher-forced: position t's distribution vs the reference's; PPL over the true next tokens.
Fidelity fidelity_of(const std::vector<float>& ref, const std::vector<float>& got, const std::vector<int32_t>& ids) {
  const int64_t T = int64_t(ids.size()), V = int64_t(ref.size()) / T;
  Fidelity f;
  double nll_ref = 0, nll_got = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* p = ref.data() + t * V;
    const float* g = got.data() + t * V;
    double mp = -1e30, mg = -1e30, zp = 0, zg = 0;
    int64_t ap = 0, ag = 0;
    for (int64_t v = 0; v < V; ++v) {
      if (p[v] > mp) { mp = p[v]; ap = v; }
      if (g[v] > mg) { mg = g[v]; ag = v; }
    }
    for (int64_t v = 0; v < V; ++v) { zp += std::exp(p[v] - mp); zg += std::exp(g[v] - mg); }
    const double lzp = mp + std::log(zp), lzg = mg + std::log(zg);
    for (int64_t v = 0; v < V; ++v) {
      const double lp = p[v] - lzp, lg = g[v] - lzg;
      f.kl += std::exp(lp) * (lp - lg);
    }
    f.top1 += ap == ag;
    if (t + 1 < T) {
      nll_ref += lzp - p[ids[size_t(t + 1)]];
      nll_got += lzg - g[ids[size_t(t + 1)]];
    }
  }
  f.kl /= double(T);
  f.top1 /= double(T);
  f.ppl_ratio = std::exp((nll_got - nll_ref) / double(T - 1));
  return f;
}

// Weight-quantization fidelity of the shipped model vs its bf16 weights, on `ids`.
void check_quantized(const std::vector<int32_t>& ids, const char* what) {
  const std::string dir = model_dir_of("weft-tiny-hybrid");
  const std::string tmp = test::temp_dir("gguf_q");
  ASSERT_TRUE(convert_hf_to_gguf(dir, tmp + "/bf16.gguf", WeightScheme::kKeep).ok());
  const std::vector<float> ref = logits_of(dir, ids);
  for (WeightScheme sc : {WeightScheme::kQ8_0, WeightScheme::kQ6_K, WeightScheme::kQ5_K_M, WeightScheme::kQ4_K_M, WeightScheme::kQ4_0}) {
    const std::string q = tmp + "/" + weight_scheme_name(sc) + ".gguf";
    Status s = quantize_gguf(tmp + "/bf16.gguf", q, sc);
    ASSERT_TRUE(s.ok()) << s.message();
    const std::vector<float> got = logits_of(q, ids);
    ASSERT_EQ(got.size(), ref.size());
    const Fidelity f = fidelity_of(ref, got, ids);
    std::printf("[ %s %s ] %zu tokens: mean KL %.3g, top-1 %.2f%%, PPL ratio %.4f\n", what, weight_scheme_name(sc),
                ids.size(), f.kl, 100 * f.top1, f.ppl_ratio);
    const bool four_bit = sc == WeightScheme::kQ4_0 || sc == WeightScheme::kQ4_K_M;
    EXPECT_LT(f.kl, four_bit ? 0.1 : 0.02) << weight_scheme_name(sc);
    EXPECT_GT(f.top1, four_bit ? 0.7 : 0.9) << weight_scheme_name(sc);
  }
}

TEST(GgufModel, QuantizedShippedModelStaysClose) { check_quantized(test_ids(8192, 48), "random ids"); }

// The quantizer splits each matrix into tasks of a fixed number of rows, so the file's bytes do
// not depend on how many threads run them (`--threads` of convert / quantize / synth).
TEST(GgufModel, QuantizedBytesDoNotDependOnThreads) {
  const std::string tmp = test::temp_dir("gguf_threads");
  ASSERT_TRUE(convert_hf_to_gguf(model_dir_of("weft-tiny-hybrid"), tmp + "/bf16.gguf", WeightScheme::kKeep).ok());
  auto bytes = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(f), {});
  };
  std::vector<char> one;
  for (int threads : {1, 3, 0}) {
    const std::string q = tmp + "/q" + std::to_string(threads) + ".gguf";
    ASSERT_TRUE(quantize_gguf(tmp + "/bf16.gguf", q, WeightScheme::kQ4_K_M, {}, threads).ok());
    const std::vector<char> b = bytes(q);
    ASSERT_GT(b.size(), 1u << 20);
    if (threads == 1) one = b;
    else EXPECT_TRUE(b == one) << threads << " threads wrote other bytes than 1";
  }
}

// convert's progress counts source bytes against a total known from the start: the text
// model's tensors. It never goes back, never passes the total, and its last call (before the
// file is written) reports done == total.
TEST(GgufModel, ConvertProgressHasATotalFromTheStart) {
  const std::string dir = model_dir_of("weft-tiny-hybrid");
  auto files = ModelFiles::open(dir);
  ASSERT_TRUE(files.ok()) << files.status().message();
  int64_t want_total = 0;
  for (const auto& [name, t] : files.value()->tensors()) want_total += int64_t(t.nbytes);  // all text-model tensors
  struct Call {
    std::string tensor;
    int64_t done, total;
  };
  std::vector<Call> calls;
  const std::string tmp = test::temp_dir("gguf_progress");
  ASSERT_TRUE(convert_hf_to_gguf(dir, tmp + "/q8.gguf", WeightScheme::kQ8_0,
                                 [&](const std::string& t, int64_t d, int64_t n) { calls.push_back({t, d, n}); })
                  .ok());
  ASSERT_GT(calls.size(), 10u);
  int64_t prev = 0;
  for (const Call& c : calls) {
    EXPECT_EQ(c.total, want_total) << c.tensor;
    EXPECT_GE(c.done, prev) << c.tensor;
    EXPECT_LE(c.done, c.total) << c.tensor;
    prev = c.done;
  }
  // Before the last call (the write) the matrices alone have covered almost all the bytes.
  EXPECT_GT(calls[calls.size() - 2].done, want_total * 99 / 100);
  EXPECT_EQ(calls.back().done, want_total);
  EXPECT_NE(calls.back().tensor.find("writing"), std::string::npos);
}

// The figure on held-out text (../shared/data/corpora/heldout/wikitext2-test.txt, first 1024
// tokens); skipped where the corpus is absent.
TEST(GgufModel, QuantizedShippedModelOnHeldOutText) {
#ifndef NDEBUG
  GTEST_SKIP() << "the held-out figure (6 models x 1024 tokens) runs in Release builds";
#endif
  const std::string path = test::shared_dir() + "/data/corpora/heldout/wikitext2-test.txt";
  if (!fs::exists(path)) GTEST_SKIP() << "held-out corpus not found at " << path;
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text = text.substr(0, 16384);
  auto tok = Tokenizer::load_from_dir(model_dir_of("weft-tiny-hybrid"));
  ASSERT_TRUE(tok.ok());
  std::vector<int32_t> ids = tok->encode(text);
  if (ids.size() > 1024) ids.resize(1024);
  check_quantized(ids, "wikitext2");
}

TEST(GgufModel, TokenizerFromMetadataMatchesTokenizerJson) {
  const std::string dir = model_dir_of("weft-tiny-hybrid");
  const std::string out = test::temp_dir("gguf_tok") + "/model.gguf";
  ASSERT_TRUE(convert_hf_to_gguf(dir, out, WeightScheme::kQ8_0).ok());
  auto a = Tokenizer::load_from_dir(dir);
  auto b = Tokenizer::load_from_dir(out);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok()) << b.status().message();
  const std::string text = "It is a truth universally acknowledged, 1234 times; <|endoftext|> Ünïcode\n\n  end";
  EXPECT_EQ(a->encode(text), b->encode(text));
  EXPECT_EQ(a->eos_ids(), b->eos_ids());
  EXPECT_EQ(a->bos_id(), b->bos_id());
  EXPECT_EQ(a->add_bos(), b->add_bos());
}

TEST(GgufModel, LayoutMapsInvert) {
  for (auto map : {llama_rope_row_map(3, 8), vhead_tiled_map(2, 6), qwen3next_qkvz_row_map(2, 4, 4, 3)}) {
    std::vector<int64_t> seen(map.size(), 0);
    for (int64_t m : map) ++seen[size_t(m)];
    for (int64_t c : seen) EXPECT_EQ(c, 1);
  }
  EXPECT_EQ(vhead_tiled_map(2, 4), (std::vector<int64_t>{0, 2, 1, 3}));
  for (float a_log : {-3.0f, -0.5f, 0.0f, 0.7f, 1.3f, 2.9f}) {
    const float a = -std::exp(a_log);
    EXPECT_EQ(-std::exp(a_log_from_ssm_a(a)), a);
  }
}

TEST(GgufModel, HostileFilesFailCleanlyViaCli) {
  const std::string tmp = test::temp_dir("gguf_bad");
  const std::string good = tmp + "/good.gguf";
  ASSERT_TRUE(convert_hf_to_gguf(model_dir_of("qwen35_dense"), good, WeightScheme::kKeep).ok());
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto write = [&](const std::string& name, const std::string& b) {
    std::ofstream o(tmp + "/" + name, std::ios::binary);
    o.write(b.data(), std::streamsize(b.size()));
    return tmp + "/" + name;
  };
  std::vector<std::string> bad;
  bad.push_back(write("truncated.gguf", bytes.substr(0, bytes.size() / 2)));
  bad.push_back(write("header_only.gguf", bytes.substr(0, 24)));
  std::string wrong_arch = bytes;
  const size_t at = wrong_arch.find("qwen35");
  ASSERT_NE(at, std::string::npos);
  wrong_arch.replace(at, 6, "qwen99");
  bad.push_back(write("wrong_arch.gguf", wrong_arch));
  // A model missing a tensor: the same metadata, one tensor fewer.
  {
    auto f = GgufFile::open(good);
    ASSERT_TRUE(f.ok());
    std::vector<GgufTensorToWrite> ts;
    for (const GgufTensor& t : f->tensors())
      if (t.name != "blk.1.ssm_out.weight") ts.push_back({t.name, t.type, t.ne, t.data});
    ASSERT_TRUE(write_gguf(tmp + "/missing.gguf", f->metadata(), ts).ok());
    bad.push_back(tmp + "/missing.gguf");
  }
  for (const std::string& path : bad) {
    std::string output;
    const int rc = test::run_command(test::weft_binary() + " info -m " + path + " 2>&1", &output);
    EXPECT_NE(rc, 0) << path;
    EXPECT_NE(output.find("weft"), std::string::npos) << output;
    EXPECT_EQ(output.find("Assertion"), std::string::npos) << output;
    std::printf("[ %s ] %s", fs::path(path).filename().c_str(), output.c_str());
  }
}

// The quantizer's options: a negative --threads is refused with a message and a non-zero exit
// (nothing written); a good --threads with -q writes the file and prints no progress line.
TEST(GgufModel, QuantizerThreadsOptionViaCli) {
  const std::string tmp = test::temp_dir("gguf_threads_cli");
  const std::string in = tmp + "/in.gguf", out = tmp + "/out.gguf";
  ASSERT_TRUE(convert_hf_to_gguf(model_dir_of("qwen35_dense"), in, WeightScheme::kKeep).ok());
  std::string output;
  for (const std::string cmd : {" quantize " + in + " " + out + " --type q8_0 --threads -1",
                                " convert " + model_dir_of("qwen35_dense") + " -o " + out + " --threads -2"}) {
    EXPECT_NE(test::run_command(test::weft_binary() + cmd + " 2>&1", &output), 0) << cmd;
    EXPECT_NE(output.find("threads"), std::string::npos) << output;
    EXPECT_FALSE(fs::exists(out)) << cmd;
  }
  ASSERT_EQ(test::run_command(test::weft_binary() + " quantize " + in + " " + out + " --type q8_0 --threads 2 -q 2>&1",
                              &output), 0) << output;
  EXPECT_EQ(output.find("weft quantize:"), std::string::npos) << output;
  EXPECT_TRUE(fs::exists(out));
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// Metadata that lies (huge or inconsistent sizes, absurd layer names) is refused with a
// message, never a crash, a hang or a huge allocation.
TEST(GgufModel, HostileMetadataRejected) {
  const std::string tmp = test::temp_dir("gguf_meta");
  const std::string good = tmp + "/good.gguf";
  ASSERT_TRUE(convert_hf_to_gguf(model_dir_of("qwen35_dense"), good, WeightScheme::kKeep).ok());
  auto f = GgufFile::open(good);
  ASSERT_TRUE(f.ok());
  std::vector<GgufTensorToWrite> ts;
  for (const GgufTensor& t : f->tensors()) ts.push_back({t.name, t.type, t.ne, t.data});
  struct Case {
    const char* key;
    GgufValue value;
  };
  const Case cases[] = {
      {"qwen35.block_count", GgufValue::u32(4000000000u)},
      {"qwen35.block_count", GgufValue::u32(0)},
      {"qwen35.attention.head_count", GgufValue::u64(uint64_t(1) << 40)},
      {"qwen35.attention.key_length", GgufValue::u32(1u << 30)},
      {"qwen35.ssm.time_step_rank", GgufValue::u32(3)},
      {"qwen35.ssm.group_count", GgufValue::u32(4096)},
      {"qwen35.ssm.inner_size", GgufValue::string("many")},
      {"qwen35.nextn_predict_layers", GgufValue::u32(4)},
      {"tokenizer.ggml.model", GgufValue::string("gpt2")},  // a tokenizer with no tokens
  };
  int i = 0;
  for (const Case& c : cases) {
    auto meta = f->metadata();
    bool replaced = false;
    for (auto& [k, v] : meta)
      if (k == c.key) { v = c.value; replaced = true; }
    if (!replaced) meta.emplace_back(c.key, c.value);
    if (std::string(c.key) == "tokenizer.ggml.model")  // the converter's placeholder vocabulary, emptied
      std::erase_if(meta, [](const auto& kv) { return kv.first == "tokenizer.ggml.tokens"; });
    const std::string path = tmp + "/bad" + std::to_string(i++) + ".gguf";
    ASSERT_TRUE(write_gguf(path, meta, ts).ok());
    auto m = Model::load(path);
    auto tok = Tokenizer::load_from_dir(path);
    EXPECT_TRUE(!m.ok() || !tok.ok()) << c.key;
    std::printf("[ %s ] %s\n", c.key, (!m.ok() ? m.status() : tok.status()).message().c_str());
  }
  // A tensor whose layer number overflows is not a layer of the model: ignored, and the model
  // still loads.
  {
    auto ts2 = ts;
    ts2.push_back({"blk.99999999999999999999999.attn_norm.weight", GgmlType::kF32, {64}, ts[1].data});
    ASSERT_TRUE(write_gguf(tmp + "/overflow.gguf", f->metadata(), ts2).ok());
    auto m = Model::load(tmp + "/overflow.gguf");
    EXPECT_TRUE(m.ok()) << m.status().message();
  }
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// `weft synth --format gguf --type q4_k_m` writes one GGUF a model loads from, with the k-quant
// mix visible in `weft info`.
TEST(GgufModel, SynthGgufViaCli) {
  const std::string tmp = test::temp_dir("gguf_synth");
  std::string out;
  ASSERT_EQ(test::run_command(test::weft_binary() + " synth --preset tiny -o " + tmp + "/m.gguf --format gguf --type q4_k_m 2>&1", &out), 0) << out;
  ASSERT_EQ(test::run_command(test::weft_binary() + " info -m " + tmp + "/m.gguf 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("q4_K"), std::string::npos) << out;
  EXPECT_NE(out.find("q6_K"), std::string::npos) << out;
  ASSERT_EQ(test::run_command(test::weft_binary() + " quantize " + tmp + "/m.gguf " + tmp + "/m8.gguf --type q8_0 2>&1", &out), 0) << out;
  ASSERT_EQ(test::run_command(test::weft_binary() + " info -m " + tmp + "/m8.gguf 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("q8_0"), std::string::npos) << out;
  EXPECT_NE(test::run_command(test::weft_binary() + " convert " + tmp + "/nowhere -o " + tmp + "/x.gguf 2>&1", &out), 0);
  EXPECT_NE(test::run_command(test::weft_binary() + " quantize " + tmp + "/m.gguf " + tmp + "/y.gguf --type q3_k 2>&1", &out), 0);
  EXPECT_NE(out.find("q4_k_m"), std::string::npos) << out;  // the error lists the accepted types
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// general.alignment may be 1: tensors then sit at any byte offset. The loader copies views that
// are misaligned for their type, so logits stay bit-identical.
TEST(GgufModel, AlignmentOneLoadsBitIdentical) {
  for (const char* name : {"qwen3_tied_f16", "qwen35_dense", "llama_f32"}) {
    const std::string dir = model_dir_of(name), tmp = test::temp_dir("gguf_align");
    ASSERT_TRUE(convert_hf_to_gguf(dir, tmp + "/a32.gguf", WeightScheme::kKeep).ok());
    auto f = GgufFile::open(tmp + "/a32.gguf");
    ASSERT_TRUE(f.ok());
    auto meta = f->metadata();
    for (auto& [k, v] : meta)
      if (k == "general.alignment") v = GgufValue::u32(1);
    std::vector<GgufTensorToWrite> ts;
    for (const GgufTensor& t : f->tensors()) ts.push_back({t.name, t.type, t.ne, t.data});
    ASSERT_TRUE(write_gguf(tmp + "/a1.gguf", meta, ts).ok());
    auto g = GgufFile::open(tmp + "/a1.gguf");
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(g->alignment(), 1u);
    auto hf = Model::load(dir);
    ASSERT_TRUE(hf.ok());
    const std::vector<int32_t> ids = test_ids(hf.value()->config().vocab_size, 24);
    const std::vector<float> a = logits_of(dir, ids), b = logits_of(tmp + "/a1.gguf", ids);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << name;
  }
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// `weft fidelity --weights`: weight-type arms against the model's own weights. The model's own
// type (bf16 here) re-encoded is a self-check (exact zeros); q8_0 differs, but only a little.
TEST(GgufModel, FidelityWeightArms) {
  const std::string dir = model_dir_of("qwen35_dense"), tmp = test::temp_dir("fid_weights");
  auto hf = Model::load(dir);
  ASSERT_TRUE(hf.ok());
  {
    std::ofstream o(tmp + "/ids.txt");
    for (int32_t id : test_ids(hf.value()->config().vocab_size, 48)) o << id << ' ';
  }
  std::string out;
  const std::string cmd = test::weft_binary() + " fidelity -m " + dir + " --ids-file " + tmp +
                          "/ids.txt --weights bf16,q8_0 --threads 2 --out " + tmp + "/fid";
  ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
  std::ifstream in(tmp + "/fid/results.json");
  const auto j = nlohmann::json::parse(in);
  const auto& bf16 = j["arms"]["w:bf16"];
  const auto& q8 = j["arms"]["w:q8_0"];
  EXPECT_EQ(bf16["kld_max"].get<double>(), 0.0) << out;
  EXPECT_EQ(bf16["top1"].get<double>(), 1.0) << out;
  EXPECT_GT(q8["kld_mean"].get<double>(), 0.0) << out;
  EXPECT_LT(q8["kld_mean"].get<double>(), 0.05) << out;
  EXPECT_NE(test::run_command(test::weft_binary() + " fidelity -m " + dir + " --ids-file " + tmp +
                                  "/ids.txt --weights q3_k 2>&1", &out), 0);
  EXPECT_NE(out.find("q4_k_m"), std::string::npos) << out;  // the error lists the accepted types
}

}  // namespace
}  // namespace weft
