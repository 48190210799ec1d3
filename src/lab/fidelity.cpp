// Teacher-forced KV-cache fidelity: lockstep sessions, per-position KL / top-1 / ΔNLL / Δp.
#include "lab/fidelity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "cache/kv_cache.h"
#include "engine/session.h"
#include "kernels/cpu/hadamard.h"
#include "lab/stats.h"
#include "lab/svg_plot.h"

namespace weft::lab {

namespace {

Result<DType> parse_type(const std::string& name) {
  if (name == "f16") return DType::kF16;
  if (name == "f32") return DType::kF32;
  if (name == "q8_0") return DType::kQ8_0;
  if (name == "q4_0") return DType::kQ4_0;
  return Status::error("unknown KV cache type '" + name + "' (use f16, q8_0, q4_0 or f32, or K/V such as q8_0/f16)");
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// Max and argmax (lowest index on ties) of a row.
void row_max(const float* x, int64_t V, double* m, int64_t* arg) {
  float best = x[0];
  int64_t bi = 0;
  for (int64_t j = 1; j < V; ++j)
    if (x[j] > best) { best = x[j]; bi = j; }
  *m = best;
  *arg = bi;
}

std::string fmt(const char* f, double v) {
  if (!std::isfinite(v)) return "–";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string count_label(int64_t v) {
  if (v >= 1024 && v % 1024 == 0) return std::to_string(v / 1024) + "K";
  return std::to_string(v);
}

nlohmann::json summary_json(const FidelitySummary& s) {
  return {{"n", s.n},           {"kld_mean", s.kld_mean},   {"kld_median", s.kld_median},
          {"kld_p99", s.kld_p99}, {"kld_max", s.kld_max},   {"top1", s.top1},
          {"ppl_ratio", s.ppl_ratio}, {"dnll_mean", s.dnll_mean}, {"dp_mean", s.dp_mean},
          {"dp_abs_p99", s.dp_abs_p99}};
}

// "+rot" on an arm without a quantized type would silently equal the plain arm: refuse it.
Result<FidelityArm> check_rotation(const FidelityArm& arm) {
  if (arm.kv.rotate && !arm.kv.rotates_k() && !arm.kv.rotates_v())
    return Status::error("arm '" + arm.name + "': +rot (Hadamard rotation) applies only to q8_0/q4_0 K or V; "
                         "f16/f32 caches are never rotated");
  return arm;
}

}  // namespace

Result<FidelityArm> parse_fidelity_arm(const std::string& raw) {
  std::string spec = trim(raw);
  if (spec.empty()) return Status::error("empty arm name in --arms");
  FidelityArm arm;
  arm.name = spec;
  // "q4_0+rot", "q4_0/q4_0+rot": the KV types with the Hadamard rotation on (--kv-rotate).
  const std::string kRot = "+rot";
  if (spec.size() > kRot.size() && spec.compare(spec.size() - kRot.size(), kRot.size(), kRot) == 0) {
    spec.resize(spec.size() - kRot.size());
    arm.kv.rotate = true;
  }
  const size_t slash = spec.find('/');
  if (slash == std::string::npos) {
    auto t = parse_type(spec);
    if (!t.ok()) return Status::error("arm '" + spec + "': " + t.status().message());
    arm.kv.k_type = arm.kv.v_type = t.value();
    return check_rotation(arm);
  }
  auto k = parse_type(spec.substr(0, slash));
  if (!k.ok()) return Status::error("arm '" + spec + "' (K type): " + k.status().message());
  auto v = parse_type(spec.substr(slash + 1));
  if (!v.ok()) return Status::error("arm '" + spec + "' (V type): " + v.status().message());
  arm.kv.k_type = k.value();
  arm.kv.v_type = v.value();
  return check_rotation(arm);
}

Result<std::vector<FidelityArm>> parse_fidelity_arms(const std::string& csv) {
  std::vector<FidelityArm> arms;
  size_t start = 0;
  while (true) {
    size_t comma = csv.find(',', start);
    auto arm = parse_fidelity_arm(csv.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (!arm.ok()) return arm.status();
    arms.push_back(arm.value());
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (arms.size() < 2)
    return Status::error("--arms needs at least two arms (the first is the reference), e.g. f16,q8_0,q4_0");
  for (size_t i = 1; i < arms.size(); ++i)
    for (size_t j = 1; j < i; ++j)
      if (arms[i].name == arms[j].name) return Status::error("arm '" + arms[i].name + "' is listed twice in --arms");
  return arms;
}

Status check_arms_supported(const std::vector<FidelityArm>& arms, const ModelConfig& config) {
  for (const FidelityArm& a : arms)
    for (DType t : {a.kv.k_type, a.kv.v_type})
      if (!kv_type_supported(t, config.head_dim))
        return Status::error("arm '" + a.name + "': KV type " + dtype_name(t) +
                             " stores blocks of 32 values along head_dim, so it needs head_dim divisible by 32; "
                             "this model's head_dim is " + std::to_string(config.head_dim) +
                             " (use f16 or f32 arms for it)");
  for (const FidelityArm& a : arms)
    if ((a.kv.rotates_k() || a.kv.rotates_v()) && !fwht_size_ok(config.head_dim))
      return Status::error("arm '" + a.name + "': +rot (Walsh-Hadamard rotation) needs head_dim to be a power of two; "
                           "this model's head_dim is " + std::to_string(config.head_dim));
  return Status();
}

std::string DepthBucket::label() const {
  if (hi == std::numeric_limits<int64_t>::max()) return count_label(lo) + "+";
  return count_label(lo) + "–" + count_label(hi);
}

const std::vector<DepthBucket>& depth_buckets() {
  static const std::vector<DepthBucket> kBuckets = {
      {0, 1024}, {1024, 4096}, {4096, 16384}, {16384, 65536}, {65536, 262144},
      {262144, std::numeric_limits<int64_t>::max()}};
  return kBuckets;
}

int depth_bucket_index(int64_t position) {
  const auto& b = depth_buckets();
  for (size_t i = 0; i < b.size(); ++i)
    if (position < b[i].hi) return int(i);
  return int(b.size()) - 1;
}

PositionStats compare_logits(const float* z, const float* a, int64_t V, int32_t y) {
  double mz, ma;
  int64_t az, aa;
  row_max(z, V, &mz, &az);
  row_max(a, V, &ma, &aa);
  // One pass: Sz = sum e^(z-mz), Sa = sum e^(a-ma), W = sum e^(z-mz) (z - a).
  double sz = 0, sa = 0, w = 0;
  for (int64_t j = 0; j < V; ++j) {
    const double zj = z[j], aj = a[j];
    const double ez = std::exp(zj - mz);
    sz += ez;
    sa += std::exp(aj - ma);
    w += ez * (zj - aj);
  }
  const double lse_z = mz + std::log(sz), lse_a = ma + std::log(sa);
  PositionStats s;
  // KL = sum p (z - a) - lse(z) + lse(a); for identical rows W = 0 and lse_z == lse_a exactly.
  s.kld = std::max(0.0, w / sz - lse_z + lse_a);
  s.top1 = az == aa;
  const double nll_z = lse_z - double(z[y]), nll_a = lse_a - double(a[y]);
  s.nll_ref = nll_z;
  s.dnll = nll_a - nll_z;
  s.dp = std::exp(-nll_a) - std::exp(-nll_z);
  return s;
}

FidelitySummary summarize(const std::vector<PositionStats>& p) {
  FidelitySummary s;
  s.n = int64_t(p.size());
  std::vector<double> kld, dnll, dp, dp_abs, nll;
  kld.reserve(p.size());
  dnll.reserve(p.size());
  dp.reserve(p.size());
  dp_abs.reserve(p.size());
  nll.reserve(p.size());
  int64_t agree = 0;
  for (const PositionStats& x : p) {
    kld.push_back(x.kld);
    dnll.push_back(x.dnll);
    dp.push_back(x.dp);
    dp_abs.push_back(std::fabs(x.dp));
    nll.push_back(x.nll_ref);
    agree += x.top1;
  }
  s.kld_mean = mean(kld);
  s.kld_median = median(kld);
  s.kld_p99 = quantile(kld, 0.99);
  s.kld_max = kld.empty() ? std::nan("") : *std::max_element(kld.begin(), kld.end());
  s.top1 = p.empty() ? std::nan("") : double(agree) / double(p.size());
  s.dnll_mean = mean(dnll);
  s.ppl_ratio = std::exp(s.dnll_mean);
  s.dp_mean = mean(dp);
  s.dp_abs_p99 = quantile(dp_abs, 0.99);
  s.ref_ppl = std::exp(mean(nll));
  return s;
}

Result<FidelityResult> run_fidelity(const Model& model, const std::vector<int32_t>& ids,
                                    const std::vector<FidelityArm>& arms, const FidelityOptions& options) {
  if (arms.size() < 2) return Status::error("fidelity needs at least two arms (the first is the reference)");
  if (ids.size() < 2) return Status::error("fidelity needs at least two tokens (one position to score)");
  const ModelConfig& c = model.config();
  WEFT_RETURN_IF_ERROR(check_arms_supported(arms, c));
  const int64_t V = c.vocab_size, T = int64_t(ids.size());
  for (int64_t i = 0; i < T; ++i)
    if (ids[size_t(i)] < 0 || ids[size_t(i)] >= V)
      return Status::error("token id " + std::to_string(ids[size_t(i)]) + " at index " + std::to_string(i) +
                           " is outside the vocabulary [0, " + std::to_string(V) + ")");
  const int64_t B = std::max<int64_t>(1, options.batch);
  const auto t0 = std::chrono::steady_clock::now();

  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<std::vector<float>> logits(arms.size());
  for (const FidelityArm& a : arms) {
    SessionOptions so;
    so.kv = a.kv;
    so.threads = options.threads;
    so.device = options.device;
    so.batch = B;
    if (a.model && a.model->config().vocab_size != V)
      return Status::error("arm '" + a.name + "' has another vocabulary size than the reference model");
    sessions.push_back(std::make_unique<Session>(a.model ? *a.model : model, so));
  }
  for (auto& l : logits) l.resize(size_t(B * V));

  const size_t n_arms = arms.size() - 1;
  FidelityResult result;
  result.ref = arms[0].name;
  result.tokens = T;
  std::vector<std::vector<PositionStats>> pos(n_arms, std::vector<PositionStats>(size_t(T - 1)));
  for (int64_t done = 0; done < T;) {
    const int64_t n = std::min(B, T - done);
    for (size_t a = 0; a < arms.size(); ++a)
      WEFT_RETURN_IF_ERROR(sessions[a]->feed(ids.data() + done, n, logits[a].data(), nullptr)
                               .with_context("arm '" + arms[a].name + "'"));
    // Positions of the chunk are scored in parallel on the reference session's (idle) pool; each
    // task writes only its own slot, so the result does not depend on the thread count.
    const int64_t scored = std::min(n, T - 1 - done);
    sessions[0]->pool().parallel_for(scored, [&](int64_t r) {
      const int32_t target = ids[size_t(done + r + 1)];
      const float* ref = logits[0].data() + r * V;
      for (size_t a = 0; a < n_arms; ++a)
        pos[a][size_t(done + r)] = compare_logits(ref, logits[a + 1].data() + r * V, V, target);
    });
    done += n;
    if (options.progress) options.progress(done, T);
  }

  std::vector<PositionStats> ref_self(size_t(T - 1));
  for (size_t a = 0; a < n_arms; ++a) {
    FidelityArmResult ar;
    ar.arm = arms[a + 1];
    ar.overall = summarize(pos[a]);
    const auto& bk = depth_buckets();
    for (size_t b = 0; b < bk.size(); ++b) {
      const int64_t lo = std::min(bk[b].lo, T - 1), hi = std::min(bk[b].hi, T - 1);
      if (hi <= lo) continue;
      std::vector<PositionStats> part(pos[a].begin() + lo, pos[a].begin() + hi);
      ar.buckets.push_back({bk[b], summarize(part)});
    }
    ar.positions = std::move(pos[a]);
    result.arms.push_back(std::move(ar));
  }
  // The reference against itself: zero everywhere; its own perplexity comes from any arm's nll_ref.
  for (size_t i = 0; i < ref_self.size(); ++i) {
    ref_self[i].top1 = true;
    ref_self[i].nll_ref = result.arms[0].positions[i].nll_ref;
  }
  result.ref_summary = summarize(ref_self);
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

nlohmann::json fidelity_json(const FidelityResult& r, const std::string& model) {
  nlohmann::json arms = nlohmann::json::object();
  for (const FidelityArmResult& a : r.arms) {
    nlohmann::json j = summary_json(a.overall);
    j["k_type"] = dtype_name(a.arm.kv.k_type);
    j["v_type"] = dtype_name(a.arm.kv.v_type);
    j["rotate"] = a.arm.kv.rotate;
    nlohmann::json buckets = nlohmann::json::array();
    for (const BucketSummary& b : a.buckets) {
      nlohmann::json bj = summary_json(b.stats);
      bj["lo"] = b.bucket.lo;
      // The open last bucket has no upper bound; JSON gets null rather than INT64_MAX.
      bj["hi"] = b.bucket.hi == std::numeric_limits<int64_t>::max() ? nlohmann::json(nullptr) : nlohmann::json(b.bucket.hi);
      buckets.push_back(bj);
    }
    j["buckets"] = buckets;
    arms[a.arm.name] = j;
  }
  return {{"arms", arms},
          {"ref", r.ref},
          {"ref_ppl", r.ref_summary.ref_ppl},
          {"tokens", r.tokens},
          {"positions", r.tokens - 1},
          {"wall_s", r.wall_s},
          {"model", model}};
}

std::string fidelity_markdown(const FidelityResult& r) {
  std::string out =
      "| arm (vs " + r.ref + ") | depth | n | KL mean | KL median | KL p99 | KL max | top-1 | ΔNLL mean | PPL ratio | "
      "Δp mean | \\|Δp\\| p99 |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  auto row = [&](const std::string& arm, const std::string& depth, const FidelitySummary& s) {
    out += "| " + arm + " | " + depth + " | " + std::to_string(s.n) + " | " + fmt("%.3e", s.kld_mean) + " | " +
           fmt("%.3e", s.kld_median) + " | " + fmt("%.3e", s.kld_p99) + " | " + fmt("%.3e", s.kld_max) + " | " +
           fmt("%.2f%%", 100 * s.top1) + " | " + fmt("%+.3e", s.dnll_mean) + " | " + fmt("%.5f", s.ppl_ratio) +
           " | " + fmt("%+.2e", s.dp_mean) + " | " + fmt("%.2e", s.dp_abs_p99) + " |\n";
  };
  for (const FidelityArmResult& a : r.arms) row("**" + a.arm.name + "**", "all", a.overall);
  bool any_split = false;
  for (const FidelityArmResult& a : r.arms) any_split |= a.buckets.size() > 1;
  if (any_split)  // a single bucket would only repeat the overall rows
    for (const FidelityArmResult& a : r.arms)
      for (const BucketSummary& b : a.buckets) row(a.arm.name, b.bucket.label(), b.stats);
  return out;
}

std::string fidelity_svg(const FidelityResult& r, const std::string& title) {
  ChartSpec spec;
  spec.title = title;
  spec.x_label = "context depth (upper bound of bucket, tokens)";
  spec.y_label = "mean KL(" + r.ref + " ‖ arm), nats";
  spec.log2_x = true;
  for (const FidelityArmResult& a : r.arms) {
    Series s;
    s.name = a.arm.name;
    for (const BucketSummary& b : a.buckets) {
      // Plot at the last depth actually reached inside the bucket (the open bucket has no hi).
      s.x.push_back(double(std::min(b.bucket.hi, b.bucket.lo + b.stats.n)));
      s.y.push_back(b.stats.kld_mean);
    }
    spec.series.push_back(std::move(s));
  }
  return render_line_chart(spec);
}

}  // namespace weft::lab
