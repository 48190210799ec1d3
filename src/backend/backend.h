// Backend: the seam between the model and the machine.
//
// The model (src/model/forward.cpp) owns the *order* of operations — which op runs on which
// buffer, layer after layer — and the architecture properties fixed at weight binding. A backend
// owns everything that depends on the machine:
//   * memory: the scratch arena the forward pass works in (`buffer`), the pages of every KV
//     cache (`allocator`), and (for a device backend) the copies of the weights it computes on;
//   * execution: its thread pool (CPU) or stream and graphs (CUDA);
//   * kernels: one virtual method per op family below, each with one signature for every
//     backend (the CPU backend forwards to src/kernels/cpu, a CUDA backend to src/kernels/cuda).
//
//     cli ─> engine ─> model (forward.cpp: the op order) ─> Backend (interface)
//                        │                                  ├─ CpuBackend  -> kernels/cpu
//                        └─> cache (KV page tables) ────────┘  CudaBackend -> kernels/cuda (next)
//
// Pointer rules: every `float*` / `const float*` activation argument is backend memory (from
// `buffer`); arguments documented as "host" are plain host arrays (token ids, positions) that a
// device backend uploads itself. Weights arrive as `Matrix` views whose data pointers the backend
// can read (CPU: the memory-mapped file; a device backend: its uploaded copy).
//
// Determinism: each op states which reductions it performs; an implementation must give every
// output element one fixed summation order that depends neither on the thread count nor on the
// other rows in the batch. That is what makes the strict tier batch- and thread-invariant.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/memory.h"
#include "kernels/attention_args.h"
#include "kernels/gdn_args.h"
#include "kernels/kv_view.h"
#include "core/matrix.h"
#include "core/status.h"

