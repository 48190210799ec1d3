// Alignment (issue 8): safetensors allows a header of any length, so the data region (and every
// tensor in it) may start at an odd file offset, hence an odd address once mapped. Loading such
// a file must give the same model as the aligned original: every bound weight aligned to its
// element size (the loader copies misaligned matrices, see Model::load), and logits bit-identical.
// Build with -DCMAKE_CXX_FLAGS=-fsanitize=alignment,undefined to have UBSan check every read.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/session.h"
#include "model/model.h"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

using test::read_bytes;

// Rewrites a safetensors file with its header padded by spaces (legal JSON whitespace) so that
// the data region starts at an odd offset: 8 + header length is odd.
void write_odd_offset_copy(const std::string& src, const std::string& dst) {
  const std::string file = read_bytes(src);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | uint8_t(file[size_t(i)]);
  std::string header = file.substr(8, n);
  while (header.size() > 0 && header.back() == ' ') header.pop_back();
  header += "   ";
  if ((8 + header.size()) % 2 == 0) header += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char(uint8_t(uint64_t(header.size()) >> (8 * i)));
  out += header + file.substr(8 + n);
  std::ofstream(dst, std::ios::binary) << out;
}

// A copy of a fixture model directory whose every safetensors file has an odd data offset.
std::string odd_offset_model(const std::string& src_dir, const std::string& dst_dir) {
  fs::create_directories(dst_dir);
  for (const auto& e : fs::directory_iterator(src_dir)) {
    const std::string name = e.path().filename().string();
    if (name == "reference.safetensors") continue;
    if (e.path().extension() == ".safetensors") write_odd_offset_copy(e.path().string(), dst_dir + "/" + name);
    else if (e.is_regular_file()) fs::copy_file(e.path(), dst_dir + "/" + name);
  }
  return dst_dir;
}

bool aligned(const Matrix& m) {
  return m.data == nullptr || reinterpret_cast<uintptr_t>(m.data) % dtype_size(m.dtype) == 0;
}

// Every matrix the forward pass reads, for the alignment check.
std::vector<const Matrix*> all_matrices(const ModelWeights& w) {
  std::vector<const Matrix*> out = {&w.embed_tokens, &w.lm_head};
  auto add_mlp = [&](const ExpertWeights& e) { out.insert(out.end(), {&e.gate_proj, &e.up_proj, &e.down_proj}); };
  for (const LayerWeights& L : w.layers) {
    const AttentionWeights& a = L.attn;
    const GdnWeights& g = L.gdn;
    out.insert(out.end(), {&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj, &g.in_proj_qkv, &g.in_proj_z, &g.in_proj_b,
                           &g.in_proj_a, &g.in_proj_qkvz, &g.in_proj_ba, &g.out_proj, &L.ffn.router,
                           &L.ffn.shared_expert_gate});
    add_mlp(L.ffn.dense);
    add_mlp(L.ffn.shared_expert);
    for (const ExpertWeights& e : L.ffn.experts) add_mlp(e);
  }
  return out;
}

std::vector<float> logits_of(const Model& model, int64_t T) {
  const int64_t V = model.config().vocab_size;
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) ids[size_t(i)] = int32_t((i * 37 + 5) % V);
  SessionOptions so;
  so.threads = 2;
  so.batch = 8;
  Session s(model, so);
  std::vector<float> logits(static_cast<size_t>(T * V));
  EXPECT_TRUE(s.feed(ids.data(), T, logits.data(), nullptr).ok());
  return logits;
}

class OddOffsetTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OddOffsetTest, LoadsAlignedAndGivesIdenticalLogits) {
  const std::string src = test::source_dir() + "/tests/data/fixtures/" + GetParam();
  const std::string tmp = test::temp_dir("odd-offset");
  const std::string odd = odd_offset_model(src, tmp + "/model");
  auto ref = Model::load(src);
  auto got = Model::load(odd);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  ASSERT_TRUE(got.ok()) << got.status().message();

  // The test means something only if the mapped bytes really are misaligned.
  const TensorView* embed = nullptr;
  for (const auto& [name, view] : got.value()->files().tensors())
    if (name.find("embed_tokens.weight") != std::string::npos) embed = &view;
  ASSERT_NE(embed, nullptr);
  EXPECT_NE(reinterpret_cast<uintptr_t>(embed->data) % 2, 0u) << "the fixture copy is not misaligned";

  for (const Matrix* m : all_matrices(got.value()->weights()))
    EXPECT_TRUE(aligned(*m)) << "a bound " << dtype_name(m->dtype) << " matrix is misaligned";

  const std::vector<float> a = logits_of(*ref.value(), 20), b = logits_of(*got.value(), 20);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << GetParam();
  fs::remove_all(tmp);
}

// bf16 dense, f16 MoE experts, f32 Llama, sharded multimodal wrapper, Qwen3-Next fused layout.
INSTANTIATE_TEST_SUITE_P(Fixtures, OddOffsetTest,
                         ::testing::Values("qwen35_dense", "qwen35_moe_experts_f16", "llama_f32",
                                           "qwen35_vl_tied_sharded", "qwen3next_moe"));

}  // namespace
}  // namespace weft
