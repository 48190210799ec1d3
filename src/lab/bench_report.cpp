// The three renderings of a bench result: JSON (every figure, machine-readable), Markdown (the
// report) and SVG (the curve). All three say the same things: ratios against the f16 arm, the
// ratio's interval and what it allows one to claim, the roofline only where it applies, and the
// KV bytes of the byte model next to the resident bytes measured from the process.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "lab/bench.h"
#include "lab/energy.h"
#include "lab/svg_plot.h"

namespace weft::lab {
namespace {

// Whether every timed window of an arm spans enough ticks of the energy counter to resolve its
// joules (EnergyMeter::resolves): window = gen / tok/s of that run.
// The resident-set measurement of a cache only sees host memory: on a device run the KV pages
// live in the device's memory and the column does not apply.
bool kv_resident_applies(const BenchResult& r) { return r.options.device == Device::kCpu; }

bool energy_resolved(const BenchResult& r, const BenchArmResult& a) {
  if (!std::isfinite(r.energy_tick_s)) return false;
  for (double t : a.tok_s)
    if (double(r.options.gen) / t < EnergyMeter::kTicksPerWindow * r.energy_tick_s) return false;
  return true;
}


std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string mib(double b) { return fmt("%.2f MiB", b / (1024.0 * 1024.0)); }

// JSON has no NaN: unmeasured values become null.
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

std::string interval(const Interval& ci, const char* f) {
  return "[" + fmt(f, ci.lo) + ", " + fmt(f, ci.hi) + "]";
}

std::string bandwidth_line(const BandwidthResult& b) {
  std::string llc = b.llc_bytes ? mib(double(b.llc_bytes)) : std::string("unknown");
  char buf[512];
  if (std::strcmp(b.read_kernel, "cuda") == 0) {
    std::snprintf(buf, sizeof buf,
                  "bandwidth (GPU probe on the device's own memory: 2 x %s arrays, L2 %s, best of %d): copy %.2f GB/s "
                  "(read + write), read %.2f GB/s -> roofline denominator %.2f GB/s (the better of the two)\n",
                  mib(double(b.buffer_bytes)).c_str(), llc.c_str(), b.trials, b.copy_gb_s, b.read_gb_s, b.gb_s);
    return buf;
  }
  std::snprintf(buf, sizeof buf,
                "bandwidth (in-process probe: 3 x %s arrays, last-level cache %s, %d threads, best of %d; "
                "read pass %s): copy %.2f GB/s, triad %.2f GB/s, read %.2f GB/s -> roofline denominator "
                "%.2f GB/s (the best of the three)\n",
                mib(double(b.buffer_bytes)).c_str(), llc.c_str(), b.threads, b.trials, b.read_kernel, b.copy_gb_s,
                b.triad_gb_s, b.read_gb_s, b.gb_s);
  return buf;
}

// The host's two probe readings (before the first depth, after the last) and how far apart.
std::string probes_line(const BenchResult& r) {
  if (r.probe_gb_s.size() < 2) return "";
  const double a = r.probe_gb_s[0], b = r.probe_gb_s[1], hi = std::max(a, b), lo = std::min(a, b);
  std::string s = "bandwidth probed before and after the arms: " + fmt("%.2f", a) + " and " + fmt("%.2f", b) +
                  " GB/s; the faster is the denominator";
  if (hi > 0 && (hi - lo) / hi > 0.15)
    s += fmt(" (they differ by %.0f%%: the machine's bandwidth moved during the run, and roofline shares carry "
             "that uncertainty)", 100.0 * (hi - lo) / hi);
  return s + "\n";
}

std::string baseline_line(const BenchResult& r) {
  std::string s = "baseline: every ratio, ceiling and ratio / ceiling is relative to the f16 arm";
  if (r.baseline_added) s += " (f16 was not in --arms, so it was added and measured)";
  return s + "\n";
}

}  // namespace

nlohmann::json bench_json(const BenchResult& r) {
  nlohmann::json j;
  const BandwidthResult& b = r.bandwidth;
  j["bandwidth_gb_s"] = b.gb_s;
  if (!r.probe_gb_s.empty()) j["bandwidth_probes_gb_s"] = r.probe_gb_s;
  j["bandwidth"] = {{"copy_gb_s", b.copy_gb_s}, {"triad_gb_s", b.triad_gb_s}, {"read_gb_s", b.read_gb_s},
                    {"roofline_gb_s", b.gb_s},
                    {"roofline_denominator", std::strcmp(b.read_kernel, "cuda") == 0 ? "max(copy, read) of the GPU's memory"
                                                                                      : "max(copy, triad, read)"},
                    {"read_kernel", b.read_kernel}, {"buffer_bytes", b.buffer_bytes}, {"llc_bytes", b.llc_bytes},
                    {"trials", b.trials}, {"threads", b.threads}};
  j["model"] = r.model;
  j["threads"] = r.threads;
  j["backend"] = r.backend;
  j["weights_where"] = r.weights_where;
  j["repeats"] = r.options.repeats;
  j["gen"] = r.options.gen;
  j["baseline"] = "f16";
  j["baseline_added"] = r.baseline_added;
  j["ratio_ci_method"] = "95% percentile bootstrap of the median of the paired per-repeat ratios (10000 resamples)";
  j["kv_resident_method"] = kv_resident_applies(r)
                                ? "growth of the process resident set (/proc/self/smaps_rollup) while the arm's cache was filled"
                                : "does not apply: the cache lives in device memory, which the process resident set does not count";
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
    e["tiled_tokens"] = d.tiled_tokens;
    e["prefill_s"] = d.prefill_s;
    e["prefill_tok_s"] = d.prefill_tokens > 0 ? nlohmann::json(d.prefill_tok_s) : nlohmann::json(nullptr);
    e["kv_share"] = d.kv_share;
    e["ceiling"] = nlohmann::json::object();
    for (const auto& [t, v] : d.ceilings) e["ceiling"][dtype_name(t)] = v;
    e["arms"] = nlohmann::json::object();
    for (const BenchArmResult& a : d.arms) {
      const CeilingClaim& c = a.claim;
      nlohmann::json x;
      x["tok_s"] = a.tok_s_ci.median;
      x["ci"] = {a.tok_s_ci.lo, a.tok_s_ci.hi};
      x["ci_coverage"] = a.tok_s_ci.coverage;
      x["tok_s_runs"] = a.tok_s;
      x["ratios"] = a.ratios;
      x["ratio"] = c.ratio;
      x["ratio_ci"] = {c.ci.lo, c.ci.hi};
      x["ceiling"] = num(c.ceiling);
      x["ratio_over_ceiling"] = num(c.of_ceiling);
      x["ratio_over_ceiling_ci"] = {num(c.of_ceiling_ci.lo), num(c.of_ceiling_ci.hi)};
      x["claim"] = c.verdict;
      x["resolved"] = c.resolved;
      x["bytes_per_token"] = a.bytes_per_token;
      x["kv_bytes_model"] = a.kv_bytes;
      x["kv_bytes_resident_measured"] = kv_resident_applies(r) ? nlohmann::json(a.kv_resident) : nlohmann::json(nullptr);
      x["kv_bytes_allocated"] = a.kv_allocated;
      x["kv_resident_diff_pct"] = kv_resident_applies(r) ? num(a.kv_resident_diff_pct) : nlohmann::json(nullptr);
      x["roofline"] = a.roofline.kind_name();
      x["roofline_frac"] = a.roofline.applies() ? nlohmann::json(a.roofline.fraction) : nlohmann::json(nullptr);
      x["bytes_per_s_over_bandwidth"] = a.roofline.fraction;
      if (!a.joules.empty()) {
        std::vector<double> jt;
        for (double jl : a.joules) jt.push_back(jl / double(r.options.gen));
        x["joules_per_run"] = nlohmann::json::array();
        for (double jl : a.joules) x["joules_per_run"].push_back(num(jl));
        x["joules_per_token"] = num(median(jt));
        x["joules_resolved"] = energy_resolved(r, a);
      }
      e["arms"][dtype_name(a.type)] = x;
    }
    if (!d.batch.empty()) {
      e["batch"] = nlohmann::json::object();
      for (const BatchArm& arm : d.batch) {
        nlohmann::json points = nlohmann::json::array();
        for (const BatchPoint& p : arm.points)
          points.push_back({{"batch", p.batch},
                            {"aggregate_tok_s", p.aggregate.median},
                            {"aggregate_ci", {p.aggregate.lo, p.aggregate.hi}},
                            {"aggregate_tok_s_runs", p.aggregate_tok_s},
                            {"per_sequence_tok_s", p.per_sequence_tok_s},
                            {"experts_touched_per_step_measured", p.experts_touched},
                            {"bytes_per_step_model", p.bytes_per_step},
                            {"speedup_measured", p.measured_speedup},
                            {"speedup_predicted", p.predicted_speedup},
                            {"measured_over_predicted", p.measured_speedup / p.predicted_speedup},
                            {"compute_seconds_per_step", arm.compute_probed ? nlohmann::json(p.compute_seconds_per_step)
                                                                           : nlohmann::json(nullptr)},
                            {"speedup_predicted_with_compute", arm.compute_probed
                                                                   ? nlohmann::json(p.predicted_speedup_with_compute)
                                                                   : nlohmann::json(nullptr)}});
        e["batch"][dtype_name(arm.type)] = points;
        if (arm.compute_probed) e["batch_compute_probe"] = arm.probe;
      }
    }
    depths.push_back(e);
  }
  j["depths"] = depths;
  j["kill"] = {{"at", r.options.kill_at}, {"below", r.options.kill_below}, {"type", dtype_name(r.kill_type)},
               {"ceiling", r.kill_ceiling}};
  j["verdict"] = r.options.ceiling_only ? nlohmann::json(r.verdict) : nlohmann::json(nullptr);
  j["energy"] = r.energy_status;
  j["energy_counter_tick_s"] = num(r.energy_tick_s);
  j["tile_fill_from"] = r.options.tile_from > 0 ? nlohmann::json(r.options.tile_from) : nlohmann::json(nullptr);
  j["wall_s"] = r.wall_s;
  return j;
}

