// CudaBackend: the Backend interface on one NVIDIA GPU, with the kernels of src/kernels/cuda and
// one stream. What lives where:
//   * weights: a DeviceWeights upload (bind_weights), shared by the process's CUDA backends; ops
//     are handed the model's host addresses and read the copies (DeviceWeights::translate);
//   * scratch activations (buffer), KV pages and GDN state (allocator): device memory;
//   * host arrays the model passes (token ids, positions, output rows, page tables): staged in
//     the GraphRecorder's pinned arena and copied to the device before the launches that read
//     them;
//   * MoE routing: on the device (kernels/cuda/moe_route.cuh: the CPU's routing function), so no
//     step waits for the host; the routed experts' matmuls are one launch over the routing's
//     token tiles (blocks of unused tiles return at once);
//   * launches: inside a forward pass of at most kGraphRows rows (decode, verify), deferred and
//     replayed as CUDA graphs by the GraphRecorder (graph_recorder.h); KV append and attention,
//     whose arguments change every step, run between the graphs. WEFT_CUDA_GRAPHS=0 turns graphs
//     off; WEFT_CUDA_PROFILE=1 does too (it times every op eagerly).
// Determinism: every kernel states its reduction order (src/kernels/cuda/*.cuh); none depends on
// the batch, the grid or timing, so the strict tier's invariances hold on the GPU as on the CPU.
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <utility>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/device_weights.h"
#include "backend/cuda/graph_recorder.h"
#include "cache/kv_cache.h"
#include "core/thread_pool.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/bandwidth.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gdn.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/moe_route.cuh"
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

// A grow-only pinned host array: where device-to-host copies land before the caller's buffer.
// A copy into pageable memory (a std::vector of logits) goes through the driver's own staging at
// a cost that depends on how the kernel maps that memory: measured on the H200, 248,320 logits
// cost ~0.6 ms more per step into one pageable vector than into another (Engine::decode vs
// Session::step, docs/results.md section 10). DMA into pinned memory and one host memcpy cost
// the same wherever the caller's buffer lives.
struct PinnedHostArray {
  void* ptr = nullptr;
  size_t bytes = 0;
  void* reserve(size_t n) {
    if (n > bytes) {
      if (ptr) WEFT_CUDA_CHECK(cudaFreeHost(ptr));  // callers synchronize before reading, so no copy is in flight
      ptr = nullptr;
      WEFT_CUDA_CHECK(cudaMallocHost(&ptr, n));
      bytes = n;
    }
    return ptr;
  }
  ~PinnedHostArray() {
    if (ptr) cudaFreeHost(ptr);
  }
};

// Forward passes of at most this many rows are replayed as graphs (decode and verify steps);
// prefill chunks, one-off shapes, run eagerly.
constexpr int64_t kGraphRows = 64;

// The device arrays of the last MoE routing, one per output of cuda::moe_route.
enum class Route : int { kSlotExpert, kSlotWeight, kExpertBegin, kSortedSlot, kSlotPos, kTileExpert, kTileT0, kNTiles, kCount };

