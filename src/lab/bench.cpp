// The bench loop (prefill segments, snapshots, interleaved paired decodes), its byte model and
// its three renderings (JSON, Markdown, SVG).
#include "lab/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "lab/energy.h"
#include "lab/svg_plot.h"

namespace weft::lab {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string mib(double b) { return fmt("%.2f MiB", b / (1024.0 * 1024.0)); }

// JSON has no NaN: unmeasured values become null.
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

double kv_ratio(const ModelConfig& c, DType t) {
  return double(kv_bytes_per_token(c, t, t)) / double(kv_bytes_per_token(c, DType::kF16, DType::kF16));
}

}  // namespace

double kv_ceiling(double kv_share, double bytes_ratio) { return 1.0 / (1.0 - kv_share * (1.0 - bytes_ratio)); }

double kv_share_at(const Footprint& fp, uint64_t kv_f16_per_token, int64_t depth) {
  const double kv = double(kv_f16_per_token) * double(depth);
  return kv / (double(fp.active_weight_bytes) + kv + 2.0 * double(fp.gdn_state_bytes));
}

std::string kill_verdict(double ceiling, int64_t kill_at, double kill_below) {
  const std::string at = format_count(double(kill_at)), pct = fmt("%g%%", kill_below * 100.0);
  if (ceiling < 1.0 + kill_below) return "ceiling at " + at + " under " + pct + ": not worth a kernel";
  return "go: next, estimate the dequantization cost";
}

