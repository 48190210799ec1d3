// The per-tensor type mixes of `weft convert / quantize --type q4_k_m | q5_k_m | q8_0 | q6_k |
// q4_0` against llama.cpp's llama_tensor_get_type (src/llama-quant.cpp), case by case. The
// expected types below are worked out by hand from llama.cpp's rules, not computed by weft's code:
//   * output.weight (or token_embd when tied): q8_0 when the default type's block does not divide
//     a row, else q6_K unless the default is q8_0;
//   * "attn_v-like" tensors (attn_v and the Gated DeltaNet's attn_qkv, one counter over both in
//     file order): q6_K on use_more_bits(i, n) under q4_k_m / q5_k_m; q8_0 with exactly 8 experts;
//   * attn_k: q8_0 with exactly 8 experts; attn_output: q5_K with 8 experts under q4_k_m;
//   * ffn_down (dense, _exps, _shexp): q6_K on use_more_bits(layer, n_layer) under q4_k_m / q5_k_m;
//   * routers (ffn_gate_inp, ffn_gate_inp_shexp) keep their type; ssm_alpha / ssm_beta are
//     quantized like any matrix; rows that are not whole blocks fall back (weft: q8_0, then f16).
// use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "io/gguf.h"
#include "model/gguf_convert.h"
#include "test_util.h"

