// Tests of the llama.cpp GGUF naming table: HF -> GGUF names per arch, the transforms the
// converter applies, and the way back.
#include <gtest/gtest.h>

#include "io/gguf_names.h"

namespace weft {
namespace {

std::string one(std::string_view arch, std::string_view hf) {
  auto m = gguf_name_for_hf(arch, hf);
  return m && m->gguf_names.size() == 1 ? m->gguf_names[0] : "<none>";
}

unsigned transforms(std::string_view arch, std::string_view hf) {
  auto m = gguf_name_for_hf(arch, hf);
  return m ? m->transforms : ~0u;
}

TEST(GgufNames, CommonTensors) {
  for (const auto& a : gguf_known_archs()) {
    EXPECT_EQ(one(a.arch, "model.embed_tokens.weight"), "token_embd.weight") << a.arch;
    EXPECT_EQ(one(a.arch, "lm_head.weight"), "output.weight");
    EXPECT_EQ(one(a.arch, "model.norm.weight"), "output_norm.weight");
    EXPECT_EQ(one(a.arch, "model.layers.12.input_layernorm.weight"), "blk.12.attn_norm.weight");
    EXPECT_EQ(one(a.arch, "model.layers.3.self_attn.v_proj.weight"), "blk.3.attn_v.weight");
    EXPECT_EQ(one(a.arch, "model.layers.3.self_attn.o_proj.weight"), "blk.3.attn_output.weight");
  }
  EXPECT_EQ(gguf_arch_info("gpt2"), nullptr);
  EXPECT_FALSE(gguf_name_for_hf("gpt2", "model.embed_tokens.weight").has_value());
  EXPECT_FALSE(gguf_name_for_hf("qwen35", "model.visual.blocks.0.attn.qkv.weight").has_value());
  EXPECT_FALSE(gguf_name_for_hf("qwen35", "model.layers.x.input_layernorm.weight").has_value());
}

TEST(GgufNames, LlamaAndQwen3) {
  EXPECT_EQ(one("llama", "model.layers.0.post_attention_layernorm.weight"), "blk.0.ffn_norm.weight");
  EXPECT_EQ(transforms("llama", "model.layers.0.self_attn.q_proj.weight"), kGgufLlamaRopePermute);
  EXPECT_EQ(transforms("llama", "model.layers.0.self_attn.k_proj.weight"), kGgufLlamaRopePermute);
  EXPECT_EQ(transforms("qwen3", "model.layers.0.self_attn.q_proj.weight"), kGgufNoTransform);
  EXPECT_EQ(one("qwen3", "model.layers.1.self_attn.q_norm.weight"), "blk.1.attn_q_norm.weight");
  EXPECT_EQ(transforms("qwen3", "model.layers.1.self_attn.q_norm.weight"), kGgufNoTransform);
  EXPECT_EQ(one("qwen3", "model.layers.2.mlp.down_proj.weight"), "blk.2.ffn_down.weight");
  EXPECT_STREQ(gguf_arch_info("llama")->rope_type, "norm");
  EXPECT_STREQ(gguf_arch_info("qwen3")->rope_type, "neox");
}

TEST(GgufNames, Qwen35) {
  EXPECT_EQ(one("qwen35", "model.layers.0.post_attention_layernorm.weight"), "blk.0.post_attention_norm.weight");
  EXPECT_EQ(transforms("qwen35", "model.layers.0.input_layernorm.weight"), kGgufNormPlusOne);
  EXPECT_EQ(transforms("qwen35", "model.norm.weight"), kGgufNormPlusOne);
  EXPECT_EQ(transforms("qwen35", "model.layers.3.self_attn.q_norm.weight"), kGgufNormPlusOne);
  EXPECT_EQ(one("qwen35", "model.layers.0.linear_attn.norm.weight"), "blk.0.ssm_norm.weight");
  EXPECT_EQ(transforms("qwen35", "model.layers.0.linear_attn.norm.weight"), kGgufNoTransform);
  EXPECT_EQ(one("qwen35", "model.layers.0.linear_attn.in_proj_qkv.weight"), "blk.0.attn_qkv.weight");
  EXPECT_EQ(one("qwen35", "model.layers.0.linear_attn.in_proj_z.weight"), "blk.0.attn_gate.weight");
  EXPECT_EQ(one("qwen35", "model.layers.0.linear_attn.in_proj_a.weight"), "blk.0.ssm_alpha.weight");
  EXPECT_EQ(one("qwen35", "model.layers.0.linear_attn.in_proj_b.weight"), "blk.0.ssm_beta.weight");
  EXPECT_EQ(one("qwen35", "model.layers.0.linear_attn.A_log"), "blk.0.ssm_a");
  EXPECT_EQ(transforms("qwen35", "model.layers.0.linear_attn.A_log"), kGgufNegExp | kGgufVHeadTiled);
  EXPECT_EQ(one("qwen35", "model.layers.0.linear_attn.dt_bias"), "blk.0.ssm_dt.bias");
  EXPECT_EQ(transforms("qwen35", "model.layers.0.linear_attn.conv1d.weight"), kGgufSqueeze | kGgufVHeadTiled);
  EXPECT_EQ(one("qwen35", "model.layers.0.linear_attn.out_proj.weight"), "blk.0.ssm_out.weight");
  EXPECT_EQ(one("qwen35", "model.layers.0.mlp.gate_proj.weight"), "blk.0.ffn_gate.weight");
  EXPECT_FALSE(gguf_name_for_hf("qwen35", "model.layers.0.mlp.experts.gate_proj").has_value());  // dense arch
  EXPECT_STREQ(gguf_arch_info("qwen35")->rope_type, "imrope");
}

TEST(GgufNames, Qwen35MoeExperts) {
  auto m = gguf_name_for_hf("qwen35moe", "model.layers.4.mlp.experts.gate_up_proj");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->gguf_names, (std::vector<std::string>{"blk.4.ffn_gate_exps.weight", "blk.4.ffn_up_exps.weight"}));
  EXPECT_EQ(m->transforms, kGgufSplitGateUp);
  EXPECT_EQ(one("qwen35moe", "model.layers.4.mlp.experts.down_proj"), "blk.4.ffn_down_exps.weight");
  EXPECT_EQ(one("qwen35moe", "model.layers.4.mlp.experts.down_proj.weight"), "blk.4.ffn_down_exps.weight");
  // Per-expert checkpoints are stacked.
  EXPECT_EQ(one("qwen35moe", "model.layers.4.mlp.experts.17.up_proj.weight"), "blk.4.ffn_up_exps.weight");
  EXPECT_EQ(transforms("qwen35moe", "model.layers.4.mlp.experts.17.up_proj.weight"), kGgufStackExperts);
  EXPECT_EQ(one("qwen35moe", "model.layers.4.mlp.gate.weight"), "blk.4.ffn_gate_inp.weight");
  EXPECT_EQ(one("qwen35moe", "model.layers.4.mlp.shared_expert.up_proj.weight"), "blk.4.ffn_up_shexp.weight");
  EXPECT_EQ(one("qwen35moe", "model.layers.4.mlp.shared_expert_gate.weight"), "blk.4.ffn_gate_inp_shexp.weight");
}

TEST(GgufNames, Qwen3Next) {
  auto m = gguf_name_for_hf("qwen3next", "model.layers.0.linear_attn.in_proj_qkvz.weight");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->gguf_names, (std::vector<std::string>{"blk.0.attn_qkv.weight", "blk.0.attn_gate.weight"}));
  EXPECT_EQ(m->transforms, kGgufSplitQkvz);
  EXPECT_EQ(one("qwen3next", "model.layers.0.linear_attn.in_proj_ba.weight"), "blk.0.ssm_ba.weight");
  EXPECT_EQ(transforms("qwen3next", "model.layers.0.linear_attn.A_log"), kGgufNegExp);  // no V-head reorder
  EXPECT_FALSE(gguf_name_for_hf("qwen3next", "model.layers.0.linear_attn.in_proj_qkv.weight").has_value());
}