Result<BenchResult> run_bench(const Model& model, const std::string& model_name, const BenchOptions& opt_in) {
  BenchOptions opt = opt_in;
  const ModelConfig& c = model.config();
  if (opt.depths.empty()) return Status::error("no --ctx depths");
  for (size_t i = 0; i < opt.depths.size(); ++i)
    if (opt.depths[i] <= 0 || (i && opt.depths[i] <= opt.depths[i - 1]))
      return Status::error("--ctx depths must be positive and strictly ascending");
  if (opt.repeats < 1 || opt.gen < 1) return Status::error("--repeats and --gen must be >= 1");
  if (opt.arms.empty()) return Status::error("no --arms");
  if (opt.ceiling_only) opt.arms = {DType::kF16};  // Step 0 decodes the f16 curve alone
  if (c.num_full_attention_layers() == 0) return Status::error("the model has no full-attention layer: no KV cache to bench");
  for (DType t : opt.arms)
    if (!kv_type_supported(t, c.head_dim))
      return Status::error(std::string("KV type ") + dtype_name(t) + " needs head_dim % 32 == 0 (head_dim is " +
                           std::to_string(c.head_dim) + ")");

  const auto t_start = Clock::now();
  BenchResult r;
  r.model = model_name;
  r.options = opt;
  r.footprint = compute_footprint(model);
  r.kv_bytes_per_token_f16 = kv_bytes_per_token(c, DType::kF16, DType::kF16);

  // Quantized types the ceiling is projected for: the quantized arms, or q8_0 (and q4_0) in Step 0.
  std::vector<DType> q_types;
  for (DType t : opt_in.arms) if (t == DType::kQ8_0 || t == DType::kQ4_0) q_types.push_back(t);
  if (q_types.empty()) q_types = {DType::kQ8_0, DType::kQ4_0};
  r.kill_type = q_types.front();
  r.kill_ceiling = kv_ceiling(kv_share_at(r.footprint, r.kv_bytes_per_token_f16, opt.kill_at), kv_ratio(c, r.kill_type));
  if (opt.ceiling_only) r.verdict = kill_verdict(r.kill_ceiling, opt.kill_at, opt.kill_below);

  // Sessions: arm 0's session does the prefill when it is f16; otherwise a separate f16 one.
  std::vector<std::unique_ptr<Session>> sessions;
  for (DType t : opt.arms) {
    SessionOptions so;
    so.threads = opt.threads;
    so.batch = opt.prefill_batch;
    so.kv.k_type = so.kv.v_type = t;
    so.kv.page_tokens = opt.page_tokens;
    sessions.emplace_back(new Session(model, so));
  }
  std::unique_ptr<Session> own_prefill;
  Session* prefill = nullptr;
  for (size_t a = 0; a < opt.arms.size(); ++a)
    if (opt.arms[a] == DType::kF16) { prefill = sessions[a].get(); break; }
  if (!prefill) {
    SessionOptions so;
    so.threads = opt.threads;
    so.batch = opt.prefill_batch;
    so.kv.page_tokens = opt.page_tokens;
    own_prefill.reset(new Session(model, so));
    prefill = own_prefill.get();
  }
  r.threads = prefill->pool().size();

  // Bandwidth in this process, with the same thread count as the decode.
  if (opt.progress) std::fprintf(stderr, "[bench] bandwidth probe (3 x %s, %d trials)...\n", mib(double(opt.bandwidth_bytes)).c_str(), opt.bandwidth_trials);
  r.bandwidth = measure_bandwidth(opt.bandwidth_bytes, opt.bandwidth_trials, &prefill->pool());

  std::unique_ptr<EnergyMeter> meter;
  if (opt.energy) {
    meter.reset(new EnergyMeter(/*gpu_used=*/false));  // weft decodes on the CPU today
    r.energy_status = meter->available() ? meter->source() : "unavailable: " + meter->reason();
  } else {
    r.energy_status = "off";
  }

  // One deterministic token stream; the deepest depth is prefilled once, in segments.
  const int64_t V = c.vocab_size;
  std::vector<int32_t> stream(size_t(opt.depths.back()));
  Rng rng(opt.seed);
  for (int32_t& id : stream) id = int32_t(rng.below(uint64_t(V)));
  std::vector<float> logits(static_cast<size_t>(V));
  RecurrentState snapshot(recurrent_state_spec(c));

  for (int64_t depth : opt.depths) {
    DepthResult d;
    d.ctx = depth;
    const int64_t from = prefill->position();
    d.prefill_tokens = depth - from;
    const auto t0 = Clock::now();
    // Chunks of 8 batches: a progress line without disturbing the batch shape.
    const int64_t chunk = opt.prefill_batch * 8;
    for (int64_t p = from; p < depth;) {
      const int64_t n = std::min(chunk, depth - p);
      WEFT_RETURN_IF_ERROR(prefill->feed(stream.data() + p, n, nullptr, p + n == depth ? logits.data() : nullptr));
      p += n;
      if (opt.progress)
        std::fprintf(stderr, "\r[bench] prefill %lld/%lld  %.1f tok/s   ", (long long)p, (long long)depth,
                     double(p - from) / seconds_since(t0));
    }
    d.prefill_s = seconds_since(t0);
    d.prefill_tok_s = double(d.prefill_tokens) / d.prefill_s;
    if (opt.progress) std::fprintf(stderr, "\n");
    const int32_t first = argmax(logits.data(), V);
    snapshot.assign_from(prefill->state().recurrent());

    d.kv_share = kv_share_at(r.footprint, r.kv_bytes_per_token_f16, depth);
    for (DType t : q_types) d.ceilings.push_back({t, kv_ceiling(d.kv_share, kv_ratio(c, t))});

    // Every other arm starts from the snapshot: the f16 rows copied, or quantized once.
    for (size_t a = 0; a < opt.arms.size(); ++a) {
      if (sessions[a].get() != prefill) sessions[a]->state().assign_from(prefill->state());
      ArmResult ar;
      ar.type = opt.arms[a];
      ar.kv_bytes = kv_bytes_per_token(c, ar.type, ar.type) * uint64_t(depth);
      ar.bytes_per_token = r.footprint.active_weight_bytes + ar.kv_bytes + 2 * r.footprint.gdn_state_bytes;
      ar.kv_resident = sessions[a]->state().kv().bytes_allocated();
      ar.kv_resident_diff_pct = (double(ar.kv_resident) - double(ar.kv_bytes)) / double(ar.kv_bytes) * 100.0;
      d.arms.push_back(ar);
    }

    // Interleaved repeats A B A B ...: a drift in machine speed hits every arm alike. Repeat -1
    // is an untimed warm-up per arm (first touch of decode buffers, the arm's pages into cache).
    for (int rep = -1; rep < opt.repeats; ++rep) {
      for (size_t a = 0; a < opt.arms.size(); ++a) {
        Session& s = *sessions[a];
        s.state().rewind(depth, snapshot);
        int32_t tok = first;
        if (meter) meter->begin();
        const auto td = Clock::now();
        for (int g = 0; g < opt.gen; ++g) {
          WEFT_RETURN_IF_ERROR(s.step(tok, logits.data()));
          tok = argmax(logits.data(), V);  // greedy, fed back
        }
        const double secs = seconds_since(td);
        if (rep < 0) { if (meter) meter->end(); continue; }
        if (meter) d.arms[a].joules.push_back(meter->end());
        d.arms[a].tok_s.push_back(double(opt.gen) / secs);
        if (opt.progress)
          std::fprintf(stderr, "\r[bench] ctx %lld  repeat %d/%d  %-5s %.2f tok/s      ", (long long)depth, rep + 1,
                       opt.repeats, dtype_name(opt.arms[a]), double(opt.gen) / secs);
      }
    }
    if (opt.progress) std::fprintf(stderr, "\n");
    // The arms' decodes were undone; leave the prefill session exactly at `depth` for the next segment.
    prefill->state().rewind(depth, snapshot);

    const double bw = r.bandwidth.gb_s * 1e9;
    for (ArmResult& ar : d.arms) {
      ar.tok_s_ci = median_with_ci(ar.tok_s);
      for (size_t i = 0; i < ar.tok_s.size(); ++i) ar.ratios.push_back(ar.tok_s[i] / d.arms[0].tok_s[i]);
      ar.ratio_ci = median_with_ci(ar.ratios);
      ar.roofline_frac = double(ar.bytes_per_token) * ar.tok_s_ci.median / bw;
    }
    r.depths.push_back(std::move(d));
  }
  r.wall_s = seconds_since(t_start);
  return r;
}

