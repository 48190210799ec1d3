// Dense matrix products on the GPU: y[T, N] = x[T, K] · wᵀ for a weight w [N, K] in its stored
// type (f32, f16, bf16), our own kernel for every T (decode and prefill alike).
//
// Reduction order (strict tier): each output y[t, n] is the dot product of one weight row and one
// activation row computed by one warp: lane l accumulates, with fmaf in increasing k, the
// elements k whose 8-element group (k / 8) is ≡ l (mod 32); the 32 lane sums are then added by the
// butterfly xor 16, 8, 4, 2, 1 and lane 0's value is stored. Nothing in that order depends on T,
// on which other rows are in the batch or on the grid, so a sequence's results are batch- and
// split-invariant, and run to run identical. A warp computes 4 weight rows x 8 tokens at once
// (each weight load serves 8 tokens, each activation load 4 rows). One token (T = 1, decode) takes
// a kernel of one or two weight rows per warp with the same per-element order (more blocks, a
// whole row's loads in flight; one row per warp for small launches, else two; WEFT_CUDA_MATVEC_ROWS=1|2
// forces one).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/rows.cuh"
#include "kernels/cuda/moe_route.cuh"

namespace weft::cuda {

// The alignment of row starts that weight type d's vector loads need: 16 bytes for f32, f16 and
// bf16 (16-byte loads) and for q4_K and q5_K (their 16-byte super-block headers); 8 for q8_0
// (8-byte quant loads); 4 for q4_0 and q6_K (4-, 2- and 1-byte loads). Why it is per type: a q6_K
// row of K = 512 (an expert's down projection in a Q4_K_M file) is 420 bytes, 4- but not 16-byte
// aligned, and a 16-byte rule sent every such product to the element-wise path.
size_t vec_row_align(DType d);
// True when the vector load path applies to weights w (rows row_bytes apart, type d) and
// activations x (rows ldx floats apart, 16-byte loads); it gives the same bits as the scalar path.
bool matmul_vec_ok(DType d, const void* w, size_t row_bytes, int64_t K, const float* x, int64_t ldx);
// One projection of the routed experts, grouped by the device-side routing (moe_route.cuh): the
// sorted rows [begin[e], begin[e+1]) of x (ldx floats apart) times w[e] into the same rows of y.
struct ExpertMatmulJob {
  const void* const* w = nullptr;  // [E] device weights per expert; null: not this launch's type
  size_t row_bytes = 0;
  int64_t N = 0, K = 0;
  const float* x = nullptr;
  int64_t ldx = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  // Set: the input is swiglu(x, up) (up in x's layout), computed while loading (one-row path).
  const float* up = nullptr;
};
// The projections `jobs` (device array) over the token tiles of a routing: grid (N tiles,
// max_tiles, n_jobs); blocks past *n_tiles return at once, so the host needs no routing result.
// Each output element gets exactly `matmul`'s per-element order (same bits as one matmul per
// expert). vec: matmul_vec_ok holds for every expert's weights and for x + any row. one_row: the
// routing has one row (decode), so every expert holds at most one: the one-token kernel serves.
// swiglu_k > 0: the jobs' inputs are swiglu(x, up), swiglu_k the largest K of the jobs (vec and
// one_row only; same bits as swiglu first).
void expert_matmul(DType dtype, const ExpertMatmulJob* jobs, int64_t n_jobs, int64_t max_N,
                   const int32_t* expert_begin, const int32_t* tile_expert, const int32_t* tile_t0,
                   const int32_t* n_tiles, int64_t max_tiles, bool vec, bool one_row, int64_t swiglu_k,
                   cudaStream_t stream);

// The routed experts' down projection of a one-row routing (decode) with moe_combine folded in,
// and optionally the shared expert's down projection: one launch instead of two or three. A warp
// computes output row h of every selected expert (and of the shared expert), all their loads in
// flight at once, then y[h] = Σ_j weight_j · down_j[h] over the slots in expert order
// (moe_combine's order and combine_step_dev). Inputs are swiglu(gate, up) staged once per block.
// Each dot product has `matmul`'s per-element order: the bits of expert_matmul + moe_combine (+ the
// shared expert's swiglu + matmul); the experts' own outputs are not written.
constexpr int kMaxDownCombineRows = 16;  // selected experts + the shared expert
struct DownCombine {
  const void* const* w = nullptr;  // [E] device weights of the experts' down projection
  size_t row_bytes = 0;
  int64_t N = 0, K = 0;            // N: hidden size; K: expert intermediate size
  const float *gate = nullptr, *up = nullptr;  // [k, K]: sorted slot j's input is swiglu(gate_j, up_j)
  int k = 0;                       // slots of the row
  // The routing (moe_route.cuh): position j's expert is tile_expert[j], its weight
  // slot_weight[sorted_slot[j]].
  const int32_t *expert_begin = nullptr, *tile_expert = nullptr, *n_tiles = nullptr, *sorted_slot = nullptr;
  const float* slot_weight = nullptr;
  float* y = nullptr;              // [N]: the combined row
  // The shared expert (sw null: none): y_shared = down_shared · swiglu(s_gate, s_up), N rows.
  const void* sw = nullptr;
  size_t s_row_bytes = 0;
  int64_t s_K = 0;
  const float *s_gate = nullptr, *s_up = nullptr;
  float* s_y = nullptr;
  // What the kernel reads before its PDL wait: 0 nothing; 1 the routing (default: its writer is
  // two launches back, see down_combine_kernel); 2 the routing and the first pass of weights.
  int early = 1;
};
// Whether down_combine takes this shape (rows, staged input size, types); vec: 16-byte loads apply.
bool down_combine_fits(int k, bool shared, int64_t K, int64_t s_K);
void down_combine(DType dtype, const DownCombine& a, cudaStream_t stream);

// Several one-token products of the same input row x (q/k/v, the GDN input projections, a gate
// and an up projection) in one launch; each output element gets `matmul`'s order, so the bits are
// those of one matmul call per product. Each weight matmul_vec_ok with x; all of matvec_multi's
// `dtype`, or, when `mixed` is set, each of its own type type[j] (plain input only: no up, tail,
// sigmoid gate or norm), e.g. a bf16 router beside q8_0 shared-expert products.
constexpr int kMaxMatvecJobs = 8;
struct MatvecJobs {
  int n = 0;
  const void* w[kMaxMatvecJobs] = {};
  size_t row_bytes[kMaxMatvecJobs] = {};
  int64_t N[kMaxMatvecJobs] = {};
  float* y[kMaxMatvecJobs] = {};
  bool mixed = false;
  DType type[kMaxMatvecJobs] = {};
};
// A one-row MoE routing (moe_route's, same bits) run by the block of a matvec_multi launch that
// finishes last, once every product of the launch is written, instead of in a launch of its own
// (the backend uses it with WEFT_CUDA_FUSE_ROUTE=1 only: measured slower than its own launch):
// `logits` is one of the launch's outputs (the router's). counter: a device unsigned, zero before
// the launch and zero again after it (the last block resets it), so graphs replay it as it is.
struct RouteTail {
  float* logits = nullptr;
  int E = 0, K = 0;
  bool renormalize = false;
  MoeRouteOut out;
  unsigned* counter = nullptr;
};
bool route_tail_fits(int64_t n_experts, int64_t k);
// up set: the input is swiglu(x, up) computed while loading (same bits as swiglu, then the product).
// tail set: the routing above after the products (plain input only).
// sigmoid_gate set: the input is x·σ(sigmoid_gate), staged once per block (same bits as
// mul_sigmoid, then the product; x itself is not written); K within matvec_gate_fits, no up/tail.
bool matvec_gate_fits(int64_t K);
// The residual chain of cuda::residual_rmsnorm for one row (a.rows == 1, a.xn set, a.n == K)
// computed by every block of the product launch that reads its norm: each block forms
// x + y (y += σ(s)·shared first when set) and its rmsnorm in shared memory with the residual
// kernel's arithmetic, the sum of squares in the order of its norm_threads(n)-thread block (the
// block's 256 threads play 1024 / 512 / 256 of them), so the product's input has its bits; the
// launch's last block to finish (counted on `counter`: zero before, reset after) then writes x, y
// and xn as the residual kernel would have, for the ops after the launch. x, y, xn are not
// written before every block has read them.
struct NormInput {
  ResidualArgs a;
  unsigned* counter = nullptr;
};
bool matvec_norm_fits(int64_t K);
void matvec_multi(DType dtype, const MatvecJobs& jobs, int64_t K, const float* x, cudaStream_t stream,
                  const float* up = nullptr, const RouteTail* tail = nullptr, const float* sigmoid_gate = nullptr,
                  const NormInput* norm = nullptr);
// Whether matvec_multi's products (2-byte weights; not the routing-tail or swiglu-direct forms)
// issue their first pass of weight loads, a whole 2048-column row per warp, into registers before
// their PDL wait, so that round trip overlaps the predecessor's tail (weights are constant while
// products run; everything another kernel writes is still read after the wait). Each CUDA backend
// sets it from WEFT_CUDA_EARLY_WEIGHTS when it is created (so a test can compare both): on by
// default, measured 1.02-1.05x decode at depth 4096 on the full 35B-A3B geometry against =0,
// alternated in one call (docs/results.md §10). Same bits either way.
bool matvec_early();
void set_matvec_early(bool on);

// True for the weight types this kernel takes.
bool matmul_supports(DType dtype);
// w: [N, K] rows of row_bytes bytes (device); x: T rows, ldx floats apart; y: T rows, ldy apart.
void matmul(DType dtype, const void* w, size_t row_bytes, int64_t N, int64_t K, const float* x, int64_t ldx,
            int64_t T, float* y, int64_t ldy, cudaStream_t stream);

}  // namespace weft::cuda
