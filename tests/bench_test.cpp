// Tests of `weft bench`: the byte model against the Qwen3.5-35B-A3B cache table, the ceiling
// formula, snapshot/quantize-once of the KV cache, the bandwidth probe's sizing and read kernels,
// the roofline and ceiling-claim judgements, resident-memory measurement, and tiny end-to-end
// runs whose invariants (f16 ratio exactly 1, roofline <= 1 or "does not apply", the baseline
// wherever f16 sits in --arms) are asserted, not only their signs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <vector>

#include "cache/kv_cache.h"
#include "core/cpu_features.h"
#include "kernels/cpu/kv_quant.h"
#include "lab/bandwidth.h"
#include "lab/bench.h"
#include "lab/bench_batch.h"
#include "lab/compute_probe.h"
#include "backend/backend_factory.h"
#include "lab/ceiling_claim.h"
#include "lab/resident.h"
#include "lab/roofline.h"
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

TEST(BenchBandwidth, CacheSizeStrings) {
  EXPECT_EQ(lab::parse_cache_size("32768K"), size_t(32) << 20);
  EXPECT_EQ(lab::parse_cache_size("1M"), size_t(1) << 20);
  EXPECT_EQ(lab::parse_cache_size("512"), 512u);
  EXPECT_EQ(lab::parse_cache_size(""), 0u);
  EXPECT_EQ(lab::parse_cache_size("K"), 0u);
  EXPECT_EQ(lab::parse_cache_size("12Q"), 0u);
}

TEST(BenchBandwidth, LastLevelCacheFromSysfsLayout) {
  namespace fs = std::filesystem;
  const std::string dir = test::temp_dir("fake_cache");
  auto index = [&](int i, const char* level, const char* type, const char* size) {
    fs::create_directories(dir + "/index" + std::to_string(i));
    std::ofstream(dir + "/index" + std::to_string(i) + "/level") << level << "\n";
    std::ofstream(dir + "/index" + std::to_string(i) + "/type") << type << "\n";
    std::ofstream(dir + "/index" + std::to_string(i) + "/size") << size << "\n";
  };
  index(0, "1", "Data", "32K");
  index(1, "1", "Instruction", "32K");
  index(2, "2", "Unified", "1024K");
  index(3, "3", "Unified", "32768K");
  index(4, "4", "Instruction", "65536K");  // an instruction cache never counts
  EXPECT_EQ(lab::last_level_cache_bytes(dir), size_t(32) << 20);
  EXPECT_EQ(lab::last_level_cache_bytes(dir + "/missing"), 0u);
}

TEST(BenchBandwidth, ProbeArraysAreFarBeyondTheCache) {
  const size_t MiB = size_t(1) << 20;
  EXPECT_EQ(lab::probe_array_bytes(16 * MiB, 32 * MiB), 256 * MiB);   // a test cannot undercut it
  EXPECT_EQ(lab::probe_array_bytes(16 * MiB, 0), lab::kMinProbeArrayBytes);
  EXPECT_EQ(lab::probe_array_bytes(16 * MiB, 96 * MiB), 768 * MiB);  // 8 x LLC
  EXPECT_EQ(lab::probe_array_bytes(1024 * MiB, 32 * MiB), 1024 * MiB);
}