namespace weft {
namespace {

GgmlType type_of(WeightScheme s, const std::string& name, int64_t layer, int64_t n_layers, int64_t i_v, int64_t n_v,
                 int64_t experts, int64_t cols = 2048, bool tied = false) {
  TensorRole r;
  r.gguf_name = name;
  r.layer = layer;
  r.n_layers = n_layers;
  r.i_attn_v = i_v;
  r.n_attn_v = n_v;
  r.n_experts = experts;
  r.tied_output = tied;
  return weight_type_for(s, r, GgmlType::kBF16, cols);
}

TEST(GgufMix, Q4KMRulesForAHybridModel) {
  // 8 layers, full attention at 3 and 7: attn_v-like tensors in file order are
  // blk.0..2 attn_qkv (i 0..2), blk.3 attn_v (3), blk.4..6 attn_qkv (4..6), blk.7 attn_v (7).
  // use_more_bits(i, 8) holds for i = 0, 3, 6, 7.
  const auto S = WeightScheme::kQ4_K_M;
  const GgmlType K4 = GgmlType::kQ4_K, K6 = GgmlType::kQ6_K;
  const GgmlType qkv[8] = {K6, K4, K4, K6, K4, K4, K6, K6};
  for (int64_t i = 0; i < 8; ++i) {
    const bool full = i == 3 || i == 7;
    const std::string n = "blk." + std::to_string(i) + (full ? ".attn_v.weight" : ".attn_qkv.weight");
    EXPECT_EQ(type_of(S, n, i, 8, i, 8, 32), qkv[i]) << n;
    // ffn_down follows the layer: the same layers 0, 3, 6, 7 here.
    EXPECT_EQ(type_of(S, "blk." + std::to_string(i) + ".ffn_down_exps.weight", i, 8, 0, 8, 32), qkv[i]) << i;
    EXPECT_EQ(type_of(S, "blk." + std::to_string(i) + ".ffn_down_shexp.weight", i, 8, 0, 8, 32), qkv[i]) << i;
  }
  EXPECT_EQ(type_of(S, "blk.1.ssm_out.weight", 1, 8, 0, 8, 32), K4);
  EXPECT_EQ(type_of(S, "blk.1.attn_gate.weight", 1, 8, 0, 8, 32), K4);
  EXPECT_EQ(type_of(S, "blk.1.ssm_alpha.weight", 1, 8, 0, 8, 32), K4);
  EXPECT_EQ(type_of(S, "blk.1.ssm_beta.weight", 1, 8, 0, 8, 32), K4);
  EXPECT_EQ(type_of(S, "blk.1.ffn_gate_exps.weight", 1, 8, 0, 8, 32), K4);
  EXPECT_EQ(type_of(S, "blk.3.attn_k.weight", 3, 8, 0, 8, 32), K4);
  EXPECT_EQ(type_of(S, "blk.3.attn_output.weight", 3, 8, 0, 8, 32), K4);
  EXPECT_EQ(type_of(S, "blk.1.ffn_gate_inp.weight", 1, 8, 0, 8, 32), GgmlType::kBF16);
  EXPECT_EQ(type_of(S, "blk.1.ffn_gate_inp_shexp.weight", 1, 8, 0, 8, 32), GgmlType::kBF16);
  EXPECT_EQ(type_of(S, "output.weight", -1, 8, 0, 8, 32), K6);
  EXPECT_EQ(type_of(S, "token_embd.weight", -1, 8, 0, 8, 32), K4);
  EXPECT_EQ(type_of(S, "token_embd.weight", -1, 8, 0, 8, 32, 2048, /*tied=*/true), K6);
  // Rows of 384 values are not whole 256-blocks: the output head goes to q8_0 (llama.cpp too);
  // other matrices to q8_0 (llama.cpp: q5_0 from q4_K, q5_1 from q5_K, q8_0 from q6_K).
  EXPECT_EQ(type_of(S, "output.weight", -1, 8, 0, 8, 32, 384), GgmlType::kQ8_0);
  EXPECT_EQ(type_of(S, "blk.1.ffn_up_exps.weight", 1, 8, 0, 8, 32, 384), GgmlType::kQ8_0);
  EXPECT_EQ(type_of(S, "blk.1.ffn_up_exps.weight", 1, 8, 0, 8, 32, 100), GgmlType::kF16);
}

TEST(GgufMix, EightExpertRulesAndOtherSchemes) {
  // Exactly 8 experts: attn_v-like and attn_k to q8_0 under every quantized scheme, attn_output
  // q5_K under q4_k_m only.
  for (WeightScheme s : {WeightScheme::kQ4_K_M, WeightScheme::kQ5_K_M, WeightScheme::kQ6_K, WeightScheme::kQ4_0}) {
    EXPECT_EQ(type_of(s, "blk.1.attn_qkv.weight", 1, 4, 1, 4, 8), GgmlType::kQ8_0);
    EXPECT_EQ(type_of(s, "blk.3.attn_v.weight", 3, 4, 3, 4, 8), GgmlType::kQ8_0);
    EXPECT_EQ(type_of(s, "blk.3.attn_k.weight", 3, 4, 3, 4, 8), GgmlType::kQ8_0);
  }
  EXPECT_EQ(type_of(WeightScheme::kQ4_K_M, "blk.3.attn_output.weight", 3, 4, 0, 4, 8), GgmlType::kQ5_K);
  EXPECT_EQ(type_of(WeightScheme::kQ5_K_M, "blk.3.attn_output.weight", 3, 4, 0, 4, 8), GgmlType::kQ5_K);  // the default
  EXPECT_EQ(type_of(WeightScheme::kQ6_K, "blk.3.attn_output.weight", 3, 4, 0, 4, 8), GgmlType::kQ6_K);
  // q5_k_m: q6_K on the same use_more_bits layers, q5_K elsewhere (n = 4: layers 2 and 3).
  EXPECT_EQ(type_of(WeightScheme::kQ5_K_M, "blk.0.ffn_down.weight", 0, 4, 0, 4, 0), GgmlType::kQ5_K);
  EXPECT_EQ(type_of(WeightScheme::kQ5_K_M, "blk.2.ffn_down.weight", 2, 4, 0, 4, 0), GgmlType::kQ6_K);
  EXPECT_EQ(type_of(WeightScheme::kQ5_K_M, "blk.3.ffn_down.weight", 3, 4, 0, 4, 0), GgmlType::kQ6_K);
  // q8_0: everything q8_0, the output head included; q4_0: q4_0 with a q6_K output head.
  EXPECT_EQ(type_of(WeightScheme::kQ8_0, "output.weight", -1, 4, 0, 4, 0), GgmlType::kQ8_0);
  EXPECT_EQ(type_of(WeightScheme::kQ8_0, "blk.0.ssm_alpha.weight", 0, 4, 0, 4, 0), GgmlType::kQ8_0);
  EXPECT_EQ(type_of(WeightScheme::kQ8_0, "blk.0.attn_qkv.weight", 0, 4, 0, 4, 0), GgmlType::kQ8_0);
  EXPECT_EQ(type_of(WeightScheme::kQ4_0, "output.weight", -1, 4, 0, 4, 0), GgmlType::kQ6_K);
  EXPECT_EQ(type_of(WeightScheme::kQ4_0, "blk.0.attn_qkv.weight", 0, 4, 0, 4, 0), GgmlType::kQ4_0);
  EXPECT_EQ(type_of(WeightScheme::kKeep, "blk.0.attn_qkv.weight", 0, 4, 0, 4, 0), GgmlType::kBF16);
}

// End to end: `weft synth --preset tiny` (4 layers, full attention at 3, 8 experts, H 256)
// written as q4_k_m; every tensor's type in the file as llama.cpp would choose it.
TEST(GgufMix, SynthFileHasLlamaCppMix) {
  const std::string tmp = test::temp_dir("gguf_mix");
  std::string out;
  ASSERT_EQ(test::run_command(test::weft_binary() + " synth --preset tiny -q -o " + tmp + "/m.gguf --format gguf --type q4_k_m 2>&1", &out), 0) << out;
  auto f = GgufFile::open(tmp + "/m.gguf");
  ASSERT_TRUE(f.ok()) << f.status().message();
  std::map<std::string, GgmlType> want = {
      {"output.weight", GgmlType::kQ6_K}, {"token_embd.weight", GgmlType::kQ4_K},
      {"blk.3.attn_output.weight", GgmlType::kQ5_K}, {"blk.3.attn_k.weight", GgmlType::kQ8_0},
      {"blk.3.attn_v.weight", GgmlType::kQ8_0},  {"blk.3.attn_q.weight", GgmlType::kQ4_K}};
  for (int l = 0; l < 4; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    // Expert rows of 64 values: ffn_down (q6_K on layers 2, 3 by use_more_bits(l, 4), else
    // q4_K) falls back to q8_0 (llama.cpp: q8_0 from q6_K, q5_0 from q4_K).
    want[b + "ffn_down_exps.weight"] = GgmlType::kQ8_0;
    want[b + "ffn_gate_exps.weight"] = GgmlType::kQ4_K;
    want[b + "ffn_gate_inp.weight"] = GgmlType::kBF16;
    if (l != 3) {
      want[b + "attn_qkv.weight"] = GgmlType::kQ8_0;  // 8 experts
      want[b + "ssm_alpha.weight"] = GgmlType::kQ4_K;
      want[b + "ssm_out.weight"] = GgmlType::kQ8_0;  // rows of 4 x 32 values: fallback
    }
  }
  for (const auto& [name, type] : want) {
    const GgufTensor* t = f->find_tensor(name);
    if (!t) {
      ADD_FAILURE() << "no tensor " << name;
      continue;
    }
    EXPECT_EQ(ggml_type_name(t->type), std::string(ggml_type_name(type))) << name;
  }
}

}  // namespace
}  // namespace weft