nlohmann::json bench_json(const BenchResult& r) {
  nlohmann::json j;
  j["bandwidth_gb_s"] = r.bandwidth.gb_s;
  j["bandwidth"] = {{"copy_gb_s", r.bandwidth.copy_gb_s}, {"triad_gb_s", r.bandwidth.triad_gb_s},
                    {"read_gb_s", r.bandwidth.read_gb_s},
                    {"buffer_bytes", r.bandwidth.buffer_bytes}, {"trials", r.bandwidth.trials},
                    {"threads", r.bandwidth.threads}};
  j["model"] = r.model;
  j["threads"] = r.threads;
  j["repeats"] = r.options.repeats;
  j["gen"] = r.options.gen;
  j["byte_model"] = {{"active_weight_bytes", r.footprint.active_weight_bytes},
                     {"gdn_state_bytes", r.footprint.gdn_state_bytes},
                     {"gdn_bytes_per_token", 2 * r.footprint.gdn_state_bytes},
                     {"kv_bytes_per_token_f16", r.kv_bytes_per_token_f16},
                     {"full_attention_layers", r.footprint.full_attention_layers},
                     {"linear_attention_layers", r.footprint.linear_attention_layers}};
  nlohmann::json depths = nlohmann::json::array();
  for (const DepthResult& d : r.depths) {
    nlohmann::json e;
    e["ctx"] = d.ctx;
    e["prefill_tokens"] = d.prefill_tokens;
    e["prefill_s"] = d.prefill_s;
    e["prefill_tok_s"] = d.prefill_tok_s;
    e["kv_share"] = d.kv_share;
    e["ceiling"] = nlohmann::json::object();
    for (const auto& [t, v] : d.ceilings) e["ceiling"][dtype_name(t)] = v;
    e["arms"] = nlohmann::json::object();
    for (const ArmResult& a : d.arms) {
      nlohmann::json x;
      x["tok_s"] = a.tok_s_ci.median;
      x["ci"] = {a.tok_s_ci.lo, a.tok_s_ci.hi};
      x["ci_coverage"] = a.tok_s_ci.coverage;
      x["tok_s_runs"] = a.tok_s;
      x["ratio"] = a.ratio_ci.median;
      x["ratio_ci"] = {a.ratio_ci.lo, a.ratio_ci.hi};
      x["kv_bytes"] = a.kv_bytes;
      x["bytes_per_token"] = a.bytes_per_token;
      x["roofline_frac"] = a.roofline_frac;
      x["kv_bytes_resident"] = a.kv_resident;
      x["kv_resident_diff_pct"] = a.kv_resident_diff_pct;
      for (const auto& [t, v] : d.ceilings)
        if (t == a.type) x["ratio_over_ceiling"] = a.ratio_ci.median / v;
      if (!a.joules.empty()) {
        std::vector<double> jt;
        for (double jl : a.joules) jt.push_back(jl / double(r.options.gen));
        x["joules_per_run"] = nlohmann::json::array();
        for (double jl : a.joules) x["joules_per_run"].push_back(num(jl));
        x["joules_per_token"] = num(median(jt));
      }
      e["arms"][dtype_name(a.type)] = x;
    }
    depths.push_back(e);
  }
  j["depths"] = depths;
  j["kill"] = {{"at", r.options.kill_at}, {"below", r.options.kill_below}, {"type", dtype_name(r.kill_type)},
               {"ceiling", r.kill_ceiling}};
  j["verdict"] = r.options.ceiling_only ? nlohmann::json(r.verdict) : nlohmann::json(nullptr);
  j["energy"] = r.energy_status;
  j["wall_s"] = r.wall_s;
  return j;
}