std::string bench_markdown(const BenchResult& r) {
  std::string s;
  char buf[768];
  const Footprint& fp = r.footprint;
  std::snprintf(buf, sizeof buf,
                "model: %s; %d threads (%s); %d repeats x %d decoded tokens per arm\n"
                "byte model per decoded token: weights %s + KV(d) + GDN state %s (read+write); "
                "KV f16 %llu B/token\n",
                r.model.c_str(), r.threads, r.backend.c_str(), r.options.repeats, r.options.gen, mib(double(fp.active_weight_bytes)).c_str(),
                mib(2.0 * double(fp.gdn_state_bytes)).c_str(), (unsigned long long)r.kv_bytes_per_token_f16);
  s += buf;
  if (!r.weights_where.empty()) s += "weights read from " + r.weights_where + "\n";
  s += bandwidth_line(r.bandwidth);
  s += probes_line(r);
  s += baseline_line(r) + "\n";
  s += "| ctx | prefill tokens | prefill tok/s | kv share (f16) |";
  std::vector<DType> qt;
  if (!r.depths.empty()) for (const auto& [t, v] : r.depths[0].ceilings) { qt.push_back(t); s += std::string(" ceiling ") + dtype_name(t) + " |"; }
  s += "\n|---:|---:|---:|---:|";
  for (size_t i = 0; i < qt.size(); ++i) s += "---:|";
  s += "\n";
  for (const DepthResult& d : r.depths) {
    const std::string rate = d.prefill_tokens > 0 ? fmt("%.1f", d.prefill_tok_s) : "-";
    std::snprintf(buf, sizeof buf, "| %lld | %lld | %s | %.4f |", (long long)d.ctx, (long long)d.prefill_tokens,
                  rate.c_str(), d.kv_share);
    s += buf;
    for (const auto& [t, v] : d.ceilings) s += fmt(" %.4f |", v);
    s += "\n";
  }
  if (r.options.tile_from > 0) {
    std::snprintf(buf, sizeof buf,
                  "\n--tile-fill: at most %lld tokens were prefilled; deeper contexts repeat their KV pages "
                  "(decode speed at the depth's bytes; the context itself is meaningless)\n",
                  (long long)r.options.tile_from);
    s += buf;
  }
  s += "\n| ctx | arm | tok/s (median) | 95% CI | ratio vs f16 (paired median) | ratio 95% CI (bootstrap) | "
       "ceiling (byte model) | ratio / ceiling [95% CI] | claim | bytes/token (byte model) | KV (byte model) | "
       "KV resident (measured) | measured vs model | roofline (of probe) |";
  const bool energy = r.options.energy;
  if (energy) s += " J/token |";
  s += "\n|---:|---|---:|---|---:|---|---:|---|---|---:|---:|---:|---:|---|";
  if (energy) s += "---:|";
  s += "\n";
  bool fits = false, above = false;
  for (const DepthResult& d : r.depths) {
    for (const BenchArmResult& a : d.arms) {
      const CeilingClaim& c = a.claim;
      const bool base = a.type == DType::kF16, has_ceiling = std::isfinite(c.ceiling);
      fits |= a.roofline.kind == RooflineKind::kFitsInCache;
      above |= a.roofline.kind == RooflineKind::kAboveProbe;
      const std::string of_ceiling =
          base || !has_ceiling ? std::string("-") : fmt("%.3f ", c.of_ceiling) + interval(c.of_ceiling_ci, "%.3f");
      std::snprintf(buf, sizeof buf,
                    "| %lld | %s | %.2f | [%.2f, %.2f] | %.3f | %s | %s | %s | %s | %s | %s | %s | %s | %s |",
                    (long long)d.ctx, dtype_name(a.type), a.tok_s_ci.median, a.tok_s_ci.lo, a.tok_s_ci.hi, c.ratio,
                    interval(c.ci, "%.3f").c_str(), has_ceiling ? fmt("%.4f", c.ceiling).c_str() : "-",
                    of_ceiling.c_str(), c.verdict.c_str(), mib(double(a.bytes_per_token)).c_str(),
                    mib(double(a.kv_bytes)).c_str(),
                    kv_resident_applies(r) ? mib(double(a.kv_resident)).c_str() : "does not apply (device memory)",
                    kv_resident_applies(r) ? fmt("%+.2f%%", a.kv_resident_diff_pct).c_str() : "-",
                    a.roofline.label().c_str());
      s += buf;
      if (energy) {
        std::vector<double> jt;
        for (double jl : a.joules) if (std::isfinite(jl)) jt.push_back(jl / r.options.gen);
        if (jt.empty()) s += " n/a |";
        else if (!energy_resolved(r, a)) s += fmt(" cannot resolve (~%.3f) |", median(jt));
        else s += fmt(" %.3f |", median(jt));
      }
      s += "\n";
    }
  }
  s += "\n";
  if (!r.depths.empty() && !r.depths[0].batch.empty()) {
    s += "Batched decode: B sequences share the context and decode together (one forward call per step).\n\n"
         "| ctx | arm | batch | aggregate tok/s (median) | 95% CI | per-sequence tok/s | experts touched / step "
         "(measured) | bytes / step (batch byte model) | speed-up vs batch 1 (measured) | predicted (byte model) | "
         "measured / predicted | compute / step (ms) | predicted (bytes + compute) | measured / predicted (bytes + "
         "compute) |\n|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    std::string probe;
    for (const DepthResult& d : r.depths)
      for (const BatchArm& arm : d.batch) {
        if (arm.compute_probed) probe = arm.probe;
        for (const BatchPoint& p : arm.points) {
          std::snprintf(buf, sizeof buf, "| %lld | %s | %lld | %.2f | [%.2f, %.2f] | %.2f | %.1f | %s | %.2f | %.2f | %.2f |",
                        (long long)d.ctx, dtype_name(arm.type), (long long)p.batch, p.aggregate.median, p.aggregate.lo,
                        p.aggregate.hi, p.per_sequence_tok_s, p.experts_touched, mib(double(p.bytes_per_step)).c_str(),
                        p.measured_speedup, p.predicted_speedup, p.measured_speedup / p.predicted_speedup);
          s += buf;
          if (arm.compute_probed)
            std::snprintf(buf, sizeof buf, " %.1f | %.2f | %.2f |\n", p.compute_seconds_per_step * 1e3,
                          p.predicted_speedup_with_compute, p.measured_speedup / p.predicted_speedup_with_compute);
          else
            std::snprintf(buf, sizeof buf, " does not apply | does not apply | does not apply |\n");
          s += buf;
        }
      }
    s += "\nbytes / step = shared weights + experts touched x one expert + B x (KV(d) + GDN state); predicted "
         "speed-up (byte model) = B x bytes(1) / bytes(B), a decode that stays memory bound (its multiply-adds "
         "free).\ncompute / step = B x (multiply-adds of a row) at the matmul kernel's rate for that many rows, "
         "measured on the model's own weights held in cache";
    if (!probe.empty()) s += " (" + probe + ")";
    s += "; predicted (bytes + compute) = B x t(1) / ((t(1) - compute(1)) x bytes(B) / bytes(1) + compute(B)), "
         "the same cores streaming and computing without overlap. The two predictions bracket what the machine "
         "allows. CPU only: on a GPU the compute columns do not apply.\n\n";
  }
  if (!r.depths.empty() && r.depths[0].f16().tok_s_ci.coverage < 0.95)
    s += fmt("tok/s CI: with %.0f repeats the median interval is [min, max]", double(r.options.repeats)) +
         fmt(", coverage %.1f%%; 6 or more repeats reach 95%%.\n", r.depths[0].f16().tok_s_ci.coverage * 100.0);
  if (r.options.arms.size() > 1)
    s += "claim: where the ratio's 95% interval holds both 1.0 (f16) and the ceiling, or there are fewer than " +
         std::to_string(kMinRepeatsForClaim) +
         " repeats, this run cannot resolve the arm from f16 nor from its ceiling, and no share of the ceiling is "
         "claimed.\n";
  s += "KV (byte model) = KV bytes per token x depth; KV resident (measured) = growth of this process's resident "
       "set while the arm's cache was filled (host runs only: a device's memory is not in it).\n";
  if (fits)
    s += "roofline does not apply (fits in cache): bytes/token <= the " + mib(double(r.bandwidth.llc_bytes)) +
         " last-level cache, so the token's bytes can stay in cache and DRAM bandwidth is not what bounds it.\n";
  if (above)
    s += "roofline does not apply (above the probe): bytes/token x tok/s exceeds the best DRAM bandwidth the probe "
         "measured, so part of the bytes came from cache (or the probe was disturbed); no percentage over 100 is "
         "printed.\n";
  s += std::string("projected ceiling of ") + dtype_name(r.kill_type) + " at " +
       format_count(double(r.options.kill_at)) + fmt(": %.4f\n", r.kill_ceiling);
  if (r.options.ceiling_only) s += "verdict: " + r.verdict + "\n";
  s += "energy: " + r.energy_status;
  if (r.options.energy && std::isfinite(r.energy_tick_s))
    s += fmt(" (counter updates every %.1f ms", r.energy_tick_s * 1e3) +
         fmt("; J/token needs timed windows of >= %.0f updates, else \"cannot resolve\": raise --gen)",
             EnergyMeter::kTicksPerWindow);
  else if (r.options.energy && r.energy_tick_s == INFINITY)
    s += " (the counter did not move in 0.3 s: J/token cannot be resolved)";
  s += "\n";
  return s;
}