TEST(BenchBandwidth, ReadKernelsAgree) {
  if (!cpu_features().avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  lab::Rng rng(11);
  std::vector<uint64_t> w(1000 + 37);
  for (uint64_t& x : w) x = rng.next();
  for (size_t n : {size_t(0), size_t(1), size_t(31), size_t(32), size_t(33), size_t(1000), w.size()})
    for (size_t off : {size_t(0), size_t(1), size_t(3)})
      if (off + n <= w.size()) EXPECT_EQ(lab::read_xor_avx2(w.data() + off, n), lab::read_xor_scalar(w.data() + off, n)) << n;
}

TEST(BenchBandwidth, ProbeFloorsItsArraysAndReportsThreePasses) {
  auto b = lab::measure_bandwidth(size_t(1) << 20, 1, nullptr);
  EXPECT_GE(b.buffer_bytes, lab::probe_array_bytes(size_t(1) << 20, lab::last_level_cache_bytes()));
  EXPECT_GT(b.copy_gb_s, 0);
  EXPECT_GT(b.triad_gb_s, 0);
  EXPECT_GT(b.read_gb_s, 0);
  EXPECT_EQ(b.gb_s, std::max({b.copy_gb_s, b.triad_gb_s, b.read_gb_s}));
}

TEST(BenchRoofline, AppliesOnlyOutOfCacheAndUpToTheProbe) {
  const size_t llc = size_t(32) << 20;
  auto in = lab::judge_roofline(10e6, 100, 20e9, llc);  // 10 MB/token fits a 32 MiB cache
  EXPECT_EQ(in.kind, lab::RooflineKind::kFitsInCache);
  EXPECT_EQ(in.label(), "does not apply (fits in cache)");
  auto over = lab::judge_roofline(100e6, 300, 20e9, llc);  // 30 GB/s against a 20 GB/s probe
  EXPECT_EQ(over.kind, lab::RooflineKind::kAboveProbe);
  EXPECT_NEAR(over.fraction, 1.5, 1e-12);
  EXPECT_EQ(over.label().find('%'), std::string::npos) << over.label();
  auto ok = lab::judge_roofline(100e6, 125, 20e9, llc);
  EXPECT_TRUE(ok.applies());
  EXPECT_EQ(ok.label(), "62.5%");
  EXPECT_TRUE(lab::judge_roofline(100e6, 125, 20e9, 0).applies());  // unknown cache: no cache test
}

TEST(BenchClaim, IntervalAgainstOneAndTheCeiling) {
  bool resolved = true;
  EXPECT_EQ(lab::ceiling_verdict({0.99, 1.08}, 1.05, 6, &resolved), "cannot resolve");
  EXPECT_FALSE(resolved);
  EXPECT_EQ(lab::ceiling_verdict({1.02, 1.08}, 1.05, 6, &resolved), "faster than f16, at its ceiling");
  EXPECT_TRUE(resolved);
  EXPECT_EQ(lab::ceiling_verdict({0.99, 1.03}, 1.05, 6, &resolved), "not resolved from f16, below its ceiling");
  EXPECT_EQ(lab::ceiling_verdict({1.10, 1.20}, 1.05, 6, &resolved), "faster than f16, above its ceiling");
  EXPECT_EQ(lab::ceiling_verdict({0.80, 0.90}, 1.05, 6, &resolved), "slower than f16, below its ceiling");
  EXPECT_EQ(lab::ceiling_verdict({1.10, 1.20}, 1.05, 1, &resolved), "cannot resolve (1 repeat; 6 needed)");
  EXPECT_FALSE(resolved);
  // Five unanimous repeats are still not 95%: sign-test p = 2^-4 = 0.0625.
  EXPECT_EQ(lab::ceiling_verdict({1.10, 1.20}, 1.05, 5, &resolved), "cannot resolve (5 repeats; 6 needed)");
  EXPECT_FALSE(resolved);
}

TEST(BenchClaim, PairedBootstrapOfTheMedian) {
  // Three repeats: the interval is [min, max] of the paired ratios (it holds 1 and 1.05), and
  // three are too few for any claim.
  const std::vector<double> few = {0.98, 1.04, 1.09};
  auto c = lab::judge_ceiling(few, 1.05);
  EXPECT_DOUBLE_EQ(c.ratio, 1.04);
  EXPECT_DOUBLE_EQ(c.ci.lo, 0.98);
  EXPECT_DOUBLE_EQ(c.ci.hi, 1.09);
  EXPECT_NEAR(c.of_ceiling, 1.04 / 1.05, 1e-12);
  EXPECT_NEAR(c.of_ceiling_ci.hi, 1.09 / 1.05, 1e-12);
  EXPECT_EQ(c.verdict, "cannot resolve (3 repeats; 6 needed)");
  EXPECT_FALSE(lab::judge_ceiling(std::vector<double>{1.2, 1.21, 1.22}, 1.05).resolved);
  // Eight tight repeats around 1.20: resolved from f16 and above a 1.05 ceiling.
  const std::vector<double> many = {1.19, 1.21, 1.20, 1.22, 1.18, 1.20, 1.21, 1.19};
  auto m = lab::judge_ceiling(many, 1.05);
  EXPECT_TRUE(m.resolved);
  EXPECT_GT(m.ci.lo, 1.05);
  EXPECT_EQ(m.verdict, "faster than f16, above its ceiling");
}

TEST(BenchResident, GrowsByThePagesTouched) {
  const size_t n = size_t(64) << 20;
  // Under AddressSanitizer every byte written is checked against its shadow byte (one per 8 bytes),
  // and on some kernels those shadow pages become resident as the block's pages are touched: up
  // to n / 8 more (8.66 MB for 64 MiB on a 2-core Zen 4 VM). Allowed there and nowhere else.
  const size_t shadow = test::kUnderAddressSanitizer ? n / 8 : 0;
  lab::release_free_heap();
  const size_t before = lab::process_resident_bytes();
  ASSERT_GT(before, 0u);
  std::unique_ptr<uint8_t[]> block(new uint8_t[n]);
  const size_t allocated = lab::process_resident_bytes();
  for (size_t i = 0; i < n; i += 4096) block[i] = uint8_t(i);  // one byte per page
  const size_t touched = lab::process_resident_bytes();
  EXPECT_LT(allocated - std::min(allocated, before), n / 8) << "allocation alone is not residence";
  EXPECT_GE(touched - before, n - n / 64);
  EXPECT_LE(touched - before, n + n / 16 + shadow);
  volatile uint8_t sink = block[4096];
  (void)sink;
}

std::string bench_cmd(const std::string& args) {
  static const std::string cache = test::temp_dir("bench_cache");
  // stderr (progress, model notes) is dropped so stdout is exactly what --json prints.
  return "(XDG_CACHE_HOME=" + cache + " " + test::weft_binary() + " bench --synthetic tiny --bandwidth-mib 16 -q " +
         args + " 2>/dev/null)";
}

// The invariants every bench JSON must hold, whatever the machine's speed.
void check_invariants(const nlohmann::json& j) {
  const double bw = j["bandwidth_gb_s"].get<double>();
  EXPECT_GT(bw, 0);
  const auto& b = j["bandwidth"];
  EXPECT_DOUBLE_EQ(bw, std::max({b["copy_gb_s"].get<double>(), b["triad_gb_s"].get<double>(), b["read_gb_s"].get<double>()}));
  // A host run probes before and after its arms; the faster reading is the denominator.
  ASSERT_TRUE(j.contains("bandwidth_probes_gb_s"));
  const auto& probes = j["bandwidth_probes_gb_s"];
  ASSERT_EQ(probes.size(), 2u);
  EXPECT_DOUBLE_EQ(bw, std::max(probes[0].get<double>(), probes[1].get<double>()));
  EXPECT_GE(b["buffer_bytes"].get<uint64_t>(), lab::kMinProbeArrayBytes);
  EXPECT_GE(b["buffer_bytes"].get<uint64_t>(), 8 * b["llc_bytes"].get<uint64_t>());
  EXPECT_EQ(j["baseline"], "f16");
  const uint64_t llc = b["llc_bytes"].get<uint64_t>();
  for (const auto& d : j["depths"]) {
    const auto& f16 = d["arms"]["f16"];
    ASSERT_TRUE(f16.is_object());
    EXPECT_EQ(f16["ratio"].get<double>(), 1.0);
    EXPECT_EQ(f16["ratio_ci"][0].get<double>(), 1.0);
    EXPECT_EQ(f16["ratio_ci"][1].get<double>(), 1.0);
    EXPECT_EQ(f16["claim"], "baseline");
    for (const auto& [name, a] : d["arms"].items()) {
      // Paired ratios against the f16 arm, repeat by repeat.
      ASSERT_EQ(a["ratios"].size(), f16["tok_s_runs"].size()) << name;
      for (size_t i = 0; i < a["ratios"].size(); ++i)
        EXPECT_NEAR(a["ratios"][i].get<double>(),
                    a["tok_s_runs"][i].get<double>() / f16["tok_s_runs"][i].get<double>(), 1e-12) << name;
      EXPECT_LE(a["ratio_ci"][0].get<double>(), a["ratio"].get<double>()) << name;
      EXPECT_GE(a["ratio_ci"][1].get<double>(), a["ratio"].get<double>()) << name;
      // Roofline: a fraction <= 1, or it does not apply (and no fraction is given).
      const std::string kind = a["roofline"];
      if (kind == "fraction") {
        EXPECT_LE(a["roofline_frac"].get<double>(), 1.0) << name;
        EXPECT_GT(a["roofline_frac"].get<double>(), 0.0) << name;
      } else {
        EXPECT_TRUE(kind == "fits_in_cache" || kind == "above_probe") << kind;
        EXPECT_TRUE(a["roofline_frac"].is_null()) << name;
      }
      if (llc > 0 && a["bytes_per_token"].get<uint64_t>() <= llc) EXPECT_EQ(kind, "fits_in_cache") << name;
      // KV measured from the process next to the byte model: the pages the rows touched.
      const double model = a["kv_bytes_model"].get<double>(), measured = a["kv_bytes_resident_measured"].get<double>();
      EXPECT_GE(measured, model * 0.95 - 8 * 4096.0) << name;  // a reused partial page or two
      EXPECT_LE(measured, a["kv_bytes_allocated"].get<double>() + 64.0 * 4096) << name;
    }
    if (d["arms"].contains("q8_0")) {
      EXPECT_GT(d["ceiling"]["q8_0"].get<double>(), 1.0);
      const auto& q = d["arms"]["q8_0"];
      EXPECT_DOUBLE_EQ(q["ceiling"].get<double>(), d["ceiling"]["q8_0"].get<double>());
      EXPECT_NEAR(q["ratio_over_ceiling"].get<double>(), q["ratio"].get<double>() / q["ceiling"].get<double>(), 1e-12);
      EXPECT_FALSE(q["claim"].get<std::string>().empty());
    }
  }
}

// Rows of the Markdown arm table: no roofline cell may show a percentage over 100.
void check_markdown_roofline(const std::string& md) {
  std::regex pct(R"(\| (\d+(\.\d+)?)% \|\s*$)");
  size_t rows = 0;
  std::istringstream in(md);
  for (std::string line; std::getline(in, line);) {
    if (line.find("| f16 |") == std::string::npos && line.find("| q8_0 |") == std::string::npos) continue;
    ++rows;
    std::smatch m;
    if (std::regex_search(line, m, pct)) EXPECT_LE(std::stod(m[1]), 100.0) << line;
    else EXPECT_NE(line.find("does not apply"), std::string::npos) << line;
  }
  EXPECT_GT(rows, 0u);
}

TEST(BenchCli, TinyEndToEndJson) {
  const std::string out = test::temp_dir("bench_out");
  std::string text;
  ASSERT_EQ(test::run_command(bench_cmd("--ctx 64,128 --gen 4 --repeats 2 --json --out " + out + ""), &text), 0) << text;
  auto j = nlohmann::json::parse(text);  // exactly one object
  ASSERT_TRUE(j.is_object());
  EXPECT_TRUE(j["model"].is_string());
  EXPECT_FALSE(j["baseline_added"].get<bool>());
  ASSERT_EQ(j["depths"].size(), 2u);
  EXPECT_EQ(j["depths"][0]["ctx"], 64);
  EXPECT_EQ(j["depths"][1]["ctx"], 128);
  for (const auto& d : j["depths"]) {
    EXPECT_GT(d["prefill_tok_s"].get<double>(), 0);
    EXPECT_GT(d["kv_share"].get<double>(), 0);
    EXPECT_EQ(d["arms"].size(), 2u);
  }
  check_invariants(j);
  for (const char* f : {"results.json", "report.md", "bench.svg"})
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f;
  std::ifstream md(out + "/report.md"), svg(out + "/bench.svg");
  std::stringstream mds, svgs;
  mds << md.rdbuf();
  svgs << svg.rdbuf();
  check_markdown_roofline(mds.str());
  EXPECT_NE(mds.str().find("bandwidth probed before and after the arms"), std::string::npos);
  EXPECT_NE(mds.str().find("KV (byte model)"), std::string::npos);
  EXPECT_NE(mds.str().find("KV resident (measured)"), std::string::npos);
  EXPECT_NE(svgs.str().find("roofline"), std::string::npos);
  EXPECT_NE(svgs.str().find("ratios vs f16"), std::string::npos);
}

TEST(BenchBatchModel, PredictionWithComputeBracketsTheByteModel) {
  // No compute: the byte model's memory-bound speed-up B · bytes(1) / bytes(B).
  EXPECT_DOUBLE_EQ(lab::predicted_speedup_with_compute(8, 0.1, 0.0, 100.0, 200.0, 0.0), 8.0 * 100.0 / 200.0);
  // All compute at B = 1: B · C(1) / C(B), whatever the bytes.
  EXPECT_DOUBLE_EQ(lab::predicted_speedup_with_compute(4, 0.02, 0.02, 100.0, 900.0, 0.05), 4.0 * 0.02 / 0.05);
  // Compute above the measured step (the probe overestimates it): both compute figures scaled by
  // t1 / c1, so batch 1 predicts exactly 1 and batch B predicts B · C(1) / C(B).
  EXPECT_DOUBLE_EQ(lab::predicted_speedup_with_compute(2, 0.01, 0.03, 1.0, 1.0, 0.04), 2.0 * 0.03 / 0.04);
  EXPECT_DOUBLE_EQ(lab::predicted_speedup_with_compute(1, 0.01, 0.03, 1.0, 1.0, 0.03), 1.0);
  EXPECT_DOUBLE_EQ(lab::predicted_speedup_with_compute(1, 0.0123, 0.0371, 5.0, 5.0, 0.0371), 1.0);
  // Mixed: memory 0.06 s scaled by 1.5, plus compute 0.1 s.
  EXPECT_NEAR(lab::predicted_speedup_with_compute(8, 0.08, 0.02, 100.0, 150.0, 0.1), 8.0 * 0.08 / (0.09 + 0.1), 1e-12);
  // Never above the byte model when compute grows at least as fast as the rows.
  for (int64_t B : {2, 4, 8}) {
    const double bytes_b = 100.0 + 10.0 * double(B);
    EXPECT_LE(lab::predicted_speedup_with_compute(B, 0.05, 0.01, 110.0, bytes_b, 0.01 * double(B)),
              double(B) * 110.0 / bytes_b + 1e-12);
  }
}

TEST(BenchBatchModel, ProbeRatesTheBackendsOwnMatmul) {
  auto backend = make_backend(BackendOptions{Device::kCpu, 2});
  ASSERT_TRUE(backend.ok()) << backend.status().message();
  const int64_t N = 300, K = 257;  // an odd K: the kernel's tail path is part of what is timed
  std::vector<uint16_t> w(size_t(N * K), 0x3f80);  // bf16 1.0
  const Matrix m{DType::kBF16, w.data(), N, K};
  lab::MatmulRateProbe probe(*backend.value(), m, size_t(64) << 10);
  EXPECT_EQ(probe.matrix().rows, int64_t((64 << 10) / (K * 2)));  // sliced to the byte cap
  EXPECT_EQ(probe.matrix().cols, K);
  const double r1 = probe.macs_per_second(1, 2), r3 = probe.macs_per_second(3, 2);
  EXPECT_TRUE(std::isfinite(r1) && r1 > 1e6) << r1;  // at least a million multiply-adds a second
  EXPECT_TRUE(std::isfinite(r3) && r3 > 1e6) << r3;
  EXPECT_EQ(probe.macs_per_second(3), r3);  // memoised: one measurement per row count
}

TEST(BenchBatchModel, ProbeMatricesOfAMoeModel) {
  const std::string dir = test::temp_dir("probe_moe");
  std::string out;
  ASSERT_EQ(test::run_command(test::weft_binary() + " synth --preset tiny -q --force -o " + dir, &out), 0) << out;
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const ModelWeights& w = model.value()->weights();
  const lab::ProbeMatrices p = lab::probe_matrices(w);
  ASSERT_NE(p.expert, nullptr);
  ASSERT_NE(p.dense, nullptr);
  int first_moe = 0;
  while (w.layers[size_t(first_moe)].ffn_kind != FfnKind::kMoe) ++first_moe;
  EXPECT_EQ(p.expert, &w.layers[size_t(first_moe)].ffn.experts[0].gate_proj);
  const FfnWeights& f = w.layers[size_t(first_moe)].ffn;
  EXPECT_EQ(p.dense, f.has_shared_expert ? &f.shared_expert.gate_proj : p.expert);
}

TEST(BenchCli, BatchedDecodeReportsBothPredictions) {
  std::string text;
  ASSERT_EQ(test::run_command(bench_cmd("--ctx 64 --arms f16 --gen 2 --repeats 2 --batch 2 --json"), &text), 0) << text;
  auto j = nlohmann::json::parse(text);
  const auto& points = j["depths"][0]["batch"]["f16"];
  ASSERT_EQ(points.size(), 2u);  // batch 1 is added first
  EXPECT_EQ(points[0]["batch"], 1);
  EXPECT_DOUBLE_EQ(points[0]["speedup_predicted_with_compute"].get<double>(), 1.0);
  for (const auto& p : points) {
    EXPECT_GT(p["compute_seconds_per_step"].get<double>(), 0.0);
    const double with_compute = p["speedup_predicted_with_compute"].get<double>();
    EXPECT_TRUE(std::isfinite(with_compute) && with_compute > 0) << p.dump();
  }
  EXPECT_TRUE(j["depths"][0]["batch_compute_probe"].is_string());
}

TEST(BenchCli, BaselineIsF16WhereverItSits) {
  std::string text;
  ASSERT_EQ(test::run_command(bench_cmd("--ctx 64 --gen 4 --repeats 2 --arms q8_0,f16 --json"), &text), 0) << text;
  auto j = nlohmann::json::parse(text);
  check_invariants(j);
  EXPECT_FALSE(j["baseline_added"].get<bool>());
  ASSERT_EQ(test::run_command(bench_cmd("--ctx 64 --gen 4 --repeats 2 --arms q8_0,f16"), &text), 0) << text;
  EXPECT_NE(text.find("| 64 | f16 |"), std::string::npos) << text;
  EXPECT_NE(text.find("| baseline |"), std::string::npos) << text;
  check_markdown_roofline(text);
}

TEST(BenchCli, F16IsAddedWhenAbsentAndSaidSo) {
  std::string text;
  ASSERT_EQ(test::run_command(bench_cmd("--ctx 64 --gen 2 --repeats 2 --arms q8_0 --json"), &text), 0) << text;
  auto j = nlohmann::json::parse(text);
  EXPECT_TRUE(j["baseline_added"].get<bool>());
  ASSERT_EQ(j["depths"][0]["arms"].size(), 2u);
  check_invariants(j);
  ASSERT_EQ(test::run_command(bench_cmd("--ctx 64 --gen 2 --repeats 2 --arms q8_0"), &text), 0) << text;
  EXPECT_NE(text.find("f16 was not in --arms, so it was added and measured"), std::string::npos) << text;
  EXPECT_NE(test::run_command(bench_cmd("--ctx 64 --gen 2 --repeats 2 --arms f16,f16"), &text), 0);
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

// --tile-fill: the first depth is prefilled, the deeper one repeats its pages: the JSON says how
// many tokens of each, the arms' caches hold the whole depth, and a fill that is not whole pages
// is refused with a message and a non-zero exit.
TEST(BenchCli, TileFillRepeatsPagesToTheDepth) {
  std::string text;
  ASSERT_EQ(test::run_command(bench_cmd("--ctx 64,256 --tile-fill 64 --page-tokens 32 --gen 3 --repeats 2 --batch 2 --json"),
                              &text), 0) << text;
  auto j = nlohmann::json::parse(text);
  ASSERT_EQ(j["depths"].size(), 2u);
  EXPECT_EQ(j["tile_fill_from"], 64);
  EXPECT_EQ(j["depths"][0]["prefill_tokens"], 64);
  EXPECT_EQ(j["depths"][0]["tiled_tokens"], 0);
  EXPECT_GT(j["depths"][0]["prefill_tok_s"].get<double>(), 0);
  EXPECT_EQ(j["depths"][1]["prefill_tokens"], 0);
  EXPECT_EQ(j["depths"][1]["tiled_tokens"], 192);
  EXPECT_TRUE(j["depths"][1]["prefill_tok_s"].is_null());
  ASSERT_EQ(j["depths"][1]["arms"].size(), 2u);
  for (const auto& [type, a] : j["depths"][1]["arms"].items()) {
    EXPECT_GE(a["kv_bytes_allocated"].get<uint64_t>(), a["kv_bytes_model"].get<uint64_t>()) << type;
    EXPECT_GT(a["tok_s"].get<double>(), 0) << type;
  }
  EXPECT_FALSE(j["depths"][1]["batch"].is_null());
  EXPECT_NE(test::run_command(test::weft_binary() + " bench --synthetic tiny --bandwidth-mib 16 -q --ctx 64,256 "
                              "--tile-fill 48 --page-tokens 32 --gen 2 --repeats 1 2>&1", &text), 0);
  EXPECT_NE(text.find("--tile-fill must be a positive multiple of the page size"), std::string::npos) << text;
}

TEST(BenchCli, UsageErrors) {
  std::string text;
  EXPECT_EQ(test::run_command(test::weft_binary() + " bench --no-such-flag 2>&1", &text), 2) << text;
  EXPECT_EQ(test::run_command(test::weft_binary() + " bench --help 2>&1", &text), 0) << text;
}

}  // namespace
}  // namespace weft

