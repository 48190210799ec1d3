// CpuBackend: the Backend interface on the host CPU, with the kernels of src/kernels/cpu (AVX2
// where the machine has it, their scalar twins otherwise: both give the same bits) and one
// thread pool. Row-wise ops that cost O(hidden) per row run on the pool when a batch has enough
// rows to pay for the hand-off; every output row is still computed by one task alone.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/host_weight_copy.h"
#include "backend/moe_route_host.h"
#include "core/scratch_array.h"
#include "core/thread_pool.h"

namespace weft {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads);

  std::string name() const override;
  std::string weights_where() const override;
  int threads() const override { return pool_.size(); }
  ThreadPool& pool() override { return pool_; }

  float* buffer(Buf role, int64_t n) override;
  PageAllocator& allocator() override;
  void copy_to_host(float* dst, const float* src, int64_t n) override;

  void embed(const Matrix& table, const int32_t* ids, int64_t n, float* x) override;
  void gather_rows(const float* src, const int32_t* rows, int64_t n, int64_t width, float* dst) override;
  void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps, bool plus_one) override;
  void add(float* x, const float* y, int64_t n) override;
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override;
  void mul_sigmoid(float* x, const float* gate, int64_t n) override;
  void add_sigmoid_scaled(float* y, const float* x, const float* s, int64_t rows, int64_t width) override;

  // Weight matrices are read from huge-page copies (host_weight_copy.h) where bound.
  bool has_weights(const void* key) const override;
  Status bind_weights(const void* key, const WeightSet& weights) override;

  void matmul(const Matrix& w, const float* x, int64_t T, float* y) override;
  void grouped_matmul(const MoeRouting& routing, const GroupedMatmul* jobs, int64_t n_jobs) override;

  void rope_tables(const int64_t* positions, int64_t rows, const float* inv_freq, int64_t half, float* cos,
                   float* sin) override;
  void attention_prep(const AttentionPrepArgs& a) override;
  void kv_append(KvCache& cache, int64_t layer, const float* k, const float* v, int64_t T) override;
  void attention(const AttentionCall* calls, int64_t n) override;
  void hadamard_rows(float* x, int64_t rows, int64_t n) override;

  void gdn_unpack(const float* qkvz, const float* ba, int64_t rows, int64_t n_k, int64_t n_v, int64_t dk, int64_t dv,
                  float* mixed, float* z, float* b, float* a) override;
  void causal_conv(float* x, int64_t T, int64_t channels, const float* w, int64_t kernel, float* conv_state) override;
  void gdn_prep(const GdnPrepArgs& a) override;
  void gdn_recurrence(const GdnCall* calls, int64_t n) override;
  void rmsnorm_gated(const float* x, const float* z, const float* w, float* y, int64_t rows, int64_t n,
                     float eps) override;

  MoeRouting moe_route(float* logits, int64_t rows, int64_t n_experts, int64_t k, bool renormalize) override;
  void moe_gather(const MoeRouting& r, const float* x, int64_t width, float* dst) override;
  void moe_combine(const MoeRouting& r, const float* out, int64_t width, float* y) override;

 private:
  // The matrix w as the kernels read it: its data in the bound copy, if there is one, and how
  // the copy stores its rows (*layout: q4_K groups, host_weight_copy.h). A view that cuts a
  // repacked group is read in place from its source.
  Matrix local(const Matrix& w, QuantLayout* layout) const;
  // The model whose weights are bound (one at a time, as the CUDA backend: binding another
  // replaces it, so a pointer of a later model can never land in an earlier model's copy) and
  // its copy (nullptr: read in place).
  const void* bound_key_ = nullptr;
  std::shared_ptr<const HostWeightCopy> bound_copy_;
  std::string bound_why_;  // why the weights are read in place, when they are
  // Runs fn(row) for row < rows; on the pool in fixed blocks when the batch is large enough.
  template <typename Fn>
  void for_rows(int64_t rows, int64_t cost_per_row, const Fn& fn);
  template <typename Fn>
  void for_ranges(int64_t n, const Fn& fn);
  // Runs call(i, pool) for i < n: with at least as many calls as threads, the calls are the
  // parallel tasks (each single-threaded); otherwise one after another, each on the whole pool.
  // Every kernel's result is independent of its pool, so both give the same bits.
  template <typename Fn>
  void for_calls(int64_t n, const Fn& call);

  ThreadPool pool_;
  std::array<ScratchArray, size_t(Buf::kCount)> buffers_;  // page-aligned, huge pages when large
  MoeRoutingHost routing_;  // MoE routing arrays (host: this backend's memory)
};

}  // namespace weft