namespace weft {

class KvCache;
class ThreadPool;

// Every weight of a model as the backend sees it: the matrices (views of the files, in their
// stored type) and the small f32 vectors (norm weights, A_log, dt_bias, conv1d, biases), all in
// host memory. A device backend uploads them once (bind_weights) and from then on reads its
// copies wherever an op is handed one of these host addresses.
struct WeightSet {
  std::vector<Matrix> matrices;
  std::vector<std::span<const float>> vectors;
};

// Scratch buffers of the forward pass, by role. A role's buffer grows on demand and is reused
// across calls, so a warm forward pass allocates nothing.
enum class Buf : int {
  kX, kXn, kY,                       // residual stream, normed input, block output   [R, H]
  kA, kB, kC, kD, kE,                // projections (sized by the layer that uses them)
  kRopeCos, kRopeSin,                // [R, rotary_dim / 2]
  kRouter, kMoeIn, kMoeG, kMoeU, kMoeOut, kMoeGate,  // MoE work
  kSharedG, kSharedU,                // the shared expert's gate / up [R, shared intermediate]
  kLogitsIn, kLogits,                // rows of the output head
  kCount
};

// The routing of one MoE layer over a batch of R rows: top-k per row, then the R·K (row, expert)
// slots grouped by expert. Arrays live in backend memory (host for the CPU backend).
struct MoeRouting {
  int64_t rows = 0, k = 0, n_experts = 0;
  const int32_t* expert_begin = nullptr;  // [n_experts + 1]: sorted slots of expert e are [begin[e], begin[e+1])
  const int32_t* sorted_slot = nullptr;   // [R·K]: slot id (row·K + j) at each sorted position
  const int32_t* slot_pos = nullptr;      // [R·K]: sorted position of each slot (inverse of sorted_slot)
  const float* slot_weight = nullptr;     // [R·K]: routing weight of each slot
  const int32_t* slot_expert = nullptr;   // [R·K]: expert id of each slot
};

// One projection of a grouped matmul: sorted row i of x (ldx floats apart) belongs to the expert
// whose [begin[e], begin[e+1]) range holds i and is multiplied by w[e]: y[i] = x[i] · w[e]ᵀ.
struct GroupedMatmul {
  const Matrix* w = nullptr;  // [n_experts]
  const float* x = nullptr;
  int64_t ldx = 0;
  float* y = nullptr;
  int64_t ldy = 0;
};

// Per-row preparation of attention inputs (Qwen3_5Attention / LlamaAttention before the kernel):
// biases, the [query | gate] split of q_proj, q/k RMSNorm, RoPE with per-row cos/sin, and the
// optional Hadamard rotation of the quantized KV tier.
struct AttentionPrepArgs {
  const float* qg = nullptr;  // [R, q_rows] q_proj output
  float* k = nullptr;         // [R, n_kv·hd] in/out
  float* v = nullptr;         // [R, n_kv·hd] in/out
  float* q = nullptr;         // [R, n_heads·hd] out
  float* gate = nullptr;      // [R, n_heads·hd] out (when gated)
  const float* q_bias = nullptr;  // null unless attention_bias
  const float* k_bias = nullptr;
  const float* v_bias = nullptr;
  const float* q_norm = nullptr;  // null unless qk_norm
  const float* k_norm = nullptr;
  const float* cos = nullptr;  // [R, rotary_dim / 2]
  const float* sin = nullptr;
  int64_t rows = 0, n_heads = 0, n_kv = 0, head_dim = 0, rotary_dim = 0;
  bool gated = false, norm_plus_one = false, rotate_k = false, rotate_v = false;
  float eps = 1e-6f;
};

// Per-row preparation of GDN inputs after the conv: l2-normalised and scaled q, l2-normalised k,
// β = sigmoid(b), g = −exp(A_log)·softplus(a + dt_bias).
struct GdnPrepArgs {
  float* mixed = nullptr;  // [R, conv_dim] = [q | k | v] per row, in place
  float* beta = nullptr;   // [R, n_v] in: b, out: β
  float* g = nullptr;      // [R, n_v] in: a, out: log decay
  const float* a_log = nullptr, *dt_bias = nullptr;  // [n_v]
  int64_t rows = 0, conv_dim = 0, n_k = 0, n_v = 0, dk = 0;
};

// What a backend counts while it works, for the lab's byte models (read-only to the model).
struct BackendCounters {
  int64_t moe_experts_touched = 0;  // Σ over moe_route calls of the experts given at least one row
  int64_t moe_route_calls = 0;
};

// One sequence's attention over its cache layer, and one sequence's GDN recurrence: a layer of a
// batch issues all its sequences' calls at once, so a backend can spread them over its threads
// (or streams) together instead of one sequence after another.
struct AttentionCall {
  KvLayerView kv;
  AttentionArgs args;
};
struct GdnCall {
  GdnRecurrentArgs args;
  // The prefill form (chunks of 64 rows from args' first row; result independent of splits at
  // multiples of 64); otherwise row by row, the decode form (k+1 rows give exactly the bits of
  // k+1 single steps).
  bool chunked = false;
};

// Memory bandwidth of a backend's own memory (a GPU's DRAM), as the lab's roofline denominator
// for decodes on that backend. Bytes counted as STREAM counts them (a copy moves 2 x its size).
struct DeviceBandwidth {
  double copy_gb_s = 0;     // device-to-device copy, best trial
  double read_gb_s = 0;     // a read-only pass with 16-byte loads, best trial
  size_t buffer_bytes = 0;  // per array
  size_t cache_bytes = 0;   // the device's last-level cache (the fits-in-cache test)
  int trials = 0;
  std::string kernel;       // e.g. "cuda"
};

class Backend {
 public:
  virtual ~Backend() = default;
  const BackendCounters& counters() const { return counters_; }
  // e.g. "cpu (avx2)", "cpu (scalar)": recorded in bench output.
  virtual std::string name() const = 0;
  // Threads (CPU) the backend computes with.
  virtual int threads() const = 0;
  // Host threads for host-side work (the CPU backend computes on them too).
  virtual ThreadPool& pool() = 0;
  // "cpu" or "cuda": where the ops run.
  virtual const char* device() const { return "cpu"; }
  // Where the bound weights are read from, for reports (empty before bind_weights): e.g. "a
  // huge-page copy, 2324 MiB, 100% on 2 MiB pages" — a roofline assumes the memory the weights
  // actually sit in, so a report says which.
  virtual std::string weights_where() const { return ""; }

  // Measures the bandwidth of this backend's memory with arrays of at least `bytes` (raised so
  // they dwarf the device's cache), best of `trials`. nullopt for a host backend: its memory is
  // the host's, which lab/bandwidth.h measures with the backend's own threads.
  virtual std::optional<DeviceBandwidth> device_bandwidth(size_t bytes, int trials) { return std::nullopt; }

  // ---- Weights ----
  // forward() calls bind_weights once per model (key: that model's weights) before the first op
  // that reads them. A host backend reads weights in place (nothing to do); a device backend
  // uploads them here and fails with a clear error for types it cannot compute with yet.
  virtual bool has_weights(const void* key) const { return true; }
  virtual Status bind_weights(const void* key, const WeightSet& weights) { return Status(); }

  // ---- Forward passes ----
  // forward() brackets the ops of each call with these (rows: the call's total rows). A device
  // backend may defer the launches in between and replay them as a graph; host arrays handed to
  // ops are still read before each op returns, and results reach the host in copy_to_host.
  virtual void begin_forward(int64_t rows) {}
  virtual void end_forward() {}

  // ---- Memory ----
  // The scratch buffer of `role` with room for n floats (contents undefined). Valid until the
  // next call for the same role with a larger n.
  virtual float* buffer(Buf role, int64_t n) = 0;
  // The allocator of KV pages (and other per-sequence state) in this backend's memory.
  virtual PageAllocator& allocator() = 0;
  // dst (host) <- src (backend memory), n floats.
  virtual void copy_to_host(float* dst, const float* src, int64_t n) = 0;

