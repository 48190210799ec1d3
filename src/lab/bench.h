// The paired decode curve of `weft bench`: one real prefill stream snapshotted at ascending
// depths, every KV arm decoding from the same snapshot in interleaved repeats, next to the byte
// model of a decoded token and the ceiling a smaller KV type could reach.
//
// Byte model of one decoded token at context depth d (bytes read from memory, from the model's
// real tensors via compute_footprint):
//   W       = active weight bytes (projections, router, shared + top-k experts, lm_head, 1 embedding row)
//   KV_t(d) = kv_bytes_per_token(t) · d      (every cached K and V row of the full-attention layers;
//                                              the new token's own row write is 1/d of it, ignored)
//   G       = 2 · gdn_state_bytes            (the GDN conv windows + delta-rule states, read and written)
//   bytes_t(d)   = W + KV_t(d) + G
//   kv_share(d)  = KV_f16(d) / bytes_f16(d)
//   ceiling_t(d) = bytes_f16(d) / bytes_t(d) = 1 / (1 − kv_share·(1 − b_t/b_f16)),  b = KV bytes per token
// (the speed-up of a decode that is purely memory bound and whose dequantization is free).
//   roofline_frac = bytes_t(d) · tok/s / measured bandwidth (lab/roofline.h: when it applies).
// Every ratio, ceiling and ratio / ceiling is relative to the f16 arm, wherever it sits in
// `arms`; when `arms` has no f16, run_bench appends one (BenchResult::baseline_added says so).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/status.h"
#include "lab/bandwidth.h"
#include "lab/bench_batch.h"
#include "lab/ceiling_claim.h"
#include "lab/roofline.h"
#include "lab/stats.h"
#include "model/footprint.h"
#include "model/model.h"
#include "backend/backend_factory.h"

namespace weft::lab {

struct BenchOptions {
  std::vector<int64_t> depths;            // ascending, > 0
  std::vector<DType> arms{DType::kF16, DType::kQ8_0};  // f16 is the baseline wherever it sits
  int repeats = kMinRepeatsForClaim;     // fewer cannot support a claim (lab/ceiling_claim.h)
  int gen = 16;                           // decoded tokens per timed run
  int threads = 0;                        // 0: all cores
  Device device = Device::kCpu;           // where the sessions compute (bench --device)
  int64_t page_tokens = 256;
  int64_t prefill_batch = 128;
  uint64_t seed = 0x5eed;                 // the prefill token stream
  bool ceiling_only = false;              // Step 0: f16 curve + projected ceilings + verdict
  int64_t kill_at = 32768;
  double kill_below = 0.10;
  bool energy = false;
  size_t bandwidth_bytes = size_t(512) << 20;  // per probe array (3 arrays); floored by probe_array_bytes
  int bandwidth_trials = 5;
  bool progress = true;                   // progress lines on stderr
  // Batch sizes of the batched decode (lab/bench_batch.h), ascending; empty: no batched decode.
  // 1 is added first when missing (every speed-up is against it).
  std::vector<int64_t> batches;
  // 0: every depth is prefilled token by token (the default). N > 0 (a multiple of page_tokens):
  // at most N tokens are prefilled; deeper contexts repeat those KV pages (ModelState::tile_to),
  // so decode at 128K-256K can be timed without the prefill. Decode speed only: the repeated
  // rows are real cache rows of each arm's type, but meaningless as context.
  int64_t tile_from = 0;
};

struct BenchArmResult {
  DType type = DType::kF16;
  std::vector<double> tok_s;              // one per repeat, in repeat order
  MedianInterval tok_s_ci;
  std::vector<double> ratios;             // tok_s[r] / f16 tok_s[r] (paired per repeat)
  CeilingClaim claim;                     // ratio, its bootstrap interval, vs the ceiling (f16: 1)
  uint64_t kv_bytes = 0;                  // KV_t(d) of the byte model (a formula)
  uint64_t bytes_per_token = 0;           // bytes_t(d) of the byte model
  Roofline roofline;
  uint64_t kv_allocated = 0;              // KvCache::bytes_allocated(): the cache's own page count
  uint64_t kv_resident = 0;               // measured: process RSS growth while the cache was filled
  double kv_resident_diff_pct = 0;        // (kv_resident − kv_bytes) / kv_bytes · 100
  std::vector<double> joules;             // per run (empty if no energy)
};

struct DepthResult {
  int64_t ctx = 0;
  int64_t prefill_tokens = 0;             // this segment (from the previous depth)
  int64_t tiled_tokens = 0;               // context past the prefill, repeated pages (tile_from)
  double prefill_s = 0;
  double prefill_tok_s = 0;
  double kv_share = 0;
  std::vector<std::pair<DType, double>> ceilings;  // per non-f16 type (byte model)
  std::vector<BenchArmResult> arms;       // in the order of BenchResult::options.arms
  std::vector<BatchArm> batch;            // per arm, when options.batches is set
  size_t baseline = 0;                    // index of the f16 arm in `arms`
  const BenchArmResult& f16() const { return arms[baseline]; }
  double ceiling_of(DType t) const;       // 1 for f16, NaN for a type without a ceiling
};

struct BenchResult {
  std::string model;                      // directory (and preset, for a synthetic model)
  Footprint footprint;
  uint64_t kv_bytes_per_token_f16 = 0;
  int threads = 0;
  std::string backend;                    // Backend::name(): which kernel path ran
  std::string weights_where;              // Backend::weights_where(): the memory the weights sit in
  BandwidthResult bandwidth;               // the roofline's probe: on the host, the better of two
  // A host run probes before the first depth and again after the last (a VM's bandwidth can move
  // by half within minutes); `bandwidth` is the faster reading, so a share is never flattered by
  // a slow moment. Both readings are reported. Empty for a device probe (run once).
  std::vector<double> probe_gb_s;
  BenchOptions options;                   // arms as run (f16 appended when it was absent)
  bool baseline_added = false;            // the f16 arm was not asked for and was added
  std::vector<DepthResult> depths;
  double kill_ceiling = 0;                // ceiling of kill_type at kill_at (byte model)
  DType kill_type = DType::kQ8_0;
  std::string verdict;                    // only with ceiling_only
  std::string energy_status;              // "rapl" / "nvml" / "unavailable: <reason>" / "off"
  double energy_tick_s = std::nan("");    // the counter's measured update period (EnergyMeter)
  double wall_s = 0;
};

// 1 / (1 − kv_share·(1 − bytes_ratio)), bytes_ratio = KV bytes of the type / f16 KV bytes.
double kv_ceiling(double kv_share, double bytes_ratio);
// kv_share(d) of the byte model above.
double kv_share_at(const Footprint& fp, uint64_t kv_f16_per_token, int64_t depth);
// The Step 0 verdict for a ceiling at kill_at.
std::string kill_verdict(double ceiling, int64_t kill_at, double kill_below);

// Runs the bench. The model must stay alive for the call. Errors: bad options, unsupported KV
// types, an arm listed twice.
Result<BenchResult> run_bench(const Model& model, const std::string& model_name, const BenchOptions& options);

nlohmann::json bench_json(const BenchResult& r);
std::string bench_markdown(const BenchResult& r);
std::string bench_svg(const BenchResult& r);

}  // namespace weft::lab
