// The batched decode of `weft bench --batch 1,4,8`: at each depth and KV arm, B sequences that
// share the prefilled context (copies of its state) decode together, one forward call per step
// for all of them (engine/engine.h), each continuing from a different first token so that their
// MoE routing diverges as real users' would.
//
// Batch byte model of one decode step of B sequences at depth d (bytes read from memory):
//   bytes(B) = W_shared + X(B) · e + B · (KV_t(d) + G)
//   W_shared = active weight bytes without the routed experts (read once per step, whatever B)
//   X(B)     = distinct (MoE layer, expert) pairs the step's routing touched — measured from the
//              backend's counters, not assumed — each read once for all the rows routed to it
//   e        = bytes of one routed expert of one layer;  KV_t(d), G as in lab/bench.h.
// Prediction: aggregate tok/s(B) = aggregate tok/s(1) · B · bytes(1) / bytes(B), the speed-up of
// a decode that stays memory bound; the report shows measured vs predicted.
//
// Compute side (CPU only; lab/compute_probe.h): a step of B rows also performs B times a row's
// multiply-adds, MAC(B) = B · (P_dense + A(d)) + B · P_routed, where P_dense = active parameters
// outside the routed experts (output head included), P_routed = the top-k experts' parameters,
// A(d) = full-attention layers · query heads · head_dim · d · 2 (scores and values). At the
// backend matmul's measured rate r(T) for T rows (on the model's own weights, in cache):
//   C(B) = B · (P_dense + A(d)) / r(B) + B · P_routed / r(rows per touched expert)
// Second prediction, for a machine whose cores both stream the weights and run the FMAs (no
// overlap): t(B) = (t(1) − C(1)) · bytes(B) / bytes(1) + C(B), with t(1) the measured step time
// at B = 1; speed-up B · t(1) / t(B). The byte model is the other limit (compute overlapped
// completely), so a measured speed-up between the two is what the machine allows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "lab/stats.h"
#include "model/footprint.h"
#include "model/model.h"
#include "model/state.h"
#include "backend/backend_factory.h"

namespace weft::lab {

struct BatchPoint {
  int64_t batch = 1;
  std::vector<double> aggregate_tok_s;   // per repeat: B · gen / seconds
  MedianInterval aggregate;              // median and interval of aggregate_tok_s
  double per_sequence_tok_s = 0;         // aggregate median / B
  double experts_touched = 0;            // X(B): distinct (layer, expert) pairs per step, measured
  uint64_t bytes_per_step = 0;           // bytes(B) of the byte model
  double predicted_speedup = 1;          // B · bytes(1) / bytes(B)
  double measured_speedup = 1;           // aggregate median / aggregate median at B = 1
  // Compute side (0 when not probed: a device other than the CPU).
  double compute_seconds_per_step = 0;   // C(B)
  double predicted_speedup_with_compute = 0;  // B · t(1) / ((t(1) − C(1)) · bytes(B)/bytes(1) + C(B))
};

struct BatchArm {
  DType type = DType::kF16;
  std::vector<BatchPoint> points;        // in the order of the batch sizes (1 first)
  bool compute_probed = false;           // the compute side was measured (CPU backend)
  std::string probe;                     // which matrices and dtype the rates come from
};

struct BatchRunOptions {
  std::vector<int64_t> batches;          // ascending, 1 first
  int repeats = 6;
  int gen = 16;
  int threads = 0;
  Device device = Device::kCpu;
  int64_t page_tokens = 256;
};

// The second prediction of the header comment: B · t1 / ((t1 − c1) · bytes_b / bytes_1 + c_b), where
// t1 is the measured step time at B = 1, c1 / c_b the compute seconds per step at 1 and B rows.
// Where c1 > t1 (the probe overestimates the compute: it cannot exceed the whole step) both
// compute figures are scaled by t1 / c1, so B = 1 predicts 1 and B predicts B · c1 / c_b.
double predicted_speedup_with_compute(int64_t batch, double t1, double c1, double bytes_1, double bytes_b,
                                      double c_b);

// Decodes the batch sizes of `o` from `prefilled` (its KV rows and GDN state at `depth`; `first`
// is the token the prefill predicts), interleaving the batch sizes within each repeat.
Result<BatchArm> run_batch_arm(const Model& model, const ModelState& prefilled, int32_t first, DType type,
                               int64_t depth, const Footprint& fp, const BatchRunOptions& o);

}  // namespace weft::lab