  // ---- Rows ----
  // x[i] = row ids[i] (host) of the table, widened to f32.
  virtual void embed(const Matrix& table, const int32_t* ids, int64_t n, float* x) = 0;
  // dst[i] = src[rows[i]] (rows: host), n rows of `width` floats.
  virtual void gather_rows(const float* src, const int32_t* rows, int64_t n, int64_t width, float* dst) = 0;
  // y[r] = RMSNorm(x[r]) · (plus_one ? 1 + w : w), `rows` rows of n values.
  virtual void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps,
                       bool plus_one) = 0;
  virtual void add(float* x, const float* y, int64_t n) = 0;  // x += y
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  virtual void mul_sigmoid(float* x, const float* gate, int64_t n) = 0;  // x *= sigmoid(gate)
  // y[r] += sigmoid(s[r]) · x[r] for r < rows (the shared expert's gate).
  virtual void add_sigmoid_scaled(float* y, const float* x, const float* s, int64_t rows, int64_t width) = 0;

  // ---- Matrix products ----
  // y[T, w.rows] = x[T, w.cols] · wᵀ (ldx = w.cols, ldy = w.rows).
  virtual void matmul(const Matrix& w, const float* x, int64_t T, float* y) = 0;
  // Several grouped projections over the same routing, in one parallel region.
  virtual void grouped_matmul(const MoeRouting& routing, const GroupedMatmul* jobs, int64_t n_jobs) = 0;

  // ---- Attention ----
  // cos/sin[r][i] of angle positions[r] (host) · inv_freq[i] (host), i < half.
  virtual void rope_tables(const int64_t* positions, int64_t rows, const float* inv_freq, int64_t half, float* cos,
                           float* sin) = 0;
  virtual void attention_prep(const AttentionPrepArgs& a) = 0;
  // Appends T rows of K and V (f32 [T, n_kv, hd]) to one layer of a cache, quantized to the
  // cache's types once, here.
  virtual void kv_append(KvCache& cache, int64_t layer, const float* k, const float* v, int64_t T) = 0;
  // Causal attention of each call's args.T query rows over its sequence's cache layer; the kernel
  // is chosen by the cache's K/V types (f16/f16: the frozen strict kernel). A call's result does
  // not depend on the other calls.
  virtual void attention(const AttentionCall* calls, int64_t n) = 0;
  virtual void hadamard_rows(float* x, int64_t rows, int64_t n) = 0;  // x[r] <- H x[r]

  // ---- Gated DeltaNet ----
  // Qwen3-Next's packed projections to the Qwen3.5 layout: qkvz [R, n_k·(2dk + 2r·dv)] ->
  // mixed [R, q|k|v], z [R, value_dim]; ba [R, n_k·2r] -> b, a [R, n_v].
  virtual void gdn_unpack(const float* qkvz, const float* ba, int64_t rows, int64_t n_k, int64_t n_v, int64_t dk,
                          int64_t dv, float* mixed, float* z, float* b, float* a) = 0;
  // Depthwise causal conv + SiLU over T rows of one sequence, in place; conv_state: that
  // sequence's window (backend memory), updated.
  virtual void causal_conv(float* x, int64_t T, int64_t channels, const float* w, int64_t kernel,
                           float* conv_state) = 0;
  virtual void gdn_prep(const GdnPrepArgs& a) = 0;
  // The delta-rule recurrence of each call's sequence on its own state (GdnCall::chunked: which
  // form). A call's result does not depend on the other calls.
  virtual void gdn_recurrence(const GdnCall* calls, int64_t n) = 0;
  // y = RMSNorm(x)·w·silu(z) per row of n values (Qwen3_5RMSNormGated).
  virtual void rmsnorm_gated(const float* x, const float* z, const float* w, float* y, int64_t rows, int64_t n,
                             float eps) = 0;

  // ---- Mixture of experts ----
  // Softmax over logits [R, E] (in place), top-k per row (ties to the lower id), optional
  // renormalisation, then grouping of the R·K slots by expert (slots ascending inside an expert).
  virtual MoeRouting moe_route(float* logits, int64_t rows, int64_t n_experts, int64_t k, bool renormalize) = 0;
  // dst[i] = x[sorted_slot[i] / K] for every sorted position i.
  virtual void moe_gather(const MoeRouting& r, const float* x, int64_t width, float* dst) = 0;
  // y[row] = Σ_j weight · out[slot_pos[row·K + j]] over the row's K slots in increasing expert
  // id (the order transformers accumulates experts in), y zeroed first.
  virtual void moe_combine(const MoeRouting& r, const float* out, int64_t width, float* y) = 0;

 protected:
  BackendCounters counters_;
};

}  // namespace weft