TEST(GgufNames, BackToHf) {
  EXPECT_EQ(*hf_name_for_gguf("qwen35moe", "blk.7.ffn_gate_exps.weight"), "model.layers.7.mlp.experts.gate_proj");
  EXPECT_EQ(*hf_name_for_gguf("qwen35", "blk.2.ssm_a"), "model.layers.2.linear_attn.A_log");
  EXPECT_EQ(*hf_name_for_gguf("llama", "blk.0.ffn_norm.weight"), "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(*hf_name_for_gguf("qwen3next", "blk.1.attn_gate.weight"), "model.layers.1.linear_attn.in_proj_qkvz.weight");
  EXPECT_EQ(*hf_name_for_gguf("qwen3", "output.weight"), "lm_head.weight");
  EXPECT_FALSE(hf_name_for_gguf("qwen3", "blk.0.ssm_a").has_value());
  EXPECT_FALSE(hf_name_for_gguf("qwen35", "blk.40.nextn.eh_proj.weight").has_value());
  // Every forward mapping of a single target comes back (the table is consistent both ways).
  const char* hf[] = {"model.layers.5.self_attn.q_proj.weight", "model.layers.5.mlp.up_proj.weight",
                      "model.layers.5.linear_attn.out_proj.weight", "model.norm.weight"};
  for (const char* h : hf) {
    auto m = gguf_name_for_hf("qwen35", h);
    ASSERT_TRUE(m.has_value()) << h;
    EXPECT_EQ(*hf_name_for_gguf("qwen35", m->gguf_names[0]), h);
  }
  EXPECT_EQ(gguf_key("qwen35", "attention.head_count_kv"), "qwen35.attention.head_count_kv");
  EXPECT_FALSE(gguf_hparam_keys().empty());
}

}  // namespace
}  // namespace weft
