// Tests of `weft bench`: the byte model against the Qwen3.5-35B-A3B cache table, the ceiling
// formula, snapshot/quantize-once of the KV cache, and tiny end-to-end runs (JSON, verdicts).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "cache/kv_cache.h"
#include "kernels/cpu/kv_quant.h"
#include "lab/bench.h"
#include "model/config.h"
#include "model/footprint.h"
#include "model/synth.h"
#include "nlohmann/json.hpp"
#include "test_util.h"

namespace weft {
namespace {

TEST(BenchByteModel, Qwen35_35B_A3B_CacheTable) {
  auto spec = synth_preset("qwen3.5-35b-a3b");
  ASSERT_TRUE(spec.ok());
  auto cfg = parse_model_config(synth_config_json(spec.value()));
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  const uint64_t bpt = kv_bytes_per_token(cfg.value(), DType::kF16, DType::kF16);
  EXPECT_EQ(bpt, 20480u);  // 10 full-attention layers x 2 KV heads x 256 x (K+V) x 2 bytes
  const uint64_t MiB = 1 << 20;
  EXPECT_EQ(bpt * 8192, 160 * MiB);
  EXPECT_EQ(bpt * 32768, 640 * MiB);
  EXPECT_EQ(bpt * 65536, 1280 * MiB);             // 1.25 GiB
  EXPECT_EQ(bpt * 262144, 5ull * 1024 * MiB);     // 5.0 GiB
  // q8_0: 34 bytes per 32 values.
  EXPECT_EQ(kv_bytes_per_token(cfg.value(), DType::kQ8_0, DType::kQ8_0), 10u * 2 * 2 * 8 * 34);
}

TEST(BenchByteModel, CeilingFormula) {
  EXPECT_DOUBLE_EQ(lab::kv_ceiling(0.0, 0.53125), 1.0);
  EXPECT_DOUBLE_EQ(lab::kv_ceiling(1.0, 0.5), 2.0);
  EXPECT_NEAR(lab::kv_ceiling(0.5, 0.5), 4.0 / 3.0, 1e-12);
  EXPECT_NEAR(lab::kv_ceiling(0.2, 34.0 / 64.0), 1.0 / (1.0 - 0.2 * 30.0 / 64.0), 1e-12);
  Footprint fp;
  fp.active_weight_bytes = 1000;
  fp.gdn_state_bytes = 50;  // read + write = 100
  EXPECT_NEAR(lab::kv_share_at(fp, 10, 110), 1100.0 / 2200.0, 1e-12);
}

TEST(BenchVerdict, BothOutcomes) {
  EXPECT_EQ(lab::kill_verdict(1.05, 32768, 0.10), "ceiling at 32K under 10%: not worth a kernel");
  EXPECT_EQ(lab::kill_verdict(1.25, 32768, 0.10), "go: next, estimate the dequantization cost");
}

TEST(BenchSnapshot, AssignFromQuantizesOnce) {
  KvCacheSpec s;
  s.n_layers = 2; s.n_kv_heads = 2; s.head_dim = 64; s.page_tokens = 16;
  KvCache f16(s);
  std::vector<float> k(40 * 2 * 64), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) { k[i] = std::sin(0.1f * float(i)); v[i] = std::cos(0.07f * float(i)); }
  for (int64_t l = 0; l < 2; ++l) f16.append(l, k.data(), v.data(), 40);
  s.k_type = s.v_type = DType::kQ8_0;
  KvCache q(s), direct(s);
  for (int64_t l = 0; l < 2; ++l) direct.append(l, k.data(), v.data(), 40);
  q.assign_from(f16);
  EXPECT_EQ(q.length(1), 40);
  EXPECT_EQ(q.bytes_allocated(), direct.bytes_allocated());
  // Same row as a direct q8_0 append, up to the f16 rounding in between: decoded values close.
  std::vector<float> a(64), b(64);
  for (int64_t pos : {0, 17, 39}) {
    decode_kv_row(DType::kQ8_0, q.view(1).k_row(1, pos), a.data(), 64);
    decode_kv_row(DType::kQ8_0, direct.view(1).k_row(1, pos), b.data(), 64);
    for (int i = 0; i < 64; ++i) EXPECT_NEAR(a[i], b[i], 0.02f);
  }
  KvCache back(f16.spec());
  back.assign_from(f16);  // same type: byte copy
  for (int i = 0; i < 64; ++i)
    EXPECT_EQ(0, std::memcmp(back.view(0).v_row(0, 33), f16.view(0).v_row(0, 33), 128));
}

std::string bench_cmd(const std::string& args) {
  static const std::string cache = test::temp_dir("bench_cache");
  // stderr (progress, model notes) is dropped so stdout is exactly what --json prints.
  return "(XDG_CACHE_HOME=" + cache + " " + test::weft_binary() + " bench --synthetic tiny --bandwidth-mib 16 -q " +
         args + " 2>/dev/null)";
}

TEST(BenchCli, TinyEndToEndJson) {
  const std::string out = test::temp_dir("bench_out");
  std::string text;
  ASSERT_EQ(test::run_command(bench_cmd("--ctx 64,128 --gen 4 --repeats 2 --json --out " + out + ""), &text), 0) << text;
  auto j = nlohmann::json::parse(text);  // exactly one object
  ASSERT_TRUE(j.is_object());
  EXPECT_GT(j["bandwidth_gb_s"].get<double>(), 0);
  EXPECT_TRUE(j["model"].is_string());
  ASSERT_EQ(j["depths"].size(), 2u);
  EXPECT_EQ(j["depths"][0]["ctx"], 64);
  EXPECT_EQ(j["depths"][1]["ctx"], 128);
  for (const auto& d : j["depths"]) {
    EXPECT_GT(d["prefill_tok_s"].get<double>(), 0);
    EXPECT_GT(d["kv_share"].get<double>(), 0);
    EXPECT_GT(d["ceiling"]["q8_0"].get<double>(), 1.0);
    for (const char* arm : {"f16", "q8_0"}) {
      const auto& a = d["arms"][arm];
      ASSERT_TRUE(a.is_object()) << arm;
      EXPECT_GT(a["tok_s"].get<double>(), 0);
      EXPECT_EQ(a["ci"].size(), 2u);
      EXPECT_GT(a["ratio"].get<double>(), 0);
      EXPECT_EQ(a["ratio_ci"].size(), 2u);
      EXPECT_GT(a["bytes_per_token"].get<uint64_t>(), 0u);
      EXPECT_GT(a["roofline_frac"].get<double>(), 0);
      EXPECT_GT(a["kv_bytes_resident"].get<uint64_t>(), 0u);
    }
    EXPECT_DOUBLE_EQ(d["arms"]["f16"]["ratio"].get<double>(), 1.0);
  }
  EXPECT_TRUE(j.contains("verdict"));
  EXPECT_TRUE(j.contains("energy"));
  for (const char* f : {"results.json", "report.md", "bench.svg"})
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f;
}

TEST(BenchCli, CeilingOnlyVerdicts) {
  std::string text;
  ASSERT_EQ(test::run_command(bench_cmd("--ctx 64 --gen 2 --repeats 1 --ceiling-only --kill-below 100 --json"), &text), 0) << text;
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["verdict"], "ceiling at 32K under 10000%: not worth a kernel");
  EXPECT_EQ(j["depths"][0]["arms"].size(), 1u);  // f16 alone
  ASSERT_EQ(test::run_command(bench_cmd("--ctx 64 --gen 2 --repeats 1 --ceiling-only --kill-below 0"), &text), 0) << text;
  EXPECT_NE(text.find("verdict: go: next, estimate the dequantization cost"), std::string::npos) << text;
}

TEST(BenchCli, UsageErrors) {
  std::string text;
  EXPECT_EQ(test::run_command(test::weft_binary() + " bench --no-such-flag 2>&1", &text), 2) << text;
  EXPECT_EQ(test::run_command(test::weft_binary() + " bench --help 2>&1", &text), 0) << text;
}

}  // namespace
}  // namespace weft