std::string bench_markdown(const BenchResult& r) {
  std::string s;
  char buf[512];
  const Footprint& fp = r.footprint;
  std::snprintf(buf, sizeof buf,
                "model: %s; %d threads; %d repeats x %d decoded tokens per arm\n"
                "byte model per decoded token: weights %s + KV(d) + GDN state %s (read+write); "
                "KV f16 %llu B/token\n"
                "bandwidth (in-process probe, best of %d): copy %.2f GB/s, triad %.2f GB/s, read %.2f GB/s -> %.2f GB/s\n\n",
                r.model.c_str(), r.threads, r.options.repeats, r.options.gen, mib(double(fp.active_weight_bytes)).c_str(),
                mib(2.0 * double(fp.gdn_state_bytes)).c_str(), (unsigned long long)r.kv_bytes_per_token_f16,
                r.bandwidth.trials, r.bandwidth.copy_gb_s, r.bandwidth.triad_gb_s, r.bandwidth.read_gb_s,
                r.bandwidth.gb_s);
  s += buf;
  s += "| ctx | prefill tokens | prefill tok/s | kv share (f16) |";
  std::vector<DType> qt;
  if (!r.depths.empty()) for (const auto& [t, v] : r.depths[0].ceilings) { qt.push_back(t); s += std::string(" ceiling ") + dtype_name(t) + " |"; }
  s += "\n|---:|---:|---:|---:|";
  for (size_t i = 0; i < qt.size(); ++i) s += "---:|";
  s += "\n";
  for (const DepthResult& d : r.depths) {
    std::snprintf(buf, sizeof buf, "| %lld | %lld | %.1f | %.4f |", (long long)d.ctx, (long long)d.prefill_tokens,
                  d.prefill_tok_s, d.kv_share);
    s += buf;
    for (const auto& [t, v] : d.ceilings) s += fmt(" %.4f |", v);
    s += "\n";
  }
  const std::string base = r.depths.empty() || r.depths[0].arms.empty() ? "f16" : dtype_name(r.depths[0].arms[0].type);
  s += "\n| ctx | arm | tok/s (median) | 95% CI | ratio vs " + base +
       " | ratio CI | ceiling | ratio / ceiling | bytes/token | KV bytes (model) | KV resident | diff | roofline |";
  const bool energy = r.options.energy;
  if (energy) s += " J/token |";
  s += "\n|---:|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|";
  if (energy) s += "---:|";
  s += "\n";
  for (const DepthResult& d : r.depths) {
    for (const ArmResult& a : d.arms) {
      double ceil = NAN;
      for (const auto& [t, v] : d.ceilings) if (t == a.type) ceil = v;
      if (a.type == DType::kF16) ceil = 1.0;
      std::snprintf(buf, sizeof buf,
                    "| %lld | %s | %.2f | [%.2f, %.2f] | %.3f | [%.3f, %.3f] | %s | %s | %s | %s | %s | %+.2f%% | %.1f%% |",
                    (long long)d.ctx, dtype_name(a.type), a.tok_s_ci.median, a.tok_s_ci.lo, a.tok_s_ci.hi,
                    a.ratio_ci.median, a.ratio_ci.lo, a.ratio_ci.hi, std::isfinite(ceil) ? fmt("%.4f", ceil).c_str() : "-",
                    std::isfinite(ceil) ? fmt("%.3f", a.ratio_ci.median / ceil).c_str() : "-",
                    mib(double(a.bytes_per_token)).c_str(), mib(double(a.kv_bytes)).c_str(), mib(double(a.kv_resident)).c_str(),
                    a.kv_resident_diff_pct, a.roofline_frac * 100.0);
      s += buf;
      if (energy) {
        std::vector<double> jt;
        for (double jl : a.joules) if (std::isfinite(jl)) jt.push_back(jl / r.options.gen);
        s += jt.empty() ? std::string(" n/a |") : fmt(" %.3f |", median(jt));
      }
      s += "\n";
    }
  }
  if (!r.depths.empty() && r.depths[0].arms[0].tok_s_ci.coverage < 0.95)
    s += fmt("\n(with %.0f repeats the median interval is [min, max]", double(r.options.repeats)) +
         fmt(", coverage %.1f%%; 6 or more repeats reach 95%%)\n", r.depths[0].arms[0].tok_s_ci.coverage * 100.0);
  s += std::string("\nprojected ceiling of ") + dtype_name(r.kill_type) + " at " +
       format_count(double(r.options.kill_at)) + fmt(": %.4f\n", r.kill_ceiling);
  if (r.options.ceiling_only) s += "verdict: " + r.verdict + "\n";
  s += "energy: " + r.energy_status + "\n";
  return s;
}