// WEFT_CUDA_PROFILE=1: GPU time per op without host synchronisation: each launch (deferred or
// direct) is bracketed by two CUDA events on the stream, read back when the forward pass ends.
// Graphs are off while profiling (segments launch op by op, with the same merges and fusions),
// so a row is the op's kernels plus the gaps between them on the GPU. The per-forward column
// counts only forward passes of at most kGraphRows rows (decode and verify steps; prefill chunks are
// left out), so it reads as the breakdown of one decode step. Off by default.
struct OpProfile {
  struct Entry {
    int64_t calls = 0;
    double seconds = 0;
  };
  struct Pending {
    const char* op;
    cudaEvent_t begin, end;
  };
  bool on = false;
  std::map<std::string, Entry> ops;
  int64_t forwards = 0;
  std::vector<Pending> pending;
  std::vector<cudaEvent_t> free_events;
  cudaEvent_t event() {
    if (free_events.empty()) {
      cudaEvent_t e;
      WEFT_CUDA_CHECK(cudaEventCreate(&e));
      return e;
    }
    cudaEvent_t e = free_events.back();
    free_events.pop_back();
    return e;
  }
  // After the stream has drained: adds the pending intervals to the totals (when `count`).
  void harvest(bool count) {
    for (const Pending& p : pending) {
      float ms = 0;
      WEFT_CUDA_CHECK(cudaEventElapsedTime(&ms, p.begin, p.end));
      if (count) {
        Entry& e = ops[p.op];
        ++e.calls;
        e.seconds += double(ms) * 1e-3;
      }
      free_events.push_back(p.begin);
      free_events.push_back(p.end);
    }
    pending.clear();
  }
  ~OpProfile() {
    for (cudaEvent_t e : free_events) cudaEventDestroy(e);
  }
  void print(const std::string& name) const {
    if (!on || ops.empty()) return;
    std::vector<std::pair<std::string, Entry>> rows(ops.begin(), ops.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    double total = 0;
    int64_t launches = 0;
    for (const auto& r : rows) total += r.second.seconds, launches += r.second.calls;
    std::fprintf(stderr,
                 "weft cuda profile (%s; GPU time per op from CUDA events, graphs off): %lld forward calls, %.3f ms "
                 "and %.1f launches per call\n",
                 name.c_str(), (long long)forwards, forwards ? total * 1e3 / double(forwards) : 0.0,
                 forwards ? double(launches) / double(forwards) : 0.0);
    std::fprintf(stderr, "| op | launches per forward | ms per forward | us per launch | share |\n|---|---:|---:|---:|---:|\n");
    for (const auto& [op, e] : rows)
      std::fprintf(stderr, "| %s | %.1f | %.4f | %.2f | %.1f%% |\n", op.c_str(),
                   forwards ? double(e.calls) / double(forwards) : 0.0,
                   forwards ? e.seconds * 1e3 / double(forwards) : 0.0, e.calls ? e.seconds * 1e6 / double(e.calls) : 0.0,
                   100.0 * e.seconds / total);
  }
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int threads) : pool_(threads) {
    const char* prof = std::getenv("WEFT_CUDA_PROFILE");
    profile_.on = prof && *prof && std::string(prof) != "0";
    const char* graphs = std::getenv("WEFT_CUDA_GRAPHS");
    graphs_on_ = !profile_.on && !(graphs && std::string(graphs) == "0");
    const char* fuse = std::getenv("WEFT_CUDA_FUSE");
    fuse_on_ = !(fuse && std::string(fuse) == "0");
    const char* fuse_down = std::getenv("WEFT_CUDA_FUSE_MOE_DOWN");
    fuse_down_on_ = fuse_on_ && !(fuse_down && std::string(fuse_down) == "0");
    const char* fuse_route = std::getenv("WEFT_CUDA_FUSE_ROUTE");
    fuse_route_on_ = fuse_on_ && fuse_route && std::string(fuse_route) == "1";
    if (const char* e = std::getenv("WEFT_CUDA_DOWN_EARLY"); e && *e) {
      const std::string v(e);
      if (v == "0" || v == "1" || v == "2") down_early_ = v[0] - '0';
      else std::fprintf(stderr, "weft: WEFT_CUDA_DOWN_EARLY=%s ignored (0, 1 or 2)\n", e);
    }
    const char* fuse_norm = std::getenv("WEFT_CUDA_FUSE_NORM");
    fuse_norm_on_ = fuse_on_ && fuse_norm && std::string(fuse_norm) == "1";
    const char* fuse_gate = std::getenv("WEFT_CUDA_FUSE_GATE");
    fuse_gate_on_ = fuse_on_ && !(fuse_gate && std::string(fuse_gate) == "0");
    cuda::set_pdl_enabled(cuda::pdl_enabled_by_env());  // WEFT_CUDA_PDL=0: plain launches
    const char* early = std::getenv("WEFT_CUDA_EARLY_WEIGHTS");  // =0: weights loaded after the PDL wait
    cuda::set_matvec_early(!(early && std::string(early) == "0"));
    WEFT_CUDA_CHECK(cudaSetDevice(0));
    WEFT_CUDA_CHECK(cudaStreamCreate(&stream_));
    recorder_ = std::make_unique<GraphRecorder>(stream_);
    WEFT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&touched_dev_), sizeof(long long)));
    WEFT_CUDA_CHECK(cudaMemset(touched_dev_, 0, sizeof(long long)));
    WEFT_CUDA_CHECK(cudaMemset(route_counter_.reserve(sizeof(unsigned)), 0, sizeof(unsigned)));
    WEFT_CUDA_CHECK(cudaMemset(norm_counter_.reserve(sizeof(unsigned)), 0, sizeof(unsigned)));
    WEFT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&touched_host_), sizeof(long long)));
    cudaDeviceProp prop{};
    WEFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    name_ = std::string("cuda: ") + prop.name + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
  }
  ~CudaBackend() override {
    profile_.print(name_);
    if (std::getenv("WEFT_CUDA_GRAPH_STATS")) {
      const GraphRecorder::Stats& g = recorder_->stats();
      std::fprintf(stderr, "weft cuda graphs: %lld replays, %lld captures, %lld eager segments\n", (long long)g.replays,
                   (long long)g.captures, (long long)g.eager_segments);
    }
    cudaStreamSynchronize(stream_);
    recorder_.reset();
    cudaFree(touched_dev_);
    cudaFreeHost(touched_host_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return name_; }
  int threads() const override { return pool_.size(); }
  ThreadPool& pool() override { return pool_; }
  const char* device() const override { return "cuda"; }

  // Small forward passes are deferred whether or not graphs are on, so the merges and fusions (and
  // so the launches) are the same with WEFT_CUDA_GRAPHS=0; only the capture differs.
  void begin_forward(int64_t rows) override {
    recorder_->begin(rows <= kGraphRows, graphs_on_);
    step_forward_ = rows <= kGraphRows;
  }
  void end_forward() override {
    recorder_->end();
    harvest_profile();
    step_forward_ = false;
    if (touched_stale_) {  // a forward pass without logits: read the routing counter here
      WEFT_CUDA_CHECK(cudaMemcpyAsync(touched_host_, touched_dev_, sizeof(long long), cudaMemcpyDeviceToHost, stream_));
      WEFT_CUDA_CHECK(cudaStreamSynchronize(stream_));
      counters_.moe_experts_touched = *touched_host_;
      touched_stale_ = false;
    }
  }

  bool has_weights(const void* key) const override { return key == weights_key_ && weights_; }
  std::string weights_where() const override {
    if (!weights_) return "";
    return "device memory, " + std::to_string((weights_->bytes() + weights_->resident_bytes()) >> 20) + " MiB";
  }
  Status bind_weights(const void* key, const WeightSet& set) override {
    auto w = shared_device_weights(key, set);
    if (!w.ok()) return w.status();
    recorder_->flush();
    weights_ = w.value();
    weights_key_ = key;
    expert_tables_.clear();
    return Status();
  }

  float* buffer(Buf role, int64_t n) override {
    return grow<float>(buffers_[size_t(role)], std::max<int64_t>(n, 1));
  }
  PageAllocator& allocator() override { return allocator_; }
  std::optional<DeviceBandwidth> device_bandwidth(size_t bytes, int trials) override {
    return cuda::measure_device_bandwidth(bytes, trials, stream_);
  }
  void copy_to_host(float* dst, const float* src, int64_t n) override {
    recorder_->flush();
    // Through the pinned landing buffer, at most kLandingBytes at a time (all-position logits of a
    // long prompt would otherwise pin gigabytes of host memory).
    constexpr size_t kLandingBytes = size_t(32) << 20;
    const size_t bytes = size_t(n) * sizeof(float);
    uint8_t* out = reinterpret_cast<uint8_t*>(dst);
    const uint8_t* in = reinterpret_cast<const uint8_t*>(src);
    void* staged = host_landing_.reserve(std::clamp<size_t>(bytes, 1, kLandingBytes));
    for (size_t at = 0; at == 0 || at < bytes; at += kLandingBytes) {
      const size_t part = std::min(bytes - at, kLandingBytes);
      direct("copy_to_host", [&] {
        WEFT_CUDA_CHECK(cudaMemcpyAsync(staged, in + at, part, cudaMemcpyDeviceToHost, stream_));
      });
      WEFT_CUDA_CHECK(cudaStreamSynchronize(stream_));
      if (part) std::memcpy(out + at, staged, part);
    }
    if (touched_stale_) {
      WEFT_CUDA_CHECK(cudaMemcpyAsync(touched_host_, touched_dev_, sizeof(long long), cudaMemcpyDeviceToHost, stream_));
      WEFT_CUDA_CHECK(cudaStreamSynchronize(stream_));
      counters_.moe_experts_touched = *touched_host_, touched_stale_ = false;
    }
  }

  // ---- Rows ----
  void embed(const Matrix& table, const int32_t* ids, int64_t n, float* x) override {
    const char* const op = "embed";
    const DType dt = table.dtype;
    const void* tw = w(table.data);
    const size_t rb = table.row_bytes();
    const int64_t cols = table.cols;
    const int32_t* dids = stage(ids, n);
    recorder_->sig() << __LINE__ << dt << tw << rb << cols << dids << n << x;
    launch(op, [=, this] { cuda::embed(dt, tw, rb, cols, dids, n, x, stream_); });
  }
  void gather_rows(const float* src, const int32_t* rows, int64_t n, int64_t width, float* dst) override {
    const char* const op = "gather_rows";
    const int32_t* drows = stage(rows, n);
    recorder_->sig() << __LINE__ << src << drows << n << width << dst;
    launch(op, [=, this] { cuda::gather_rows(src, drows, n, width, dst, stream_); });
  }
  void rmsnorm(const float* x, const float* wt, float* y, int64_t rows, int64_t n, float eps, bool plus_one) override {
    const char* const op = "rmsnorm";
    const float* wd = w(wt);
    recorder_->sig() << __LINE__ << x << wd << y << rows << n << eps << plus_one;
    // The norm of the residual stream right after its add: one launch (see ResidualRun).
    if (ResidualRun* r = open_residual(); r && r->a.x == x && !r->a.xn && r->fits(rows, n)) {
      r->a.rows = rows, r->a.n = n, r->a.w = wd, r->a.xn = y, r->a.eps = eps, r->a.plus_one = plus_one;
      return;
    }
    launch(op, [=, this] { cuda::rmsnorm(x, wd, y, rows, n, eps, plus_one, stream_); });
  }
  void add(float* x, const float* y, int64_t n) override {
    const char* const op = "add";
    recorder_->sig() << __LINE__ << x << y << n;
    if (ResidualRun* r = open_residual(); r && !r->a.x && r->a.y == y && r->a.rows * r->a.n == n) {
      r->a.x = x;  // y += σ(s)·shared, then x += y
      return;
    }
    auto run = std::make_shared<ResidualRun>();
    run->a.x = x, run->a.y = const_cast<float*>(y), run->a.rows = 1, run->a.n = n;
    launch(op, [run, this] {
      if (!run->folded) run_residual(*run);
    });
    open_fusable(run);
  }
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override {
    const char* const op = "swiglu";
    recorder_->sig() << __LINE__ << gate << up << out << n;
    // Right after routed down + combine (the shared expert's swiglu): held by that run, which
    // takes the shared down projection too when it comes next (see DownRun).
    if (DownRun* d = open_down(); d && d->combine && !d->sw_held) {
      d->sw_held = true, d->sw_gate = gate, d->sw_up = up, d->sw_out = out, d->sw_n = n;
      return;
    }
    // Folded into the product that reads it when that comes next (see SwigluRun).
    auto run = std::make_shared<SwigluRun>();
    run->gate = gate, run->up = up, run->out = out, run->n = n;
    launch(op, [run, this] {
      if (!run->folded) cuda::swiglu(run->gate, run->up, run->out, run->n, stream_);
    });
    open_fusable(run);
  }
  void mul_sigmoid(float* x, const float* gate, int64_t n) override {
    const char* const op = "mul_sigmoid";
    recorder_->sig() << __LINE__ << x << gate << n;
    // Folded into the one-token product that reads x when that comes next (see GateRun).
    auto run = std::make_shared<GateRun>();
    run->x = x, run->gate = gate, run->n = n;
    launch(op, [run, this] {
      if (!run->folded) cuda::mul_sigmoid(run->x, run->gate, run->n, stream_);
    });
    if (fuse_gate_on_) open_fusable(run);
    else open_fusable(std::shared_ptr<GateRun>());
  }
  void add_sigmoid_scaled(float* y, const float* x, const float* s, int64_t rows, int64_t width) override {
    const char* const op = "add_sigmoid_scaled";
    recorder_->sig() << __LINE__ << y << x << s << rows << width;
    auto run = std::make_shared<ResidualRun>();
    run->a.y = y, run->a.shared = x, run->a.s = s, run->a.rows = rows, run->a.n = width;
    launch(op, [run, this] {
      if (!run->folded) run_residual(*run);
    });
    open_fusable(run);
  }

  // ---- Matrix products ----
  void matmul(const Matrix& m, const float* x, int64_t T, float* y) override {
    // The output head is the one matmul with a vocabulary-sized N: timed apart.
    const char* const op = m.rows >= 65536 ? "matmul (output head)" : "matmul";
    const DType dt = m.dtype;
    const void* wd = w(m.data);
    const size_t rb = m.row_bytes();
    const int64_t N = m.rows, K = m.cols;
    recorder_->sig() << __LINE__ << dt << wd << rb << N << K << x << T << y;
    // A deferred one-token product right after another of the same input row joins its launch
    // (q/k/v, the GDN input projections, gate/up): same per-element order, fewer launches.
    // (Never when y is x: one launch would read x while writing it.)
    const bool one_token = T == 1 && recorder_->deferring() && y != x && cuda::matmul_vec_ok(dt, wd, rb, K, x, K);
    // The shared expert's down projection after routed down + combine + its swiglu: joins them.
    if (DownRun* d = open_down(); one_token && d && d->sw_held && !d->s_w && d->sw_out == x && d->sw_n == K &&
                                  N == d->job.N && dt == d->type && y != d->sw_gate && y != d->sw_up &&
                                  y != d->y && y != d->job.x && y != d->job.up &&
                                  cuda::matmul_vec_ok(dt, wd, rb, K, d->sw_gate, K) &&
                                  cuda::matmul_vec_ok(dt, wd, rb, K, d->sw_up, K) &&
                                  cuda::down_combine_fits(d->k, true, d->job.K, K)) {
      d->s_w = wd, d->s_row_bytes = rb, d->s_K = K, d->s_y = y;
      return;
    }
    // swiglu(g, u) -> this product: the product reads g and u and applies swiglu while loading.
    if (SwigluRun* sw = open_swiglu(); one_token && sw && sw->out == x && sw->n == K && y != sw->up &&
                                       y != sw->gate && cuda::matmul_vec_ok(dt, wd, rb, K, sw->gate, K) &&
                                       cuda::matmul_vec_ok(dt, wd, rb, K, sw->up, K)) {
      sw->folded = true;
      auto run = std::make_shared<MatvecRun>();
      run->x = sw->gate, run->up = sw->up, run->K = K, run->type = dt;
      run->jobs.n = 1, run->jobs.w[0] = wd, run->jobs.row_bytes[0] = rb, run->jobs.N[0] = N, run->jobs.y[0] = y;
      run->jobs.type[0] = dt;
      launch("swiglu+matmul", [run, this] { cuda::matvec_multi(run->type, run->jobs, run->K, run->x, stream_, run->up); });
      open_matvec_.reset();  // its input is not x: nothing joins it
      return;
    }
    // x·σ(gate) -> this product (the attention output gate, then the o projection): the product
    // stages x·σ(gate) in each block instead; x itself is left ungated (forward() reads it nowhere else).
    if (GateRun* g = open_gate(); one_token && g && g->x == x && g->n == K && y != g->gate &&
                                  cuda::matvec_gate_fits(K) && cuda::matmul_vec_ok(dt, wd, rb, K, g->gate, K)) {
      g->folded = true;
      auto run = std::make_shared<MatvecRun>();
      run->x = x, run->gate = g->gate, run->K = K, run->type = dt;
      run->jobs.n = 1, run->jobs.w[0] = wd, run->jobs.row_bytes[0] = rb, run->jobs.N[0] = N, run->jobs.y[0] = y;
      run->jobs.type[0] = dt;
      launch("mul_sigmoid+matmul", [run, this] {
        cuda::matvec_multi(run->type, run->jobs, run->K, run->x, stream_, nullptr, nullptr, run->gate);
      });
      open_matvec_.reset();  // its input is not x: nothing joins it
      return;
    }
    // add (+ add_sigmoid_scaled) + rmsnorm of one row -> the products reading the norm: every block
    // of their launch forms the norm itself and the last block writes x, y and xn (cuda::NormInput);
    // later products of the same input join the launch as usual.
    if (ResidualRun* r = open_residual(); one_token && fuse_norm_on_ && r && r->a.x && r->a.xn == x && r->a.rows == 1 &&
                                          r->a.n == K && cuda::matvec_norm_fits(K) && y != r->a.x && y != r->a.y &&
                                          y != r->a.shared && y != r->a.w) {
      r->folded = true;
      auto run = std::make_shared<MatvecRun>();
      run->x = x, run->K = K, run->type = dt;
      run->norm = cuda::NormInput{r->a, static_cast<unsigned*>(norm_counter_.ptr)};
      run->jobs.n = 1, run->jobs.w[0] = wd, run->jobs.row_bytes[0] = rb, run->jobs.N[0] = N, run->jobs.y[0] = y;
      run->jobs.type[0] = dt;
      launch("residual+rmsnorm+matmul", [run, this] {
        cuda::matvec_multi(run->type, run->jobs, run->K, run->x, stream_, nullptr, nullptr, nullptr, &*run->norm);
      });
      open_matvec_ = run;
      open_matvec_id_ = recorder_->last_op_id();
      return;
    }
    // Products of another weight type join a plain launch too (cuda::MatvecJobs::mixed): a GGUF's
    // router stays bf16 or f32 beside its q8_0 shared expert.
    const auto joinable_type = [&](const MatvecRun& r) {
      return r.type == dt || (!r.up && !r.gate && !r.norm && !r.tail);
    };
    if (one_token && open_matvec_ && open_matvec_id_ == recorder_->last_op_id() && open_matvec_->x == x &&
        open_matvec_->K == K && joinable_type(*open_matvec_) && open_matvec_->jobs.n < cuda::kMaxMatvecJobs &&
        !(open_matvec_->norm && (y == open_matvec_->norm->a.x || y == open_matvec_->norm->a.y ||
                                 y == open_matvec_->norm->a.shared || y == open_matvec_->norm->a.xn))) {
      cuda::MatvecJobs& j = open_matvec_->jobs;
      j.w[j.n] = wd, j.row_bytes[j.n] = rb, j.N[j.n] = N, j.y[j.n] = y, j.type[j.n] = dt;
      if (dt != open_matvec_->type) j.mixed = true;
      ++j.n;
      return;
    }
    if (one_token) {
      auto run = std::make_shared<MatvecRun>();
      run->x = x, run->K = K, run->type = dt;
      run->jobs.n = 1, run->jobs.w[0] = wd, run->jobs.row_bytes[0] = rb, run->jobs.N[0] = N, run->jobs.y[0] = y;
      run->jobs.type[0] = dt;
      launch(op, [run, this] {
        if (run->tail) timing_name_ = "matmul+moe_route";
        cuda::matvec_multi(run->type, run->jobs, run->K, run->x, stream_, nullptr, run->tail ? &*run->tail : nullptr);
      });
      open_matvec_ = run;
      open_matvec_id_ = recorder_->last_op_id();
      return;
    }
    launch(op, [=, this] { cuda::matmul(dt, wd, rb, N, K, x, K, T, y, N, stream_); });
  }
  void grouped_matmul(const MoeRouting& r, const GroupedMatmul* jobs, int64_t n_jobs) override {
    const char* const op = "grouped_matmul";
    // One launch per weight type present (one in every model so far) over the routing's token
    // tiles; the routing itself stays on the device.
    if (n_jobs == 0 || r.n_experts == 0 || r.rows == 0) return;
    const int64_t E = r.n_experts, max_tiles = cuda::moe_max_tiles(r.rows, r.k, E);
    std::vector<DType> types;
    for (int64_t j = 0; j < n_jobs; ++j)
      for (int64_t e = 0; e < E; ++e)
        if (std::find(types.begin(), types.end(), jobs[j].w[e].dtype) == types.end()) types.push_back(jobs[j].w[e].dtype);
    // Folds (one-row routing, i.e. one decode row): a moe_gather right before this launch is not
    // run: every slot's input is the row itself (ldx 0); a swiglu right before is applied while
    // loading (the product reads its gate and up).
    const bool one_row = r.rows == 1;
    GatherRun* ga = one_row && types.size() == 1 ? open_gather() : nullptr;
    SwigluRun* sw = one_row && types.size() == 1 ? open_swiglu() : nullptr;
    for (int64_t j = 0; j < n_jobs; ++j) {
      if (ga && (jobs[j].x != ga->dst || jobs[j].ldx != ga->width)) ga = nullptr;
      if (sw && (jobs[j].x != sw->out || jobs[j].ldx * r.k != sw->n || jobs[j].y == sw->up || jobs[j].y == sw->gate))
        sw = nullptr;
    }
    for (const DType type : types) {
      std::vector<cuda::ExpertMatmulJob>& dj = expert_job_staging_;
      dj.clear();
      bool vec = true;
      int64_t max_n = 0;
      for (int64_t j = 0; j < n_jobs; ++j) {
        const ExpertTable& t = expert_table(jobs[j].w, E, type);
        if (!t.any) continue;
        cuda::ExpertMatmulJob job;
        job.w = static_cast<const void* const*>(t.ptrs.ptr);
        job.row_bytes = t.row_bytes;
        job.N = t.N;
        job.K = t.K;
        job.x = jobs[j].x;
        job.ldx = jobs[j].ldx;
        job.y = jobs[j].y;
        job.ldy = jobs[j].ldy;
        dj.push_back(job);
        max_n = std::max(max_n, t.N);
        vec = vec && t.aligned && reinterpret_cast<uintptr_t>(job.x) % 16 == 0 && job.ldx % 4 == 0;
      }
      // The folds need the one-row vector kernel and 16-byte aligned rows to read instead.
      auto aligned = [](const float* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
      if (!vec || (ga && !aligned(ga->x))) ga = nullptr;
      if (!vec || (sw && !(aligned(sw->gate) && aligned(sw->up)))) sw = nullptr;
      for (cuda::ExpertMatmulJob& job : dj) {
        if (ga) job.x = ga->x, job.ldx = 0;
        if (sw) job.x = sw->gate, job.up = sw->up;
      }
      if (ga) ga->folded = true;
      if (sw) sw->folded = true;
      const cuda::ExpertMatmulJob* djobs = stage(dj.data(), int64_t(dj.size()));
      const int64_t n = int64_t(dj.size());
      const int32_t* begin = r.expert_begin;
      const int32_t* tile_expert = route_ptr<int32_t>(Route::kTileExpert);
      const int32_t* tile_t0 = route_ptr<int32_t>(Route::kTileT0);
      const int32_t* n_tiles = route_ptr<int32_t>(Route::kNTiles);
      const bool swiglu = sw != nullptr;
      int64_t max_k = 0;
      for (const cuda::ExpertMatmulJob& job : dj) max_k = std::max(max_k, job.K);
      const int64_t swiglu_k = swiglu ? max_k : 0;
      recorder_->sig() << __LINE__ << type << djobs << n << max_n << begin << tile_expert << tile_t0 << n_tiles
                       << max_tiles << vec << one_row << swiglu << (ga != nullptr);
      // The routed down projection of one decode row (swiglu folded): moe_combine, the shared
      // expert's swiglu and down projection may join it (DownRun); otherwise as below.
      if (swiglu && n == 1 && types.size() == 1 && fuse_down_on_) {
        auto run = std::make_shared<DownRun>();
        run->type = type, run->job = dj[0], run->begin = begin, run->tile_expert = tile_expert, run->n_tiles = n_tiles;
        // The routing may be read before the PDL wait only when the launch right before this one
        // (the folded swiglu's writer) is an expert launch over the same routing (see
        // cuda::DownCombine::early): its blocks pass their wait on the routing's writer first.
        run->early = open_id_ == routed_id_ + 1 && routed_begin_ == begin ? down_early_ : 0;
        launch(op, [=, this] {
          if (!run->combine) {
            timing_name_ = "swiglu+grouped_matmul";
            cuda::expert_matmul(type, djobs, n, max_n, begin, tile_expert, tile_t0, n_tiles, max_tiles, vec, one_row,
                                swiglu_k, stream_);
            return;
          }
          run_down_combine(*run);
        });
        open_fusable(run);
        continue;
      }
      launch(swiglu ? "swiglu+grouped_matmul" : ga ? "moe_gather+grouped_matmul" : op, [=, this] {
        cuda::expert_matmul(type, djobs, n, max_n, begin, tile_expert, tile_t0, n_tiles, max_tiles, vec, one_row,
                            swiglu_k, stream_);
      });
      if (types.size() == 1) routed_id_ = recorder_->last_op_id(), routed_begin_ = begin;
    }
  }

  // ---- Attention ----
  void rope_tables(const int64_t* positions, int64_t rows, const float* inv_freq, int64_t half, float* cos,
                   float* sin) override {
    const char* const op = "rope_tables";
    const int64_t* dpos = stage(positions, rows);
    const float* dinv = stage(inv_freq, half);
    recorder_->sig() << __LINE__ << dpos << rows << dinv << half << cos << sin;
    launch(op, [=, this] { cuda::rope_tables(dpos, rows, dinv, half, cos, sin, stream_); });
  }
  void attention_prep(const AttentionPrepArgs& a) override {
    const char* const op = "attention_prep";
    AttentionPrepArgs d = a;
    d.q_bias = w(a.q_bias);
    d.k_bias = w(a.k_bias);
    d.v_bias = w(a.v_bias);
    d.q_norm = w(a.q_norm);
    d.k_norm = w(a.k_norm);
    recorder_->sig() << __LINE__ << d.qg << d.k << d.v << d.q << d.gate << d.q_bias << d.k_bias << d.v_bias << d.q_norm
                     << d.k_norm << d.cos << d.sin << d.rows << d.n_heads << d.n_kv << d.head_dim << d.rotary_dim
                     << d.gated << d.norm_plus_one << d.rotate_k << d.rotate_v << d.eps;
    launch(op, [=, this] { cuda::attention_prep(d, stream_); });
  }
  // KV append and attention take the sequence's position and page count as launch arguments,
  // which change every step: they run at once, between the graphs (see GraphRecorder).
  void kv_append(KvCache& cache, int64_t layer, const float* k, const float* v, int64_t T) override {
    recorder_->flush();
    const int64_t pos0 = cache.length(layer);
    KvLayerView view = cache.grow(layer, T);
    view.pages = stage(view.pages, view.n_pages, /*direct=*/true);
    recorder_->flush();
    direct("kv_append", [&] { cuda::kv_append(view, pos0, k, v, T, stream_); });
  }
  void attention(const AttentionCall* calls, int64_t n) override {
    if (n == 0) return;
    recorder_->flush();
    // All calls' page tables in one staged array; each call's view then points at its slice.
    std::vector<const uint8_t*>& pages = page_staging_;
    pages.clear();
    for (int64_t i = 0; i < n; ++i) pages.insert(pages.end(), calls[i].kv.pages, calls[i].kv.pages + calls[i].kv.n_pages);
    const uint8_t* const* dev = stage(pages.data(), int64_t(pages.size()), /*direct=*/true);
    std::vector<AttentionCall>& dcalls = call_staging_;
    dcalls.assign(calls, calls + n);
    int64_t off = 0;
    for (AttentionCall& c : dcalls) {
      c.kv.pages = dev + off;
      off += c.kv.n_pages;
    }
    const size_t ws = cuda::attention_workspace_bytes(dcalls.data(), n);
    void* workspace = ws ? workspace_.reserve(ws) : nullptr;
    recorder_->flush();
    direct("attention", [&] { cuda::attention(dcalls.data(), n, workspace, stream_); });
  }
  void hadamard_rows(float* x, int64_t rows, int64_t n) override {
    const char* const op = "hadamard_rows";
    recorder_->sig() << __LINE__ << x << rows << n;
    launch(op, [=, this] { cuda::hadamard_rows(x, rows, n, stream_); });
  }

  // ---- Gated DeltaNet ----
  void gdn_unpack(const float* qkvz, const float* ba, int64_t rows, int64_t n_k, int64_t n_v, int64_t dk, int64_t dv,
                  float* mixed, float* z, float* b, float* a) override {
    const char* const op = "gdn_unpack";
    recorder_->sig() << __LINE__ << qkvz << ba << rows << n_k << n_v << dk << dv << mixed << z << b << a;
    launch(op, [=, this] { cuda::gdn_unpack(qkvz, ba, rows, n_k, n_v, dk, dv, mixed, z, b, a, stream_); });
  }
  void causal_conv(float* x, int64_t T, int64_t channels, const float* wt, int64_t kernel, float* conv_state) override {
    const char* const op = "causal_conv";
    const float* wd = w(wt);
    recorder_->sig() << __LINE__ << x << T << channels << wd << kernel << conv_state;
    // gdn_prep of the same rows right after joins this launch (cuda::causal_conv_prep).
    auto run = std::make_shared<ConvRun>();
    run->x = x, run->T = T, run->channels = channels, run->w = wd, run->kernel = kernel, run->state = conv_state;
    launch(op, [run, this] {
      if (run->prep) {
        timing_name_ = "causal_conv+gdn_prep";
        cuda::causal_conv_prep(run->w, run->kernel, run->state, *run->prep, stream_);
      } else {
        cuda::causal_conv(run->x, run->T, run->channels, run->w, run->kernel, run->state, stream_);
      }
    });
    open_fusable(run);
  }
  void gdn_prep(const GdnPrepArgs& a) override {
    const char* const op = "gdn_prep";
    GdnPrepArgs d = a;
    d.a_log = w(a.a_log);
    d.dt_bias = w(a.dt_bias);
    recorder_->sig() << __LINE__ << d.mixed << d.beta << d.g << d.a_log << d.dt_bias << d.rows << d.conv_dim << d.n_k
                     << d.n_v << d.dk;
    if (ConvRun* c = open_conv(); c && c->x == d.mixed && c->T == d.rows && c->channels == d.conv_dim &&
                                  cuda::conv_prep_fusable(d, c->kernel)) {
      c->prep = d;
      return;
    }
    launch(op, [=, this] { cuda::gdn_prep(d, stream_); });
  }
  void gdn_recurrence(const GdnCall* calls, int64_t n) override {
    const char* const op = "gdn_recurrence";
    // Both forms run the token-by-token recurrence (see gdn.cuh): prefill split invariance holds
    // for any split, and k+1 verify rows equal k+1 steps.
    std::vector<GdnRecurrentArgs> args;
    args.reserve(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      const GdnRecurrentArgs& g = calls[i].args;
      recorder_->sig() << __LINE__ << g.state << g.q << g.k << g.v << g.q_stride << g.v_stride << g.g << g.beta << g.out
                       << g.T << g.n_k << g.n_v << g.dk << g.dv;
      args.push_back(g);
    }
    // rmsnorm_gated of a single sequence's rows right after joins this launch (see GdnRun).
    auto run = std::make_shared<GdnRun>();
    run->args = std::move(args);
    launch(op, [run, this] {
      if (run->norm) {
        timing_name_ = "gdn_recurrence+rmsnorm_gated";
        cuda::gdn_recurrence_norm(run->args[0], *run->norm, stream_);
        return;
      }
      for (const GdnRecurrentArgs& g : run->args) cuda::gdn_recurrence(g, stream_);
    });
    open_fusable(run);
  }
  void rmsnorm_gated(const float* x, const float* z, const float* wt, float* y, int64_t rows, int64_t n,
                     float eps) override {
    const char* const op = "rmsnorm_gated";
    const float* wd = w(wt);
    recorder_->sig() << __LINE__ << x << z << wd << y << rows << n << eps;
    if (GdnRun* g = open_gdn(); g && g->args.size() == 1 && !g->norm && x == y && x == g->args[0].out &&
                                rows == g->args[0].T * g->args[0].n_v && n == g->args[0].dv &&
                                cuda::gdn_recurrence_norm_fusable(g->args[0])) {
      g->norm = cuda::GatedNormArgs{z, wd, eps};
      return;
    }
    launch(op, [=, this] { cuda::rmsnorm_gated(x, z, wd, y, rows, n, eps, stream_); });
  }

  // ---- Mixture of experts ----
  MoeRouting moe_route(float* logits, int64_t rows, int64_t n_experts, int64_t k, bool renormalize) override {
    const char* const op = "moe_route";
    const int64_t slots = rows * k, tiles = cuda::moe_max_tiles(rows, k, n_experts);
    cuda::MoeRouteOut o;
    o.slot_expert = grow<int32_t>(route_[size_t(Route::kSlotExpert)], slots);
    o.slot_weight = grow<float>(route_[size_t(Route::kSlotWeight)], slots);
    o.expert_begin = grow<int32_t>(route_[size_t(Route::kExpertBegin)], n_experts + 1);
    o.sorted_slot = grow<int32_t>(route_[size_t(Route::kSortedSlot)], slots);
    o.slot_pos = grow<int32_t>(route_[size_t(Route::kSlotPos)], slots);
    o.tile_expert = grow<int32_t>(route_[size_t(Route::kTileExpert)], tiles);
    o.tile_t0 = grow<int32_t>(route_[size_t(Route::kTileT0)], tiles);
    o.n_tiles = grow<int32_t>(route_[size_t(Route::kNTiles)], 1);
    o.experts_touched = touched_dev_;
    ++counters_.moe_route_calls;
    touched_stale_ = true;
    recorder_->sig() << __LINE__ << logits << rows << n_experts << k << renormalize << o.slot_expert << o.slot_weight
                     << o.expert_begin << o.sorted_slot << o.slot_pos << o.tile_expert << o.tile_t0 << o.n_tiles
                     << o.experts_touched;
    // WEFT_CUDA_FUSE_ROUTE=1: one decode row right after the router's product (and whatever shares
    // its launch) is routed by that launch's last block (cuda::RouteTail), no launch of its own.
    bool routed = false;
    if (MatvecRun* m = open_matvec(); m && rows == 1 && fuse_route_on_ && !m->up && !m->tail && !m->norm &&
                                      !m->jobs.mixed && cuda::route_tail_fits(n_experts, k)) {
      for (int j = 0; j < m->jobs.n; ++j)
        if (m->jobs.y[j] == logits && m->jobs.N[j] == n_experts) routed = true;
      if (routed) {
        cuda::RouteTail t;
        t.logits = logits, t.E = int(n_experts), t.K = int(k), t.renormalize = renormalize, t.out = o;
        t.counter = static_cast<unsigned*>(route_counter_.ptr);
        m->tail = t;
      }
    }
    if (!routed) launch(op, [=, this] { cuda::moe_route(logits, rows, n_experts, k, renormalize, o, stream_); });
    MoeRouting d;
    d.rows = rows;
    d.k = k;
    d.n_experts = n_experts;
    d.expert_begin = o.expert_begin;
    d.sorted_slot = o.sorted_slot;
    d.slot_pos = o.slot_pos;
    d.slot_weight = o.slot_weight;
    d.slot_expert = o.slot_expert;
    return d;
  }
  void moe_gather(const MoeRouting& r, const float* x, int64_t width, float* dst) override {
    const char* const op = "moe_gather";
    const int32_t* sorted = r.sorted_slot;
    const int64_t slots = r.rows * r.k, k = r.k;
    recorder_->sig() << __LINE__ << sorted << slots << k << x << width << dst;
    // Folded into the expert products when they come next (grouped_matmul).
    auto run = std::make_shared<GatherRun>();
    run->x = x, run->dst = dst, run->width = width;
    launch(op, [=, this] {
      if (!run->folded) cuda::moe_gather(sorted, slots, k, x, width, dst, stream_);
    });
    open_fusable(run);
  }
  void moe_combine(const MoeRouting& r, const float* out, int64_t width, float* y) override {
    const char* const op = "moe_combine";
    const int32_t* expert = r.slot_expert;
    const float* weight = r.slot_weight;
    const int32_t* pos = r.slot_pos;
    const int64_t rows = r.rows, k = r.k;
    recorder_->sig() << __LINE__ << expert << weight << pos << rows << k << out << width << y;
    // Right after the routed down projection of the same one-row routing: computed by that launch.
    if (DownRun* d = open_down(); d && !d->combine && rows == 1 && r.expert_begin == d->begin && out == d->job.y &&
                                  width == d->job.N && d->job.ldy == width && d->job.ldx == d->job.K &&
                                  y != d->job.x && y != d->job.up && cuda::down_combine_fits(int(k), false, d->job.K, 0)) {
      d->combine = true, d->k = int(k), d->slot_weight = weight, d->sorted_slot = r.sorted_slot, d->y = y;
      return;
    }
    launch(op, [=, this] { cuda::moe_combine(expert, weight, pos, rows, k, out, width, y, stream_); });
  }

 private:
  // The device weight pointers of one expert projection ([E] Matrix views), restricted to one
  // weight type (others null), built once per model.
  struct ExpertTable {
    DeviceArray ptrs;
    bool any = false, aligned = true;
    size_t row_bytes = 0;
    int64_t N = 0, K = 0;
  };
  const ExpertTable& expert_table(const Matrix* experts, int64_t E, DType type) {
    ExpertTable& t = expert_tables_[{experts, int(type)}];
    if (t.ptrs.ptr) return t;
    std::vector<const void*> ptrs(size_t(E), nullptr);
    for (int64_t e = 0; e < E; ++e) {
      const Matrix& m = experts[e];
      if (m.dtype != type) continue;
      if (t.any && (m.rows != t.N || m.cols != t.K || m.row_bytes() != t.row_bytes))
        throw std::runtime_error("grouped_matmul: the experts of one projection differ in shape");
      ptrs[size_t(e)] = w(m.data);
      t.any = true;
      t.N = m.rows, t.K = m.cols, t.row_bytes = m.row_bytes();
      t.aligned = t.aligned && cuda::matmul_vec_ok(type, ptrs[size_t(e)], t.row_bytes, t.K, nullptr, 4);
    }
    t.ptrs.reserve(size_t(E) * sizeof(void*));
    WEFT_CUDA_CHECK(cudaMemcpy(t.ptrs.ptr, ptrs.data(), size_t(E) * sizeof(void*), cudaMemcpyHostToDevice));
    return t;
  }

  // A weight's device copy (null stays null).
  template <typename T>
  const T* w(const T* host) const {
    if (!host || !weights_) return host;
    return static_cast<const T*>(weights_->translate(host));
  }
  // Host array -> device copy staged for the next launch.
  template <typename T>
  T* stage(const T* host, int64_t n, bool direct = false) {
    if (n <= 0) return nullptr;
    return static_cast<T*>(recorder_->stage(host, size_t(n) * sizeof(T), direct));
  }
  // A grow-only array with room for n T; deferred launches that read the old one go first.
  template <typename T>
  T* grow(DeviceArray& a, int64_t n) {
    const size_t bytes = size_t(std::max<int64_t>(n, 1)) * sizeof(T);
    if (bytes > a.bytes) recorder_->flush();
    return static_cast<T*>(a.reserve(bytes));
  }
  template <typename T>
  T* route_ptr(Route r) const {
    return static_cast<T*>(route_[size_t(r)].ptr);
  }
  // Defers (or runs) one op's launches; when profiling, brackets them with events named `op`, or
  // by the name a fused launch sets in timing_name_.
  void launch(const char* op, std::function<void()> f) { recorder_->op(timed(op, std::move(f))); }
  std::function<void()> timed(const char* op, std::function<void()> f) {
    if (!profile_.on) return f;
    return [this, op, f = std::move(f)] {
      cudaEvent_t b = profile_.event(), e = profile_.event();
      WEFT_CUDA_CHECK(cudaEventRecord(b, stream_));
      timing_name_ = op;
      f();
      WEFT_CUDA_CHECK(cudaEventRecord(e, stream_));
      profile_.pending.push_back({timing_name_, b, e});
    };
  }
  // Runs an op that is not deferred (timed when profiling).
  void direct(const char* op, const std::function<void()>& f) { timed(op, f)(); }
  // Reads the profile's events once the stream has drained.
  // Only decode / verify forward passes count: the table is the breakdown of one step.
  void harvest_profile() {
    if (!profile_.on) return;
    WEFT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (step_forward_) ++profile_.forwards;
    profile_.harvest(step_forward_);
  }

  // Fusions. A deferred launch that a following op may fold into stays "open" until any other op
  // is deferred or the segment is flushed (recorder_->last_op_id() changes); the following op
  // then edits the open run's arguments instead of launching. The decision depends only on the
  // op sequence and its arguments, which the signature holds, so a graph replays the same fused
  // launches; and each fused kernel computes exactly the separate kernels' arithmetic (shared
  // device helpers, the same reduction orders), so fused and unfused launches give the same bits
  // (WEFT_CUDA_FUSE=0 runs unfused; tests/backend_cuda_test.cu compares). A folded swiglu,
  // moe_gather or mul_sigmoid does not write its output buffer: the product that follows reads its
  // inputs instead, and forward() reads those buffers nowhere else.
  //   add_sigmoid_scaled (shared expert) -> add (residual) -> rmsnorm (next layer's norm): one
  //   ResidualRun, one cuda::residual_rmsnorm launch;
  //   swiglu -> one-token matmul or one-row grouped_matmul reading its output;
  //   mul_sigmoid (attention output gate) -> one-token matmul reading its x (the o projection);
  //   moe_gather -> one-row grouped_matmul reading its output;
  //   causal_conv -> gdn_prep of the same rows (one sequence): cuda::causal_conv_prep;
  //   gdn_recurrence (one sequence) -> rmsnorm_gated of its output: cuda::gdn_recurrence_norm.
  struct ResidualRun {
    cuda::ResidualArgs a;
    bool folded = false;  // computed by the product launch that reads its norm (cuda::NormInput)
    // rmsnorm(x, rows, n) can join: the same rows as the shared-expert add, or the add's n floats.
    bool fits(int64_t rows, int64_t n) const { return a.shared ? rows == a.rows && n == a.n : rows * n == a.rows * a.n; }
  };
  struct SwigluRun {
    const float *gate = nullptr, *up = nullptr;
    float* out = nullptr;
    int64_t n = 0;
    bool folded = false;
  };
  struct GateRun {  // mul_sigmoid: x *= σ(gate)
    float* x = nullptr;
    const float* gate = nullptr;
    int64_t n = 0;
    bool folded = false;
  };
  struct ConvRun {
    float* x = nullptr;
    int64_t T = 0, channels = 0, kernel = 0;
    const float* w = nullptr;
    float* state = nullptr;
    std::optional<GdnPrepArgs> prep;
  };
  struct GdnRun {
    std::vector<GdnRecurrentArgs> args;
    std::optional<cuda::GatedNormArgs> norm;
  };
  struct GatherRun {
    const float* x = nullptr;
    float* dst = nullptr;
    int64_t width = 0;
    bool folded = false;
  };
  // The routed experts' down projection of one decode row (swiglu folded), with what joined it:
  // moe_combine (combine: the launch writes the combined row y instead of the experts' rows), then
  // the shared expert's swiglu (held: run after the launch unless the next op takes it), then the
  // shared expert's down projection reading it (s_w: computed in the same launch, cuda::down_combine).
  struct DownRun {
    DType type = DType::kF32;
    cuda::ExpertMatmulJob job;
    const int32_t *begin = nullptr, *tile_expert = nullptr, *n_tiles = nullptr;
    bool combine = false;
    int k = 0;
    const float* slot_weight = nullptr;
    const int32_t* sorted_slot = nullptr;
    float* y = nullptr;
    bool sw_held = false;
    const float *sw_gate = nullptr, *sw_up = nullptr;
    float* sw_out = nullptr;
    int64_t sw_n = 0;
    const void* s_w = nullptr;
    size_t s_row_bytes = 0;
    int64_t s_K = 0;
    float* s_y = nullptr;
    int early = 0;  // cuda::DownCombine::early
  };
  void run_down_combine(const DownRun& d) {
    cuda::DownCombine a;
    a.w = d.job.w, a.row_bytes = d.job.row_bytes, a.N = d.job.N, a.K = d.job.K, a.gate = d.job.x, a.up = d.job.up;
    a.k = d.k, a.expert_begin = d.begin, a.tile_expert = d.tile_expert, a.n_tiles = d.n_tiles;
    a.sorted_slot = d.sorted_slot, a.slot_weight = d.slot_weight, a.y = d.y;
    if (d.s_w) {
      a.sw = d.s_w, a.s_row_bytes = d.s_row_bytes, a.s_K = d.s_K, a.s_gate = d.sw_gate, a.s_up = d.sw_up, a.s_y = d.s_y;
      timing_name_ = "swiglu+grouped_matmul+moe_combine+swiglu+matmul";
    } else {
      timing_name_ = "swiglu+grouped_matmul+moe_combine";
    }
    a.early = d.early;
    cuda::down_combine(d.type, a, stream_);
    if (d.sw_held && !d.s_w) cuda::swiglu(d.sw_gate, d.sw_up, d.sw_out, d.sw_n, stream_);
  }
  std::shared_ptr<DownRun> open_down_;
  std::shared_ptr<ResidualRun> open_residual_;
  std::shared_ptr<SwigluRun> open_swiglu_;
  std::shared_ptr<GateRun> open_gate_;
  std::shared_ptr<GatherRun> open_gather_;
  std::shared_ptr<ConvRun> open_conv_;
  std::shared_ptr<GdnRun> open_gdn_;
  uint64_t open_id_ = 0;
  template <typename Run>
  void open_fusable(const std::shared_ptr<Run>& run) {
    open_residual_.reset(), open_swiglu_.reset(), open_gather_.reset(), open_conv_.reset(), open_gdn_.reset();
    open_down_.reset(), open_gate_.reset();
    if constexpr (std::is_same_v<Run, ResidualRun>) open_residual_ = run;
    else if constexpr (std::is_same_v<Run, SwigluRun>) open_swiglu_ = run;
    else if constexpr (std::is_same_v<Run, GateRun>) open_gate_ = run;
    else if constexpr (std::is_same_v<Run, ConvRun>) open_conv_ = run;
    else if constexpr (std::is_same_v<Run, GdnRun>) open_gdn_ = run;
    else if constexpr (std::is_same_v<Run, DownRun>) open_down_ = run;
    else open_gather_ = run;
    open_id_ = recorder_->last_op_id();
  }
  template <typename Run>
  Run* open_run(const std::shared_ptr<Run>& run) const {
    return fuse_on_ && recorder_->deferring() && run && open_id_ == recorder_->last_op_id() ? run.get() : nullptr;
  }
  ResidualRun* open_residual() const { return open_run(open_residual_); }
  SwigluRun* open_swiglu() const { return open_run(open_swiglu_); }
  GateRun* open_gate() const { return open_run(open_gate_); }
  GatherRun* open_gather() const { return open_run(open_gather_); }
  ConvRun* open_conv() const { return open_run(open_conv_); }
  GdnRun* open_gdn() const { return open_run(open_gdn_); }
  DownRun* open_down() const { return open_run(open_down_); }
  void run_residual(const ResidualRun& r) {
    const cuda::ResidualArgs& a = r.a;
    if (!a.x) return cuda::add_sigmoid_scaled(a.y, a.shared, a.s, a.rows, a.n, stream_);
    if (!a.shared && !a.xn) return cuda::add(a.x, a.y, a.rows * a.n, stream_);
    timing_name_ = a.shared ? (a.xn ? "add_sigmoid_scaled+add+rmsnorm" : "add_sigmoid_scaled+add") : "add+rmsnorm";
    cuda::residual_rmsnorm(a, stream_);
  }

  // The one-token products of the input row x that share the launch being deferred.
  struct MatvecRun {
    const float* x = nullptr;
    const float* up = nullptr;  // set: the input is swiglu(x, up)
    const float* gate = nullptr;  // set: the input is x·σ(gate)
    std::optional<cuda::NormInput> norm;  // set: x is the norm this launch forms (cuda::NormInput)
    int64_t K = 0;
    DType type = DType::kF32;
    cuda::MatvecJobs jobs;
    std::optional<cuda::RouteTail> tail;  // a one-row routing of one of the outputs, run by the last block
  };
  std::shared_ptr<MatvecRun> open_matvec_;
  uint64_t open_matvec_id_ = 0;
  // The deferred one-token launch the next op may still join (q/k/v, ...; a routing tail).
  MatvecRun* open_matvec() const {
    return fuse_on_ && recorder_->deferring() && open_matvec_ && open_matvec_id_ == recorder_->last_op_id()
               ? open_matvec_.get()
               : nullptr;
  }

  ThreadPool pool_;
  OpProfile profile_;
  const char* timing_name_ = nullptr;
  bool step_forward_ = false;  // inside a forward pass of at most kGraphRows rows
  bool graphs_on_ = true;
  bool fuse_on_ = true;  // WEFT_CUDA_FUSE=0: no fused launches (the before of docs/results.md §10)
  bool fuse_down_on_ = true;  // WEFT_CUDA_FUSE_MOE_DOWN=0: no DownRun (combine, shared down apart)
  bool fuse_gate_on_ = true;  // WEFT_CUDA_FUSE_GATE=0: mul_sigmoid in its own launch (no GateRun)
  // WEFT_CUDA_FUSE_NORM=1: the residual add + norm formed by the products that read the norm
  // (cuda::NormInput) instead of its own launch. Off by default: measured slower (218.5 vs 231.9
  // tok/s at depth 4096 on the 40-layer geometry, docs/results.md §10): every block of the product
  // forms the norm before its first weight load, on the critical path, while the norm's own launch
  // is already overlapped by PDL.
  bool fuse_norm_on_ = false;
  DeviceArray norm_counter_;  // cuda::NormInput's block count (zero between launches)
  // WEFT_CUDA_FUSE_ROUTE=1: a one-row routing runs in the router launch's last block (RouteTail).
  // Off by default: measured slower than its own launch (231.5 vs 227.8 tok/s, docs/results.md §10).
  bool fuse_route_on_ = false;
  // WEFT_CUDA_DOWN_EARLY=0|1|2: what down_combine reads before its PDL wait (cuda::DownCombine::
  // early). Same bits in every setting (tested on every fixture), but 1 and 2 read data before
  // the wait that the rule otherwise forbids, relying on the launch before having waited; their
  // gain was not measured on its own (round 4: within the spread), so the default is 0 until it is.
  int down_early_ = 0;
  uint64_t routed_id_ = 0;  // op id of the last one-type expert launch, and its routing
  const int32_t* routed_begin_ = nullptr;
  DeviceArray route_counter_;  // cuda::RouteTail's block count (zero between launches)
  std::string name_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<GraphRecorder> recorder_;
  CudaPageAllocator allocator_;
  std::shared_ptr<DeviceWeights> weights_;
  const void* weights_key_ = nullptr;
  std::array<DeviceArray, size_t(Buf::kCount)> buffers_;
  std::array<DeviceArray, size_t(Route::kCount)> route_;
  std::map<std::pair<const Matrix*, int>, ExpertTable> expert_tables_;
  long long* touched_dev_ = nullptr;   // experts given rows, summed over every routing
  long long* touched_host_ = nullptr;  // pinned
  bool touched_stale_ = false;         // routings ran since counters_ was last refreshed
  DeviceArray workspace_;
  PinnedHostArray host_landing_;  // copy_to_host's landing buffer (PinnedHostArray)
  std::vector<const uint8_t*> page_staging_;
  std::vector<AttentionCall> call_staging_;
  std::vector<cuda::ExpertMatmulJob> expert_job_staging_;
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
