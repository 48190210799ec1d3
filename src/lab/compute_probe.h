// Multiply-accumulate rate of the backend's own matmul kernel on one of the model's own weight
// matrices, held in cache: the compute side of a batched decode step, measured the way the step
// uses the machine (same kernel, same threads, same weight dtype, T activation rows).
//
// Why the batch model needs it: the byte model (lab/bench_batch.h) assumes a step stays memory
// bound however many rows share it. A decode of B rows performs B times the multiply-adds of one
// row over the same weight bytes, and on a CPU the cores that issue the FMAs are the cores that
// stream the weights; on a small machine B = 8 rows of a bf16 model is enough for the FMAs to
// take as long as the reads. The probe turns B × (multiply-adds of a row) into seconds.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "backend/backend.h"
#include "core/matrix.h"
#include "model/weights.h"

namespace weft::lab {

class MatmulRateProbe {
 public:
  // w: a weight matrix the backend already holds (bound); only its first rows are used, up to
  // max_bytes, so that after one untimed call every timed call finds it in cache.
  MatmulRateProbe(Backend& backend, const Matrix& w, size_t max_bytes = size_t(4) << 20);
  // Multiply-adds per second of backend.matmul with T rows: the best of `trials` rounds, each
  // of enough calls to last >= 20 ms. Memoised per T.
  double macs_per_second(int64_t T, int trials = 5);
  const Matrix& matrix() const { return w_; }

 private:
  Backend& backend_;
  Matrix w_;
  std::map<int64_t, double> rate_;
};

// The matrices the batch model probes: the FFN gate projection of the first layer whose FFN is
// dense or has a shared expert (the rows every sequence multiplies), and expert 0's gate
// projection of the first MoE layer (routed rows). Either may be null (no such layer).
struct ProbeMatrices {
  const Matrix* dense = nullptr;
  const Matrix* expert = nullptr;
};
ProbeMatrices probe_matrices(const ModelWeights& w);

}  // namespace weft::lab