std::string bench_svg(const BenchResult& r) {
  ChartSpec chart;
  chart.title = "decode tok/s vs context depth (" + r.model + ")";
  chart.x_label = "context depth (tokens, log2)";
  chart.y_label = "decode tok/s (median)";
  chart.log2_x = true;
  if (r.depths.empty()) return render_line_chart(chart);
  for (size_t a = 0; a < r.depths[0].arms.size(); ++a) {
    Series s;
    s.name = dtype_name(r.depths[0].arms[a].type);
    for (const DepthResult& d : r.depths) { s.x.push_back(double(d.ctx)); s.y.push_back(d.arms[a].tok_s_ci.median); }
    chart.series.push_back(s);
  }
  // Ceiling curves: what each quantized type would reach if only its bytes mattered.
  for (size_t q = 0; q < r.depths[0].ceilings.size(); ++q) {
    Series s;
    s.name = std::string(dtype_name(r.depths[0].ceilings[q].first)) + " ceiling (f16 x ceiling)";
    s.dashed = true;
    for (const DepthResult& d : r.depths) {
      s.x.push_back(double(d.ctx));
      s.y.push_back(d.arms[0].tok_s_ci.median * d.ceilings[q].second);
    }
    chart.series.push_back(s);
  }
  return render_line_chart(chart);
}

}  // namespace weft::lab
