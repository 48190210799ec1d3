// The bench loop (prefill segments, snapshots, interleaved paired decodes) and its byte model;
// the renderings (JSON, Markdown, SVG) are in bench_report.cpp.
#include "lab/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "core/progress_line.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "lab/energy.h"
#include "lab/resident.h"
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

double kv_ratio(const ModelConfig& c, DType t) {
  return double(kv_bytes_per_token(c, t, t)) / double(kv_bytes_per_token(c, DType::kF16, DType::kF16));
}

// A device probe in the host probe's record: a copy and a read pass (no triad), the device's
// last-level cache for the fits-in-cache test; the roofline uses the larger of the two.
BandwidthResult from_device_probe(const DeviceBandwidth& d) {
  BandwidthResult b;
  b.copy_gb_s = d.copy_gb_s;
  b.read_gb_s = d.read_gb_s;
  b.gb_s = std::max(d.copy_gb_s, d.read_gb_s);
  b.buffer_bytes = d.buffer_bytes;
  b.llc_bytes = d.cache_bytes;
  b.read_kernel = "cuda";
  b.trials = d.trials;
  return b;
}

}  // namespace

double DepthResult::ceiling_of(DType t) const {
  if (t == DType::kF16) return 1.0;
  for (const auto& [type, v] : ceilings)
    if (type == t) return v;
  return NAN;
}

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
  if (opt.tile_from < 0 || opt.tile_from % opt.page_tokens != 0)
    return Status::error("--tile-fill must be a positive multiple of the page size (" + std::to_string(opt.page_tokens) +
                         " tokens)");
  if (opt.arms.empty()) return Status::error("no --arms");
  for (size_t i = 0; i < opt.batches.size(); ++i)
    if (opt.batches[i] <= 0 || (i && opt.batches[i] <= opt.batches[i - 1]))
      return Status::error("--batch sizes must be positive and strictly ascending");
  if (!opt.batches.empty() && opt.batches[0] != 1) opt.batches.insert(opt.batches.begin(), 1);
  if (opt.ceiling_only) opt.arms = {DType::kF16};  // Step 0 decodes the f16 curve alone
  for (size_t i = 0; i < opt.arms.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (opt.arms[i] == opt.arms[j])
        return Status::error(std::string("--arms lists ") + dtype_name(opt.arms[i]) + " twice");
  // Every ratio is against f16: without an f16 arm there is nothing to divide by, so one is added
  // (last, so the arms asked for keep their order) and the reports say so.
  bool baseline_added = false;
  if (std::find(opt.arms.begin(), opt.arms.end(), DType::kF16) == opt.arms.end()) {
    opt.arms.push_back(DType::kF16);
    baseline_added = true;
  }
  const size_t baseline = size_t(std::find(opt.arms.begin(), opt.arms.end(), DType::kF16) - opt.arms.begin());
  if (c.num_full_attention_layers() == 0) return Status::error("the model has no full-attention layer: no KV cache to bench");
  for (DType t : opt.arms)
    if (!kv_type_supported(t, c.head_dim))
      return Status::error(std::string("KV type ") + dtype_name(t) + " needs head_dim % 32 == 0 (head_dim is " +
                           std::to_string(c.head_dim) + ")");

  const auto t_start = Clock::now();
  BenchResult r;
  r.model = model_name;
  r.options = opt;
  r.baseline_added = baseline_added;
  r.footprint = compute_footprint(model);
  r.kv_bytes_per_token_f16 = kv_bytes_per_token(c, DType::kF16, DType::kF16);

  // Types with a ceiling: every non-f16 arm (Step 0: the arms asked for, or q8_0 and q4_0).
  std::vector<DType> q_types;
  for (DType t : opt.ceiling_only ? opt_in.arms : opt.arms) if (t != DType::kF16) q_types.push_back(t);
  if (q_types.empty()) q_types = {DType::kQ8_0, DType::kQ4_0};
  r.kill_type = DType::kQ8_0;  // the verdict is about the smallest quantized arm asked for, else q8_0
  for (DType t : q_types) if (t == DType::kQ8_0 || t == DType::kQ4_0) { r.kill_type = t; break; }
  r.kill_ceiling = kv_ceiling(kv_share_at(r.footprint, r.kv_bytes_per_token_f16, opt.kill_at), kv_ratio(c, r.kill_type));
  if (opt.ceiling_only) r.verdict = kill_verdict(r.kill_ceiling, opt.kill_at, opt.kill_below);

  // One f16 session prefills; every arm (f16 too) decodes in its own session from a copy of the
  // prefill's state, so all arms start alike and each cache's filling can be measured alike.
  auto make_session = [&](DType t) {
    SessionOptions so;
    so.threads = opt.threads;
    so.device = opt.device;
    so.batch = opt.prefill_batch;
    so.kv.k_type = so.kv.v_type = t;
    so.kv.page_tokens = opt.page_tokens;
    return std::make_unique<Session>(model, so);
  };
  std::vector<std::unique_ptr<Session>> sessions;
  for (DType t : opt.arms) sessions.push_back(make_session(t));
  std::unique_ptr<Session> prefill_session = make_session(DType::kF16);
  Session* prefill = prefill_session.get();
  r.threads = prefill->pool().size();
  r.backend = prefill->backend().name();
  // Bound before anything is timed: the CPU's huge-page copy (~1 s per GiB) or a GPU's upload
  // would otherwise count as the first depth's prefill.
  WEFT_RETURN_IF_ERROR(prefill->bind_weights());
  for (const auto& s : sessions) WEFT_RETURN_IF_ERROR(s->bind_weights());
  r.weights_where = prefill->backend().weights_where();

  // Bandwidth in this process, of the memory the decode reads: the device's own where the backend
  // has a probe (a GPU), else the host's with the same thread count as the decode.
  if (auto dev = prefill->backend().device_bandwidth(opt.bandwidth_bytes, opt.bandwidth_trials)) {
    r.bandwidth = from_device_probe(*dev);
  } else {
    if (opt.progress)
      std::fprintf(stderr, "[bench] bandwidth probe (3 x %s, %d trials)...\n",
                   mib(double(probe_array_bytes(opt.bandwidth_bytes, last_level_cache_bytes()))).c_str(),
                   opt.bandwidth_trials);
    r.bandwidth = measure_bandwidth(opt.bandwidth_bytes, opt.bandwidth_trials, &prefill->pool());
    r.probe_gb_s.push_back(r.bandwidth.gb_s);
  }

  std::unique_ptr<EnergyMeter> meter;
  if (opt.energy) {
    meter.reset(new EnergyMeter(/*gpu_used=*/opt.device == Device::kCuda));  // NVML on the GPU, RAPL on the CPU
    r.energy_status = meter->available() ? meter->source() : "unavailable: " + meter->reason();
    r.energy_tick_s = meter->tick_seconds();
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
  int32_t first = 0;  // the token after the prefill (argmax of its last logits)

  for (int64_t depth : opt.depths) {
    DepthResult d;
    d.ctx = depth;
    const int64_t from = prefill->position();
    // With tile_from the prefill stops there and the arms' caches repeat its pages up to depth.
    const int64_t fed = opt.tile_from > 0 ? std::min(depth, opt.tile_from) : depth;
    d.prefill_tokens = fed - from;
    d.tiled_tokens = depth - fed;
    if (d.prefill_tokens > 0) {
      const auto t0 = Clock::now();
      // Chunks of 8 batches: a progress line without disturbing the batch shape.
      const int64_t chunk = opt.prefill_batch * 8;
      ProgressLine line;
      for (int64_t p = from; p < fed;) {
        const int64_t n = std::min(chunk, fed - p);
        WEFT_RETURN_IF_ERROR(prefill->feed(stream.data() + p, n, nullptr, p + n == fed ? logits.data() : nullptr));
        p += n;
        if (opt.progress)
          line.update(p == fed, "[bench] prefill %lld/%lld  %.1f tok/s", (long long)p, (long long)fed,
                      double(p - from) / seconds_since(t0));
      }
      d.prefill_s = seconds_since(t0);
      d.prefill_tok_s = double(d.prefill_tokens) / d.prefill_s;
      first = argmax(logits.data(), V);
      snapshot.assign_from(prefill->state().recurrent());
    }
    if (opt.progress && d.tiled_tokens > 0)
      std::fprintf(stderr, "[bench] ctx %lld: KV pages of the first %lld tokens repeated to the depth (--tile-fill)\n",
                   (long long)depth, (long long)fed);

    d.kv_share = kv_share_at(r.footprint, r.kv_bytes_per_token_f16, depth);
    for (DType t : q_types) d.ceilings.push_back({t, kv_ceiling(d.kv_share, kv_ratio(c, t))});

    // Every arm starts from the snapshot: the f16 rows copied, or quantized once. Its cache is
    // emptied and freed memory handed back first, so the process's resident growth across the
    // fill is the cache's pages as the kernel counts them (the GDN state is resident already).
    d.baseline = baseline;
    for (size_t a = 0; a < opt.arms.size(); ++a) {
      ModelState& st = sessions[a]->state();
      st.kv().clear();
      release_free_heap();
      const size_t rss_before = process_resident_bytes();
      st.assign_from(prefill->state());
      WEFT_RETURN_IF_ERROR(st.tile_to(depth));
      const size_t rss_after = process_resident_bytes();
      BenchArmResult ar;
      ar.type = opt.arms[a];
      ar.kv_bytes = kv_bytes_per_token(c, ar.type, ar.type) * uint64_t(depth);
      ar.bytes_per_token = r.footprint.active_weight_bytes + ar.kv_bytes + 2 * r.footprint.gdn_state_bytes;
      ar.kv_allocated = st.kv().bytes_allocated();
      ar.kv_resident = rss_after > rss_before ? rss_after - rss_before : 0;
      ar.kv_resident_diff_pct = (double(ar.kv_resident) - double(ar.kv_bytes)) / double(ar.kv_bytes) * 100.0;
      d.arms.push_back(ar);
    }

    // Interleaved repeats A B A B ...: a drift in machine speed hits every arm alike. Repeat -1
    // is an untimed warm-up per arm (first touch of decode buffers, the arm's pages into cache).
    ProgressLine line;
    for (int rep = -1; rep < opt.repeats; ++rep) {
      for (size_t a = 0; a < opt.arms.size(); ++a) {
        Session& s = *sessions[a];
        WEFT_RETURN_IF_ERROR(s.state().rewind(depth, snapshot));
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
          line.update(rep + 1 == opt.repeats && a + 1 == opt.arms.size(), "[bench] ctx %lld  repeat %d/%d  %-5s %.2f tok/s",
                      (long long)depth, rep + 1, opt.repeats, dtype_name(opt.arms[a]), double(opt.gen) / secs);
      }
    }

    for (BenchArmResult& ar : d.arms) {
      ar.tok_s_ci = median_with_ci(ar.tok_s);
      for (size_t i = 0; i < ar.tok_s.size(); ++i) ar.ratios.push_back(ar.tok_s[i] / d.f16().tok_s[i]);
      ar.claim = judge_ceiling(ar.ratios, d.ceiling_of(ar.type));
      if (ar.type == DType::kF16) ar.claim.verdict = "baseline";
    }
    // Batched decode: B sequences sharing this context, one forward call per step.
    if (!opt.batches.empty() && !opt.ceiling_only) {
      BatchRunOptions bo;
      bo.batches = opt.batches;
      bo.repeats = opt.repeats;
      bo.gen = opt.gen;
      bo.threads = opt.threads;
      bo.device = opt.device;
      bo.page_tokens = opt.page_tokens;
      for (size_t a = 0; a < opt.arms.size(); ++a) {
        const DType t = opt.arms[a];
        if (opt.progress)
          std::fprintf(stderr, "[bench] ctx %lld  batched decode (%s)\n", (long long)depth, dtype_name(t));
        // The arm's own context (already in its KV type, tiled where asked): the sequences copy
        // its pages byte for byte, the same rows the f16 prefill would have been encoded into.
        ModelState& context = sessions[a]->state();
        WEFT_RETURN_IF_ERROR(context.rewind(depth, snapshot));
        auto arm = run_batch_arm(model, context, first, t, depth, r.footprint, bo);
        if (!arm.ok()) return arm.status();
        d.batch.push_back(std::move(arm.value()));
      }
    }
    r.depths.push_back(std::move(d));
  }
  // The host probe again, after the arms; the faster of the two readings is the denominator.
  if (!r.probe_gb_s.empty() && !opt.ceiling_only) {
    if (opt.progress) std::fprintf(stderr, "[bench] bandwidth probe again, after the arms...\n");
    BandwidthResult after = measure_bandwidth(opt.bandwidth_bytes, opt.bandwidth_trials, &prefill->pool());
    r.probe_gb_s.push_back(after.gb_s);
    if (after.gb_s > r.bandwidth.gb_s) r.bandwidth = after;
  }
  for (DepthResult& d : r.depths)
    for (BenchArmResult& ar : d.arms)
      ar.roofline = judge_roofline(double(ar.bytes_per_token), ar.tok_s_ci.median, r.bandwidth.gb_s * 1e9,
                                   r.bandwidth.llc_bytes);
  r.wall_s = seconds_since(t_start);
  return r;
}

}  // namespace weft::lab