namespace weft::lab {
namespace {

// A window shorter than 20 ticks of the energy counter is printed as "cannot resolve", longer
// ones as a J/token figure; JSON says which.
TEST(BenchEnergy, ShortWindowsCannotResolveTheCounter) {
  BenchResult r;
  r.options.energy = true;
  r.options.gen = 32;
  r.energy_status = "nvml";
  DepthResult d;
  d.ctx = 4096;
  BenchArmResult a;
  a.type = DType::kF16;
  a.tok_s = {200.0, 210.0, 205.0};  // windows of ~0.16 s
  a.joules = {32.0, 30.0, 31.0};
  a.tok_s_ci = median_with_ci(a.tok_s);
  d.arms.push_back(a);
  r.depths.push_back(d);

  r.energy_tick_s = 0.05;  // 20 ticks = 1 s > 0.16 s
  std::string md = bench_markdown(r);
  EXPECT_NE(md.find("cannot resolve (~0.969)"), std::string::npos) << md;
  EXPECT_NE(md.find("counter updates every 50.0 ms"), std::string::npos) << md;
  EXPECT_EQ(bench_json(r)["depths"][0]["arms"]["f16"]["joules_resolved"], false);

  r.energy_tick_s = 0.001;  // 20 ticks = 20 ms < 0.15 s
  md = bench_markdown(r);
  EXPECT_EQ(md.find("cannot resolve (~"), std::string::npos) << md;
  EXPECT_NE(md.find(" 0.969 |"), std::string::npos) << md;
  EXPECT_EQ(bench_json(r)["depths"][0]["arms"]["f16"]["joules_resolved"], true);

  r.energy_tick_s = std::nan("");  // never measured: nothing is claimed as resolved
  EXPECT_EQ(bench_json(r)["depths"][0]["arms"]["f16"]["joules_resolved"], false);
}

// The process's resident set cannot see a device's memory: a GPU run says so instead of printing
// a KV "measured vs model" of -100%.
TEST(BenchReport, KvResidentDoesNotApplyOnADevice) {
  BenchResult r;
  DepthResult d;
  d.ctx = 4096;
  BenchArmResult a;
  a.type = DType::kF16;
  a.tok_s = {200.0};
  a.tok_s_ci = median_with_ci(a.tok_s);
  a.kv_bytes = 80 << 20;
  a.kv_resident = 300 << 10;
  a.kv_resident_diff_pct = -99.6;
  d.arms.push_back(a);
  r.depths.push_back(d);
  r.options.device = Device::kCpu;
  EXPECT_EQ(bench_markdown(r).find("does not apply (device memory)"), std::string::npos);
  EXPECT_EQ(bench_json(r)["depths"][0]["arms"]["f16"]["kv_bytes_resident_measured"], 300 << 10);
  r.options.device = Device::kCuda;
  EXPECT_NE(bench_markdown(r).find("does not apply (device memory)"), std::string::npos) << bench_markdown(r);
  EXPECT_TRUE(bench_json(r)["depths"][0]["arms"]["f16"]["kv_bytes_resident_measured"].is_null());
  EXPECT_TRUE(bench_json(r)["depths"][0]["arms"]["f16"]["kv_resident_diff_pct"].is_null());
}

}  // namespace
}  // namespace weft::lab
