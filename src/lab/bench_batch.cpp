#include "lab/bench_batch.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "lab/compute_probe.h"

namespace weft::lab {

namespace {

using Clock = std::chrono::steady_clock;

// The same greedy pick as the bench's single-sequence loop and the server (engine/sampler.h).
// Not std::max_element: at -O2 its pointer-chasing loop takes ~3 ns per logit (0.75 ms for a
// 248,320-token vocabulary on this VM, vs 0.14 ms), which made batch 1 here look 11% slower than
// a session's step on the H200 and cost batch 8 ~5 ms of host time per step (results §10).
int32_t argmax_of(const std::vector<float>& x) { return argmax(x.data(), int64_t(x.size())); }

// The compute side of the batch model (lab/bench_batch.h), after the timed runs so the probe's
// cache traffic cannot disturb them.
void add_compute_side(Backend& backend, const Model& model, const Footprint& fp, int64_t depth, BatchArm& arm) {
  const ModelConfig& c = model.config();
  const ProbeMatrices m = probe_matrices(model.weights());
  const Matrix* dense_m = m.dense ? m.dense : &model.weights().lm_head;
  MatmulRateProbe dense(backend, *dense_m);
  MatmulRateProbe expert(backend, m.expert ? *m.expert : *dense_m);
  const double p_routed = double(fp.active_routed_expert_params);
  const double p_dense = double(fp.active_params) - p_routed +
                         double(c.num_full_attention_layers() * c.num_attention_heads * c.head_dim) * double(depth) * 2.0;
  auto compute_seconds = [&](const BatchPoint& pt) {
    const double B = double(pt.batch);
    double secs = B * p_dense / dense.macs_per_second(pt.batch);
    if (p_routed > 0 && pt.experts_touched > 0) {
      // Rows per touched (layer, expert) pair: B · k · MoE layers over the pairs touched.
      const double rows = B * double(c.num_experts_per_tok) * double(fp.moe_layers) / pt.experts_touched;
      secs += B * p_routed / expert.macs_per_second(std::max<int64_t>(1, std::llround(rows)));
    }
    return secs;
  };
  for (BatchPoint& pt : arm.points) pt.compute_seconds_per_step = compute_seconds(pt);
  const BatchPoint& one = arm.points.front();
  const double t1 = 1.0 / one.aggregate.median;  // seconds per step at B = 1
  for (BatchPoint& pt : arm.points)
    pt.predicted_speedup_with_compute =
        predicted_speedup_with_compute(pt.batch, t1, one.compute_seconds_per_step, double(one.bytes_per_step),
                                       double(pt.bytes_per_step), pt.compute_seconds_per_step);
  arm.compute_probed = true;
  arm.probe = std::string(dtype_name(dense_m->dtype)) + " " + std::to_string(dense.matrix().rows) + "x" +
              std::to_string(dense.matrix().cols) + " (dense rows)";
  if (m.expert)
    arm.probe += ", " + std::string(dtype_name(m.expert->dtype)) + " " + std::to_string(expert.matrix().rows) + "x" +
                 std::to_string(expert.matrix().cols) + " (expert rows)";
}

}  // namespace

double predicted_speedup_with_compute(int64_t batch, double t1, double c1, double bytes_1, double bytes_b,
                                      double c_b) {
  if (c1 > t1) {
    // The compute seconds come from a probe of the matmuls' rate, not from the step; a probe
    // that puts batch 1's compute above batch 1's whole measured step overestimates it, so every
    // compute estimate is scaled by t1 / c1 (batch 1 then predicts exactly 1, as it must).
    c_b *= t1 / c1;
    c1 = t1;
  }
  const double memory = std::max(0.0, t1 - c1) * bytes_b / bytes_1;
  return double(batch) * t1 / (memory + c_b);
}

Result<BatchArm> run_batch_arm(const Model& model, const ModelState& prefilled, int32_t first, DType type,
                               int64_t depth, const Footprint& fp, const BatchRunOptions& o) {
  const ModelConfig& c = model.config();
  const int64_t V = c.vocab_size, max_b = o.batches.back();
  EngineOptions eo;
  eo.threads = o.threads;
  eo.device = o.device;
  Engine engine(model, eo);
  KvOptions kv;
  kv.k_type = kv.v_type = type;
  kv.page_tokens = o.page_tokens;
  std::vector<SeqId> seqs;
  for (int64_t i = 0; i < max_b; ++i) {
    seqs.push_back(engine.add(kv));
    engine.state(seqs.back()).assign_from(prefilled);  // the shared context, in this arm's KV type
  }
  std::vector<std::vector<float>> logits(static_cast<size_t>(max_b), std::vector<float>(static_cast<size_t>(V)));

  // Byte model terms (lab/bench_batch.h).
  const uint64_t kv_t = kv_bytes_per_token(c, type, type) * uint64_t(depth);
  const uint64_t shared = fp.active_weight_bytes - fp.active_routed_expert_bytes;
  const double one_expert =
      fp.moe_layers > 0 ? double(fp.routed_expert_bytes) / double(fp.experts * fp.moe_layers) : 0.0;

  BatchArm arm;
  arm.type = type;
  for (int64_t b : o.batches) {
    BatchPoint point;
    point.batch = b;
    arm.points.push_back(point);
  }
  std::vector<int64_t> touched(o.batches.size(), 0), steps(o.batches.size(), 0);
  std::vector<DecodeInput> step;
  for (int rep = -1; rep < o.repeats; ++rep) {  // repeat -1: untimed warm-up
    for (size_t p = 0; p < o.batches.size(); ++p) {
      const int64_t B = o.batches[p];
      // Back to the shared context; sequence i continues from its own first token.
      std::vector<int32_t> tok(static_cast<size_t>(B));
      for (int64_t i = 0; i < B; ++i) {
        WEFT_RETURN_IF_ERROR(engine.state(seqs[size_t(i)]).rewind(depth, prefilled.recurrent()));
        tok[size_t(i)] = int32_t((int64_t(first) + 7919 * i) % V);
      }
      const BackendCounters before = engine.backend().counters();
      const auto t0 = Clock::now();
      for (int g = 0; g < o.gen; ++g) {
        step.clear();
        for (int64_t i = 0; i < B; ++i) step.push_back({seqs[size_t(i)], tok[size_t(i)], logits[size_t(i)].data()});
        WEFT_RETURN_IF_ERROR(engine.decode(step));
        for (int64_t i = 0; i < B; ++i) tok[size_t(i)] = argmax_of(logits[size_t(i)]);  // greedy, fed back
      }
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      if (rep < 0) continue;
      arm.points[p].aggregate_tok_s.push_back(double(B * o.gen) / secs);
      touched[p] += engine.backend().counters().moe_experts_touched - before.moe_experts_touched;
      steps[p] += o.gen;
    }
  }
  for (size_t p = 0; p < arm.points.size(); ++p) {
    BatchPoint& pt = arm.points[p];
    pt.aggregate = median_with_ci(pt.aggregate_tok_s);
    pt.per_sequence_tok_s = pt.aggregate.median / double(pt.batch);
    pt.experts_touched = steps[p] ? double(touched[p]) / double(steps[p]) : 0.0;
    pt.bytes_per_step = shared + uint64_t(pt.experts_touched * one_expert) +
                        uint64_t(pt.batch) * (kv_t + 2 * fp.gdn_state_bytes);
  }
  const BatchPoint& one = arm.points.front();
  for (BatchPoint& pt : arm.points) {
    pt.predicted_speedup = double(pt.batch) * double(one.bytes_per_step) / double(pt.bytes_per_step);
    pt.measured_speedup = pt.aggregate.median / one.aggregate.median;
  }
  if (std::strcmp(engine.backend().device(), "cpu") == 0) add_compute_side(engine.backend(), model, fp, depth, arm);
  return arm;
}

}  // namespace weft::lab
