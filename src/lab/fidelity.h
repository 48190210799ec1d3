// Teacher-forced fidelity of KV-cache types: the engine of `weft fidelity`.
//
// Every arm is one Session of the same model with its own KV-cache type; all arms are fed the same
// token stream in lockstep chunks of `batch` tokens, so only [batch, V] logits per arm are alive
// at a time. At each position i (0-based, predicting token i+1; the last token has no target and
// is not scored) each arm's next-token distribution Q is compared with the reference arm's P (the
// first arm), in double precision from float logits z (reference) and a (arm):
//   * log-softmax: lse(z) = m + log sum_j exp(z_j - m), m = max_j z_j; log p_j = z_j - lse(z);
//   * KL(P || Q) = sum_j p_j (log p_j - log q_j) = sum_j p_j (z_j - a_j) - lse(z) + lse(a)
//     (one pass, no [V] scratch); clamped at 0 (Gibbs' inequality: only rounding can go below);
//     identical logits give exactly 0;
//   * top-1 agreement: argmax_j z_j == argmax_j a_j (lowest index wins ties);
//   * ΔNLL of the true next token y: (lse(a) - a_y) - (lse(z) - z_y); the perplexity ratio of the
//     arm over the reference is PPL_Q / PPL_P = exp(mean NLL_Q - mean NLL_P) = exp(mean ΔNLL);
//   * Δp = q_y - p_y.
// Quantiles are type 7 (lab/stats.h). Positions are also grouped by context depth i into the
// buckets [0,1K) [1K,4K) [4K,16K) [16K,64K) [64K,256K) [256K,∞) — KV-quantization error enters
// every attention read, so it can grow with the number of cached tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/model.h"
#include "model/state.h"
#include "backend/backend_factory.h"

namespace weft::lab {

// One arm: a display name ("q8_0", "q8_0/f16") and the KV types it stands for.
struct FidelityArm {
  std::string name;
  KvOptions kv;
  // Weight arms (`weft fidelity --weights`): the same model with its weights in another type;
  // nullptr = the model run_fidelity is given. Must have the same vocabulary; not owned.
  const Model* model = nullptr;
};

// "f16" -> K and V f16; "q8_0/f16" -> K q8_0, V f16. Errors list the accepted type names.
Result<FidelityArm> parse_fidelity_arm(const std::string& spec);
// Comma-separated list; at least two arms, the first is the reference. A non-reference arm may
// not be listed twice (its results would be ambiguous); repeating the reference ("f16,f16") is
// allowed and is the self-check (all zeros).
Result<std::vector<FidelityArm>> parse_fidelity_arms(const std::string& csv);
// Checks every arm's KV types against the model (q8_0/q4_0 need head_dim % 32 == 0).
Status check_arms_supported(const std::vector<FidelityArm>& arms, const ModelConfig& config);

struct DepthBucket {
  int64_t lo = 0;
  int64_t hi = 0;  // exclusive; INT64_MAX for the open last bucket
  std::string label() const;  // "0–1K", "1K–4K", "256K+"
};
const std::vector<DepthBucket>& depth_buckets();
int depth_bucket_index(int64_t position);

// One scored position of one arm against the reference.
struct PositionStats {
  double kld = 0;
  double dnll = 0;     // NLL_arm - NLL_ref of the true next token
  double dp = 0;       // q_y - p_y
  double nll_ref = 0;  // NLL of the reference (for the reference perplexity)
  bool top1 = false;   // argmaxes agree
};

// Compares one pair of [V] logit rows; `target` is the true next token.
PositionStats compare_logits(const float* ref, const float* arm, int64_t V, int32_t target);

// Aggregates of a set of positions (see the file comment for definitions). NaN when n == 0.
struct FidelitySummary {
  int64_t n = 0;
  double kld_mean = 0, kld_median = 0, kld_p99 = 0, kld_max = 0;
  double top1 = 0;  // fraction of positions whose argmaxes agree
  double dnll_mean = 0, ppl_ratio = 1;
  double dp_mean = 0, dp_abs_p99 = 0;
  double ref_ppl = 0;  // exp(mean NLL_ref)
};
FidelitySummary summarize(const std::vector<PositionStats>& positions);

struct BucketSummary {
  DepthBucket bucket;
  FidelitySummary stats;
};

struct FidelityArmResult {
  FidelityArm arm;
  FidelitySummary overall;
  std::vector<BucketSummary> buckets;     // non-empty buckets only, by depth
  std::vector<PositionStats> positions;   // per scored position, in order
};

struct FidelityOptions {
  int64_t batch = 128;  // tokens per lockstep chunk (and per forward call)
  int threads = 0;      // per session; 0 = all cores. Results do not depend on it.
  Device device = Device::kCpu;  // where the sessions compute
  // Called after each chunk with (tokens fed so far, total tokens).
  std::function<void(int64_t done, int64_t total)> progress;
};

struct FidelityResult {
  std::string ref;               // the reference arm's name
  int64_t tokens = 0;            // tokens fed
  std::vector<FidelityArmResult> arms;   // the non-reference arms, in the order given
  FidelitySummary ref_summary;   // reference vs itself: zeros, with ref_ppl
  double wall_s = 0;
};

// Runs the comparison. ids must hold >= 2 tokens; arms[0] is the reference.
Result<FidelityResult> run_fidelity(const Model& model, const std::vector<int32_t>& ids,
                                    const std::vector<FidelityArm>& arms, const FidelityOptions& options);

// {"arms": {name: {...}}, "ref": ..., "tokens": T, "model": ...} (see `weft fidelity --help`).
nlohmann::json fidelity_json(const FidelityResult& result, const std::string& model);
// Markdown table: one row per arm overall, then one per arm and non-empty depth bucket.
std::string fidelity_markdown(const FidelityResult& result);
// SVG line chart of mean KL per depth bucket, one series per arm (x = bucket upper bound).
std::string fidelity_svg(const FidelityResult& result, const std::string& title);

}  // namespace weft::lab
