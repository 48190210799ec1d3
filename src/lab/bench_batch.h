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
#pragma once

#include <cstdint>
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
};

struct BatchArm {
  DType type = DType::kF16;
  std::vector<BatchPoint> points;        // in the order of the batch sizes (1 first)
};

struct BatchRunOptions {
  std::vector<int64_t> batches;          // ascending, 1 first
  int repeats = 6;
  int gen = 16;
  int threads = 0;
  Device device = Device::kCpu;
  int64_t page_tokens = 256;
};

// Decodes the batch sizes of `o` from `prefilled` (its KV rows and GDN state at `depth`; `first`
// is the token the prefill predicts), interleaving the batch sizes within each repeat.
Result<BatchArm> run_batch_arm(const Model& model, const ModelState& prefilled, int32_t first, DType type,
                               int64_t depth, const Footprint& fp, const BatchRunOptions& o);

}  // namespace weft::lab