std::string bench_svg(const BenchResult& r) {
  ChartSpec chart;
  chart.title = "decode tok/s vs context depth (" + r.model + ")";
  chart.x_label = "context depth (tokens, log2)";
  chart.y_label = "decode tok/s (median)";
  chart.log2_x = true;
  if (r.depths.empty()) return render_line_chart(chart);
  const DepthResult& first = r.depths[0];
  for (size_t a = 0; a < first.arms.size(); ++a) {
    Series s;
    s.name = dtype_name(first.arms[a].type);
    for (const DepthResult& d : r.depths) { s.x.push_back(double(d.ctx)); s.y.push_back(d.arms[a].tok_s_ci.median); }
    chart.series.push_back(s);
  }
  // Ceiling curves: what each quantized type would reach if only its bytes mattered.
  for (size_t q = 0; q < first.ceilings.size(); ++q) {
    Series s;
    s.name = std::string(dtype_name(first.ceilings[q].first)) + " ceiling (f16 x ceiling)";
    s.dashed = true;
    for (const DepthResult& d : r.depths) {
      s.x.push_back(double(d.ctx));
      s.y.push_back(d.f16().tok_s_ci.median * d.ceilings[q].second);
    }
    chart.series.push_back(s);
  }
  // The claims and rooflines of the deepest depth, as the tables state them.
  const DepthResult& last = r.depths.back();
  chart.notes.push_back("at " + format_count(double(last.ctx)) + " (ratios vs f16" +
                        (r.baseline_added ? ", f16 added as baseline" : "") + "; roofline of " +
                        fmt("%.1f GB/s, the probe's best):", r.bandwidth.gb_s));
  for (const BenchArmResult& a : last.arms) {
    std::string line = std::string("  ") + dtype_name(a.type) + ": roofline " + a.roofline.label();
    if (a.type != DType::kF16)
      line += fmt("; ratio %.3f ", a.claim.ratio) + interval(a.claim.ci, "%.3f") +
              (std::isfinite(a.claim.ceiling) ? fmt(", ceiling %.4f", a.claim.ceiling) : std::string()) + ": " +
              a.claim.verdict;
    chart.notes.push_back(line);
  }
  return render_line_chart(chart);
}

}  // namespace weft::lab
