// CudaBackend: the Backend interface on one NVIDIA GPU, with the kernels of src/kernels/cuda and
// one stream. What lives where:
//   * weights: a DeviceWeights upload (bind_weights), shared by the process's CUDA backends; ops
//     are handed the model's host addresses and read the copies (DeviceWeights::translate);
//   * scratch activations (buffer), KV pages and GDN state (allocator): device memory;
//   * host arrays the model passes (token ids, positions, output rows, page tables): uploaded
//     per call into small grow-only device arrays, in stream order;
//   * MoE routing: the router logits are copied to the host and routed there with the CPU's
//     code (same experts, same weights), the arrays uploaded; the grouped matmul then launches
//     one matmul per expert that has rows.
// Determinism: every kernel states its reduction order (src/kernels/cuda/*.cuh); none depends on
// the batch, the grid or timing, so the strict tier's invariances hold on the GPU as on the CPU.
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "backend/cuda/device_weights.h"
#include "backend/moe_route_host.h"
#include "cache/kv_cache.h"
#include "core/thread_pool.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/bandwidth.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gdn.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/rows.cuh"

namespace weft {
namespace {

// KV pages and GDN state in device memory. Byte operations go through the legacy default stream,
// which orders them after the backend's (blocking) stream's earlier work.
class CudaPageAllocator final : public PageAllocator {
 public:
  uint8_t* allocate(size_t bytes) override {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();
      throw std::bad_alloc();
    }
    return static_cast<uint8_t*>(p);
  }
  void release(uint8_t* page) override { cudaFree(page); }
  bool host_accessible() const override { return false; }
  void fill_zero(uint8_t* dst, size_t bytes) override {
    if (bytes) WEFT_CUDA_CHECK(cudaMemset(dst, 0, bytes));
  }
  void copy(uint8_t* dst, const uint8_t* src, size_t bytes) override {
    if (bytes && dst != src) WEFT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  }
};

// A grow-only device array.
struct DeviceArray {
  void* ptr = nullptr;
  size_t bytes = 0;
  void* reserve(size_t n) {
    if (n > bytes) {
      if (ptr) WEFT_CUDA_CHECK(cudaFree(ptr));  // synchronizes: no queued kernel still reads it
      ptr = nullptr;
      WEFT_CUDA_CHECK(cudaMalloc(&ptr, n));
      bytes = n;
    }
    return ptr;
  }
  ~DeviceArray() {
    if (ptr) cudaFree(ptr);
  }
};

// Host arrays uploaded per call, one device array per purpose.
enum class Up : int {
  kIds, kPositions, kInvFreq, kRows, kKvPages, kAttnPages, kExpertBegin, kSortedSlot, kSlotPos, kSlotWeight,
  kSlotExpert, kGroups, kCount
};

// WEFT_CUDA_PROFILE=1: every op synchronises the stream after it and adds its wall time (launch +
// GPU time + any host work it does) to a per-op total; the backend prints the table on exit. The
// per-forward column divides by the number of forward calls (one rope_tables per call), so a
// decode-only run reads as the breakdown of one decode step. Off by default: no synchronisation.
struct OpProfile {
  struct Entry {
    int64_t calls = 0;
    double seconds = 0;
  };
  bool on = false;
  std::map<std::string, Entry> ops;
  int64_t forwards = 0;
  void print(const std::string& name) const {
    if (!on || ops.empty()) return;
    std::vector<std::pair<std::string, Entry>> rows(ops.begin(), ops.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    double total = 0;
    for (const auto& r : rows) total += r.second.seconds;
    std::fprintf(stderr, "weft cuda profile (%s; each op synchronised): %lld forward calls, %.3f ms per call\n",
                 name.c_str(), (long long)forwards, forwards ? total * 1e3 / double(forwards) : 0.0);
    std::fprintf(stderr, "| op | calls per forward | ms per forward | share |\n|---|---:|---:|---:|\n");
    for (const auto& [op, e] : rows)
      std::fprintf(stderr, "| %s | %.1f | %.4f | %.1f%% |\n", op.c_str(), forwards ? double(e.calls) / double(forwards) : 0.0,
                   forwards ? e.seconds * 1e3 / double(forwards) : 0.0, 100.0 * e.seconds / total);
  }
};

class CudaBackend;

// Times one op when profiling (see OpProfile).
class OpTimer {
 public:
  OpTimer(OpProfile& p, cudaStream_t stream, const char* op) : p_(p), stream_(stream), op_(op) {
    if (p_.on) t0_ = std::chrono::steady_clock::now();
  }
  ~OpTimer() {
    if (!p_.on) return;
    cudaStreamSynchronize(stream_);
    OpProfile::Entry& e = p_.ops[op_];
    ++e.calls;
    e.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  OpProfile& p_;
  cudaStream_t stream_;
  const char* op_;
  std::chrono::steady_clock::time_point t0_;
};
#define WEFT_OP(name) OpTimer op_timer_(profile_, stream_, name)

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int threads) : pool_(threads) {
    const char* prof = std::getenv("WEFT_CUDA_PROFILE");
    profile_.on = prof && *prof && std::string(prof) != "0";
    WEFT_CUDA_CHECK(cudaSetDevice(0));
    WEFT_CUDA_CHECK(cudaStreamCreate(&stream_));
    cudaDeviceProp prop{};
    WEFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    name_ = std::string("cuda: ") + prop.name + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
  }
  ~CudaBackend() override {
    profile_.print(name_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return name_; }
  int threads() const override { return pool_.size(); }
  ThreadPool& pool() override { return pool_; }
  const char* device() const override { return "cuda"; }

  bool has_weights(const void* key) const override { return key == weights_key_ && weights_; }
  Status bind_weights(const void* key, const WeightSet& set) override {
    auto w = shared_device_weights(key, set);
    if (!w.ok()) return w.status();
    weights_ = w.value();
    weights_key_ = key;
    return Status();
  }

  float* buffer(Buf role, int64_t n) override {
    return static_cast<float*>(buffers_[size_t(role)].reserve(size_t(std::max<int64_t>(n, 1)) * sizeof(float)));
  }
  PageAllocator& allocator() override { return allocator_; }
  std::optional<DeviceBandwidth> device_bandwidth(size_t bytes, int trials) override {
    return cuda::measure_device_bandwidth(bytes, trials, stream_);
  }
  void copy_to_host(float* dst, const float* src, int64_t n) override {
    WEFT_OP("copy_to_host");
    WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    WEFT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // ---- Rows ----
  void embed(const Matrix& table, const int32_t* ids, int64_t n, float* x) override {
    WEFT_OP("embed");
    cuda::embed(table.dtype, w(table.data), table.row_bytes(), table.cols, upload(Up::kIds, ids, n), n, x, stream_);
  }
  void gather_rows(const float* src, const int32_t* rows, int64_t n, int64_t width, float* dst) override {
    WEFT_OP("gather_rows");
    cuda::gather_rows(src, upload(Up::kRows, rows, n), n, width, dst, stream_);
  }
  void rmsnorm(const float* x, const float* wt, float* y, int64_t rows, int64_t n, float eps, bool plus_one) override {
    WEFT_OP("rmsnorm");
    cuda::rmsnorm(x, w(wt), y, rows, n, eps, plus_one, stream_);
  }
  void add(float* x, const float* y, int64_t n) override {
    WEFT_OP("add");
    cuda::add(x, y, n, stream_);
  }
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override {
    WEFT_OP("swiglu");
    cuda::swiglu(gate, up, out, n, stream_);
  }
  void mul_sigmoid(float* x, const float* gate, int64_t n) override {
    WEFT_OP("mul_sigmoid");
    cuda::mul_sigmoid(x, gate, n, stream_);
  }
  void add_sigmoid_scaled(float* y, const float* x, const float* s, int64_t rows, int64_t width) override {
    WEFT_OP("add_sigmoid_scaled");
    cuda::add_sigmoid_scaled(y, x, s, rows, width, stream_);
  }

  // ---- Matrix products ----
  void matmul(const Matrix& m, const float* x, int64_t T, float* y) override {
    // The output head is the one matmul with a vocabulary-sized N: timed apart.
    OpTimer op_timer_(profile_, stream_, m.rows >= 65536 ? "matmul (output head)" : "matmul");
    cuda::matmul(m.dtype, w(m.data), m.row_bytes(), m.rows, m.cols, x, m.cols, T, y, m.rows, stream_);
  }
  void grouped_matmul(const MoeRouting& r, const GroupedMatmul* jobs, int64_t n_jobs) override {
    WEFT_OP("grouped_matmul");
    // The routing is the one moe_route returned last; its host copy says which experts have rows.
    // Every (projection, expert with rows) pair becomes one group of a single launch.
    const std::vector<int32_t>& begin = routing_.expert_begin;
    std::vector<cuda::MatmulGroup>& groups = group_staging_;
    groups.clear();
    int64_t max_n = 0, max_t = 0;
    bool vec = true, one_type = true;
    const DType type = n_jobs > 0 && r.n_experts > 0 ? jobs[0].w[0].dtype : DType::kBF16;
    for (int64_t j = 0; j < n_jobs; ++j)
      for (int64_t e = 0; e < r.n_experts; ++e) {
        const int64_t b = begin[size_t(e)], n = begin[size_t(e) + 1] - b;
        if (n == 0) continue;
        const Matrix& m = jobs[j].w[e];
        cuda::MatmulGroup g;
        g.w = w(m.data);
        g.row_bytes = m.row_bytes();
        g.N = m.rows;
        g.K = m.cols;
        g.x = jobs[j].x + b * jobs[j].ldx;
        g.ldx = jobs[j].ldx;
        g.T = n;
        g.y = jobs[j].y + b * jobs[j].ldy;
        g.ldy = jobs[j].ldy;
        groups.push_back(g);
        max_n = std::max(max_n, g.N);
        max_t = std::max(max_t, n);
        vec = vec && cuda::matmul_vec_ok(g.w, g.row_bytes, g.K, g.x, g.ldx);
        one_type = one_type && m.dtype == type;
      }
    if (!one_type) {  // experts of mixed types: one launch per group
      for (int64_t j = 0, i = 0; j < n_jobs; ++j)
        for (int64_t e = 0; e < r.n_experts; ++e) {
          if (begin[size_t(e) + 1] == begin[size_t(e)]) continue;
          const cuda::MatmulGroup& g = groups[size_t(i++)];
          cuda::matmul(jobs[j].w[e].dtype, g.w, g.row_bytes, g.N, g.K, g.x, g.ldx, g.T, g.y, g.ldy, stream_);
        }
      return;
    }
    const cuda::MatmulGroup* dev = upload(Up::kGroups, groups.data(), int64_t(groups.size()));
    cuda::grouped_matmul(type, dev, int64_t(groups.size()), max_n, max_t, vec, stream_);
  }

  // ---- Attention ----
  void rope_tables(const int64_t* positions, int64_t rows, const float* inv_freq, int64_t half, float* cos,
                   float* sin) override {
    WEFT_OP("rope_tables");
    ++profile_.forwards;
    cuda::rope_tables(upload(Up::kPositions, positions, rows), rows, upload(Up::kInvFreq, inv_freq, half), half, cos,
                      sin, stream_);
  }
  void attention_prep(const AttentionPrepArgs& a) override {
    WEFT_OP("attention_prep");
    AttentionPrepArgs d = a;
    d.q_bias = w(a.q_bias);
    d.k_bias = w(a.k_bias);
    d.v_bias = w(a.v_bias);
    d.q_norm = w(a.q_norm);
    d.k_norm = w(a.k_norm);
    cuda::attention_prep(d, stream_);
  }
  void kv_append(KvCache& cache, int64_t layer, const float* k, const float* v, int64_t T) override {
    WEFT_OP("kv_append");
    const int64_t pos0 = cache.length(layer);
    KvLayerView view = cache.grow(layer, T);
    view.pages = upload(Up::kKvPages, view.pages, view.n_pages);
    cuda::kv_append(view, pos0, k, v, T, stream_);
  }
  void attention(const AttentionCall* calls, int64_t n) override {
    WEFT_OP("attention");
    if (n == 0) return;
    // All calls' page tables in one upload; each call's view then points at its device slice.
    std::vector<const uint8_t*>& pages = page_staging_;
    pages.clear();
    for (int64_t i = 0; i < n; ++i) pages.insert(pages.end(), calls[i].kv.pages, calls[i].kv.pages + calls[i].kv.n_pages);
    const uint8_t* const* dev = upload(Up::kAttnPages, pages.data(), int64_t(pages.size()));
    std::vector<AttentionCall>& dcalls = call_staging_;
    dcalls.assign(calls, calls + n);
    int64_t off = 0;
    for (AttentionCall& c : dcalls) {
      c.kv.pages = dev + off;
      off += c.kv.n_pages;
    }
    const size_t ws = cuda::attention_workspace_bytes(dcalls.data(), n);
    void* workspace = ws ? workspace_.reserve(ws) : nullptr;
    cuda::attention(dcalls.data(), n, workspace, stream_);
  }
  void hadamard_rows(float* x, int64_t rows, int64_t n) override {
    WEFT_OP("hadamard_rows");
    cuda::hadamard_rows(x, rows, n, stream_);
  }

  // ---- Gated DeltaNet ----
  void gdn_unpack(const float* qkvz, const float* ba, int64_t rows, int64_t n_k, int64_t n_v, int64_t dk, int64_t dv,
                  float* mixed, float* z, float* b, float* a) override {
    WEFT_OP("gdn_unpack");
    cuda::gdn_unpack(qkvz, ba, rows, n_k, n_v, dk, dv, mixed, z, b, a, stream_);
  }
  void causal_conv(float* x, int64_t T, int64_t channels, const float* wt, int64_t kernel, float* conv_state) override {
    WEFT_OP("causal_conv");
    cuda::causal_conv(x, T, channels, w(wt), kernel, conv_state, stream_);
  }
  void gdn_prep(const GdnPrepArgs& a) override {
    WEFT_OP("gdn_prep");
    GdnPrepArgs d = a;
    d.a_log = w(a.a_log);
    d.dt_bias = w(a.dt_bias);
    cuda::gdn_prep(d, stream_);
  }
  void gdn_recurrence(const GdnCall* calls, int64_t n) override {
    WEFT_OP("gdn_recurrence");
    // Both forms run the token-by-token recurrence (see gdn.cuh): prefill split invariance holds
    // for any split, and k+1 verify rows equal k+1 steps.
    for (int64_t i = 0; i < n; ++i) cuda::gdn_recurrence(calls[i].args, stream_);
  }
  void rmsnorm_gated(const float* x, const float* z, const float* wt, float* y, int64_t rows, int64_t n,
                     float eps) override {
    WEFT_OP("rmsnorm_gated");
    cuda::rmsnorm_gated(x, z, w(wt), y, rows, n, eps, stream_);
  }

  // ---- Mixture of experts ----
  MoeRouting moe_route(float* logits, int64_t rows, int64_t n_experts, int64_t k, bool renormalize) override {
    WEFT_OP("moe_route");
    router_host_.resize(size_t(rows * n_experts));
    WEFT_CUDA_CHECK(cudaMemcpyAsync(router_host_.data(), logits, size_t(rows * n_experts) * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream_));
    WEFT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    MoeRouting h = route_on_host(router_host_.data(), rows, n_experts, k, renormalize, &routing_, &counters_);
    MoeRouting d = h;
    const int64_t slots = rows * k;
    d.expert_begin = upload(Up::kExpertBegin, h.expert_begin, n_experts + 1);
    d.sorted_slot = upload(Up::kSortedSlot, h.sorted_slot, slots);
    d.slot_pos = upload(Up::kSlotPos, h.slot_pos, slots);
    d.slot_weight = upload(Up::kSlotWeight, h.slot_weight, slots);
    d.slot_expert = upload(Up::kSlotExpert, h.slot_expert, slots);
    return d;
  }
  void moe_gather(const MoeRouting& r, const float* x, int64_t width, float* dst) override {
    WEFT_OP("moe_gather");
    cuda::moe_gather(r.sorted_slot, r.rows * r.k, r.k, x, width, dst, stream_);
  }
  void moe_combine(const MoeRouting& r, const float* out, int64_t width, float* y) override {
    WEFT_OP("moe_combine");
    cuda::moe_combine(r.slot_expert, r.slot_weight, r.slot_pos, r.rows, r.k, out, width, y, stream_);
  }

 private:
  // A weight's device copy (null stays null).
  template <typename T>
  const T* w(const T* host) const {
    if (!host || !weights_) return host;
    return static_cast<const T*>(weights_->translate(host));
  }
  template <typename T>
  T* upload(Up slot, const T* host, int64_t n) {
    if (n <= 0) return nullptr;
    void* dev = uploads_[size_t(slot)].reserve(size_t(n) * sizeof(T));
    WEFT_CUDA_CHECK(cudaMemcpyAsync(dev, host, size_t(n) * sizeof(T), cudaMemcpyHostToDevice, stream_));
    return static_cast<T*>(dev);
  }

  ThreadPool pool_;
  OpProfile profile_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  CudaPageAllocator allocator_;
  std::shared_ptr<DeviceWeights> weights_;
  const void* weights_key_ = nullptr;
  std::array<DeviceArray, size_t(Buf::kCount)> buffers_;
  std::array<DeviceArray, size_t(Up::kCount)> uploads_;
  DeviceArray workspace_;
  MoeRoutingHost routing_;
  std::vector<float> router_host_;
  std::vector<const uint8_t*> page_staging_;
  std::vector<AttentionCall> call_staging_;
  std::vector<cuda::MatmulGroup> group_staging_;
};

}  // namespace

Status cuda_device_status() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status::error(std::string("--device cuda: no usable CUDA GPU (") + cudaGetErrorString(e) + ")");
  }
  if (n == 0) return Status::error("--device cuda: no CUDA GPU is visible");
  return Status();
}

std::unique_ptr<Backend> make_cuda_backend(int threads) { return std::make_unique<CudaBackend>(threads); }

}  // namespace weft
