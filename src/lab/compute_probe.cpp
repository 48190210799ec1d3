#include "lab/compute_probe.h"

#include <algorithm>
#include <chrono>

namespace weft::lab {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

MatmulRateProbe::MatmulRateProbe(Backend& backend, const Matrix& w, size_t max_bytes) : backend_(backend), w_(w) {
  const int64_t rows = std::max<int64_t>(1, int64_t(max_bytes / std::max<size_t>(1, w.row_bytes())));
  if (rows < w_.rows) w_ = w_.row_slice(0, rows);
}

double MatmulRateProbe::macs_per_second(int64_t T, int trials) {
  if (auto it = rate_.find(T); it != rate_.end()) return it->second;
  // The backend's scratch buffers, as the forward pass uses them. Their contents are whatever the
  // last step left (finite activations); multiply-add timing does not depend on the values.
  const float* x = backend_.buffer(Buf::kA, T * w_.cols);
  float* y = backend_.buffer(Buf::kB, T * w_.rows);
  float sink = 0;
  auto run = [&](int calls) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) backend_.matmul(w_, x, T, y);
    backend_.copy_to_host(&sink, y, 1);  // waits for a device backend's queue
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  run(1);  // brings the rows into cache (and the kernel's code)
  int calls = 1;
  while (calls < (1 << 20)) {  // enough calls for a round of >= 20 ms
    if (run(calls) >= 0.02) break;
    calls *= 2;
  }
  double best = 1e300;
  for (int t = 0; t < trials; ++t) best = std::min(best, run(calls));
  const double macs = double(w_.rows) * double(w_.cols) * double(T) * calls;
  return rate_[T] = macs / best;
}

ProbeMatrices probe_matrices(const ModelWeights& w) {
  ProbeMatrices p;
  for (const LayerWeights& L : w.layers) {
    if (p.dense == nullptr) {
      if (L.ffn_kind != FfnKind::kMoe && L.ffn.dense.gate_proj.data) p.dense = &L.ffn.dense.gate_proj;
      if (L.ffn_kind == FfnKind::kMoe && L.ffn.has_shared_expert) p.dense = &L.ffn.shared_expert.gate_proj;
    }
    if (p.expert == nullptr && L.ffn_kind == FfnKind::kMoe && !L.ffn.experts.empty())
      p.expert = &L.ffn.experts[0].gate_proj;
  }
  if (p.dense == nullptr) p.dense = p.expert;  // an MoE without shared experts: the experts' shape
  return p;
}

}  // namespace weft::lab
