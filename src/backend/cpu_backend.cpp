// The CPU backend: each op forwards to its kernel in src/kernels/cpu. The small row-wise ops keep
// the exact arithmetic the forward pass always had (plain loops, double accumulators where a
// reduction is involved), so moving them behind the seam changed no output bit.
#include "backend/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>

#include "cache/kv_cache.h"
#include "core/cpu_features.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_f16_prefill.h"
#include "kernels/cpu/attention_quant.h"
#include "kernels/cpu/gdn.h"
#include "kernels/cpu/gdn_chunked.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/vec_convert.h"
#include "model/forward.h"

namespace weft {

// Prefill split invariance (model/forward.h) rests on the chunked GDN counting chunks as forward
// cuts prompts.
static_assert(kGdnChunk == kPrefillChunk, "the GDN chunk and the prefill chunk must agree");

CpuBackend::CpuBackend(int threads) : pool_(threads) {}

std::string CpuBackend::name() const { return "cpu: " + kernel_path_description(); }

std::string CpuBackend::weights_where() const {
  if (bound_key_ == nullptr) return "";
  if (!bound_copy_) return "the memory-mapped file" + (bound_why_.empty() ? std::string(" (WEFT_CPU_WEIGHTS)") : " (" + bound_why_ + ")");
  char buf[160];
  const size_t all = bound_copy_->bytes(), huge = bound_copy_->huge_bytes();
  if (huge == SIZE_MAX)
    std::snprintf(buf, sizeof buf, "a huge-page copy, %zu MiB (pages unknown)", all >> 20);
  else
    std::snprintf(buf, sizeof buf, "a huge-page copy, %zu MiB, %.0f%% on 2 MiB pages", all >> 20,
                  all ? 100.0 * double(std::min(huge, all)) / double(all) : 0.0);
  return buf;
}

float* CpuBackend::buffer(Buf role, int64_t n) {
  return buffers_[size_t(role)].resize(size_t(n));
}

PageAllocator& CpuBackend::allocator() { return host_allocator(); }

void CpuBackend::copy_to_host(float* dst, const float* src, int64_t n) {
  if (dst != src) std::memcpy(dst, src, size_t(n) * sizeof(float));
}

// Row-wise work is spread over the pool only when the rows carry enough work to pay for the
// hand-off (~1 µs); a decode step's handful of rows runs inline.
template <typename Fn>
void CpuBackend::for_rows(int64_t rows, int64_t cost_per_row, const Fn& fn) {
  constexpr int64_t kMinWorkPerTask = 1 << 15;
  const int64_t rows_per_task = std::max<int64_t>(1, kMinWorkPerTask / std::max<int64_t>(1, cost_per_row));
  const int64_t n_tasks = ceil_div(rows, rows_per_task);
  if (n_tasks <= 1 || pool_.size() <= 1) {
    for (int64_t r = 0; r < rows; ++r) fn(r);
    return;
  }
  pool_.parallel_for(n_tasks, [&](int64_t task) {
    const int64_t r1 = std::min(rows, (task + 1) * rows_per_task);
    for (int64_t r = task * rows_per_task; r < r1; ++r) fn(r);
  });
}

// Element-wise work in contiguous ranges, spread like for_rows (prefill-sized vectors only).
// Each element is computed alone, so any split gives the same bits.
template <typename Fn>
void CpuBackend::for_ranges(int64_t n, const Fn& fn) {
  constexpr int64_t kMinElemsPerTask = 1 << 15;
  const int64_t n_tasks = std::min<int64_t>(ceil_div(n, kMinElemsPerTask), 4 * int64_t(pool_.size()));
  if (n_tasks <= 1 || pool_.size() <= 1) {
    fn(int64_t(0), n);
    return;
  }
  const int64_t per = ceil_div(n, n_tasks);
  pool_.parallel_for(n_tasks, [&](int64_t task) { fn(task * per, std::min(n, (task + 1) * per)); });
}

// ---- Weights ----

bool CpuBackend::has_weights(const void* key) const { return key == bound_key_; }

Status CpuBackend::bind_weights(const void* key, const WeightSet& weights) {
  std::string why;
  bound_copy_.reset();  // before the new copy: never two of them at once
  bound_copy_ = HostWeightCopy::shared(key, weights, &why);
  bound_key_ = key;
  bound_why_ = why;
  if (!why.empty()) {
    static std::once_flag said;
    std::call_once(said, [&] { std::fprintf(stderr, "weft: cpu weights: %s\n", why.c_str()); });
  }
  return Status();
}

Matrix CpuBackend::local(const Matrix& w, QuantLayout* layout) const {
  *layout = QuantLayout{};
  if (!bound_copy_) return w;
  const std::optional<QuantLayout> lay = bound_copy_->layout(w);
  if (!lay) return w;  // cuts a repacked group: the source bytes, plain
  *layout = *lay;
  Matrix m = w;
  m.data = bound_copy_->translate(w.data);
  return m;
}

// ---- Rows ----

void CpuBackend::embed(const Matrix& table_in, const int32_t* ids, int64_t n, float* x) {
  QuantLayout layout;
  const Matrix table = local(table_in, &layout);
  if (dtype_is_block_quant(table.dtype)) {
    const GgmlType gt = *ggml_type_from_dtype(table.dtype);
    thread_local std::vector<uint8_t> plain;  // a row of a repacked table, back in plain bytes
    if (plain.size() < table.row_bytes()) plain.resize(table.row_bytes());
    for (int64_t t = 0; t < n; ++t) {
      const uint8_t* row = quant_row_plain(gt, static_cast<const uint8_t*>(table.data), table.cols, layout, ids[t],
                                           plain.data());
      dequantize_row(gt, row, x + t * table.cols, table.cols);
    }
    return;
  }
  for_rows(n, table.cols, [&](int64_t t) { convert_row_to_f32(table.dtype, table.row(ids[t]), x + t * table.cols, table.cols); });
}

void CpuBackend::gather_rows(const float* src, const int32_t* rows, int64_t n, int64_t width, float* dst) {
  for_rows(n, width, [&](int64_t i) {
    std::memcpy(dst + i * width, src + int64_t(rows[i]) * width, size_t(width) * sizeof(float));
  });
}

void CpuBackend::rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps,
                         bool plus_one) {
  for_rows(rows, n, [&](int64_t r) { weft::rmsnorm(x + r * n, w, y + r * n, n, eps, plus_one); });
}

void CpuBackend::add(float* x, const float* y, int64_t n) {
  for_ranges(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) x[i] += y[i];
  });
}

void CpuBackend::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for_ranges(n, [&](int64_t i0, int64_t i1) { weft::swiglu(gate + i0, up + i0, out + i0, i1 - i0); });
}

void CpuBackend::mul_sigmoid(float* x, const float* gate, int64_t n) {
  for_ranges(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) x[i] *= sigmoidf(gate[i]);
  });
}

void CpuBackend::add_sigmoid_scaled(float* y, const float* x, const float* s, int64_t rows, int64_t width) {
  for_rows(rows, width, [&](int64_t r) {
    const float g = sigmoidf(s[r]);
    for (int64_t h = 0; h < width; ++h) y[r * width + h] += g * x[r * width + h];
  });
}

// ---- Matrix products ----

namespace {
// One weight matrix times T rows of activations: the block types go to the integer-dot kernels
// (quant_matmul.h), f32 / f16 / bf16 to matmul.h unchanged.
void matmul_any(const Matrix& w, const QuantLayout& layout, const float* x, int64_t ldx, int64_t T, float* y,
                int64_t ldy, ThreadPool* pool) {
  if (dtype_is_block_quant(w.dtype)) {
    quant_matmul_with_layout(*ggml_type_from_dtype(w.dtype), w.data, w.rows, w.cols, x, ldx, T, y, ldy, pool, layout);
  } else {
    weft::matmul(w.dtype, w.data, w.rows, w.cols, x, ldx, T, y, ldy, pool);
  }
}
}  // namespace

void CpuBackend::matmul(const Matrix& w_in, const float* x, int64_t T, float* y) {
  QuantLayout layout;
  const Matrix w = local(w_in, &layout);
  matmul_any(w, layout, x, w.cols, T, y, w.rows, &pool_);
}

namespace {

// The block type every expert of a grouped job shares, or nullopt (plain types, or a mix).
std::optional<GgmlType> common_block_type(const GroupedMatmul& job, int64_t n_experts) {
  if (n_experts <= 0 || !dtype_is_block_quant(job.w[0].dtype)) return std::nullopt;
  for (int64_t e = 1; e < n_experts; ++e)
    if (job.w[e].dtype != job.w[0].dtype || job.w[e].cols != job.w[0].cols) return std::nullopt;
  return ggml_type_from_dtype(job.w[0].dtype);
}

}  // namespace

void CpuBackend::grouped_matmul(const MoeRouting& r, const GroupedMatmul* jobs, int64_t n_jobs) {
  // Block-quantized experts: each job's activation rows are quantized once here, before the
  // tasks, and shared by every row task and expert that reads them (and by a later job with the
  // same activations and activation type: gate and up). The tasks used to quantize their rows
  // each (a decode step's 2048-wide gate/up rows ~9 times per expert: ~5% of a Q4_K_M step).
  // The bytes are the ones quant_matmul would compute, so the outputs do not change.
  const int64_t total_rows = r.expert_begin[r.n_experts];
  thread_local std::vector<uint8_t> xq_all;
  thread_local std::vector<size_t> xq_offset;  // per job: its rows' offset in xq_all, or SIZE_MAX
  xq_offset.assign(size_t(n_jobs), SIZE_MAX);
  size_t xq_total = 0;
  struct Quantize {
    int64_t job;
    GgmlType wt;
  };
  thread_local std::vector<Quantize> to_quantize;
  to_quantize.clear();
  for (int64_t j = 0; j < n_jobs; ++j) {
    const std::optional<GgmlType> wt = common_block_type(jobs[j], r.n_experts);
    if (!wt || total_rows == 0) continue;
    const int64_t K = jobs[j].w[0].cols;
    for (int64_t i = 0; i < j && xq_offset[size_t(j)] == SIZE_MAX; ++i) {
      const std::optional<GgmlType> wi = common_block_type(jobs[i], r.n_experts);
      if (xq_offset[size_t(i)] != SIZE_MAX && jobs[i].x == jobs[j].x && jobs[i].ldx == jobs[j].ldx &&
          jobs[i].w[0].cols == K && activation_type(*wi) == activation_type(*wt))
        xq_offset[size_t(j)] = xq_offset[size_t(i)];
    }
    if (xq_offset[size_t(j)] != SIZE_MAX) continue;
    xq_offset[size_t(j)] = xq_total;
    xq_total += size_t(total_rows) * quant_activation_row_bytes(*wt, K);
    to_quantize.push_back({j, *wt});
  }
  if (xq_all.size() < xq_total) xq_all.resize(xq_total);
  {
    // Row chunks of every job to quantize, spread over the pool when there are many (prefill).
    constexpr int64_t kQuantizeRowsPerTask = 16;
    const int64_t chunks_per_job = ceil_div(total_rows, kQuantizeRowsPerTask);
    const int64_t n_chunks = int64_t(to_quantize.size()) * chunks_per_job;
    // Workers must not name the thread_locals (they would see their own): pass pointers.
    uint8_t* base = xq_all.data();
    const Quantize* quantize_list = to_quantize.data();
    const size_t* offsets = xq_offset.data();
    auto quantize_chunk = [&](int64_t c) {
      const Quantize& q = quantize_list[c / chunks_per_job];
      const GroupedMatmul& job = jobs[q.job];
      const int64_t K = job.w[0].cols;
      const int64_t r0 = (c % chunks_per_job) * kQuantizeRowsPerTask;
      const int64_t n = std::min(kQuantizeRowsPerTask, total_rows - r0);
      quantize_activation_rows(q.wt, job.x + r0 * job.ldx, job.ldx, n, K,
                               base + offsets[q.job] + size_t(r0) * quant_activation_row_bytes(q.wt, K));
    };
    if (pool_.size() > 1 && n_chunks > 1 && total_rows > kQuantizeRowsPerTask) {
      pool_.parallel_for(n_chunks, quantize_chunk);
    } else {
      for (int64_t c = 0; c < n_chunks; ++c) quantize_chunk(c);
    }
  }

  // One task per (job, expert with rows, block of weight rows). A block holds >= 64 KiB of
  // weights (as the decode matmul's tasks do), so a decode step's 8 experts x gate/up spread over
  // every thread in one parallel region instead of one fork-join per expert and projection.
  // Each output element is still one whole dot product in the order of matmul.h, so the result
  // is bit-identical to running the experts one by one.
  struct Task {
    int64_t job;
    int32_t expert;
    int64_t n0, n1;
  };
  const int64_t streaming_tokens = matmul_streaming_tokens();  // the matmul's decode/prefill boundary
  thread_local std::vector<Task> tasks;
  tasks.clear();
  for (int64_t j = 0; j < n_jobs; ++j) {
    for (int64_t e = 0; e < r.n_experts; ++e) {
      if (r.expert_begin[e + 1] == r.expert_begin[e]) continue;
      const Matrix& w = jobs[j].w[e];
      const int64_t row_bytes = int64_t(w.row_bytes());
      int64_t block = std::max<int64_t>(kMatmulRowsPerTask, ((65536 / std::max<int64_t>(1, row_bytes)) + 7) & ~7);
      // An expert with prefill-many rows takes the matmul's own prefill row block (64 rows on
      // AVX-512): each of its activation rows is then read from L3 once per 64 weight rows, not 16.
      if (!dtype_is_block_quant(w.dtype) && r.expert_begin[e + 1] - r.expert_begin[e] > streaming_tokens)
        block = std::max(block, matmul_prefill_rows_per_task(w.cols));
      static_assert(kMatmulRowsPerTask % kX8GroupRows == 0, "blocks must not split a q4_K group");
      for (int64_t n0 = 0; n0 < w.rows; n0 += block) tasks.push_back({j, int32_t(e), n0, std::min(w.rows, n0 + block)});
    }
  }
  // Prefill: largest tasks first (experts get very different row counts), so the pool's dynamic
  // schedule ends with small tasks instead of one thread finishing a big expert alone.
  if (total_rows > streaming_tokens) {
    auto cost = [&](const Task& t) {
      return (r.expert_begin[t.expert + 1] - r.expert_begin[t.expert]) * (t.n1 - t.n0) * jobs[t.job].w[t.expert].cols;
    };
    std::stable_sort(tasks.begin(), tasks.end(), [&](const Task& a, const Task& b) { return cost(a) > cost(b); });
  }
  const Task* list = tasks.data();
  const uint8_t* xq = xq_all.data();
  const size_t* offsets = xq_offset.data();
  auto run = [&](int64_t i) {
    const Task& t = list[i];
    const GroupedMatmul& job = jobs[t.job];
    QuantLayout whole;
    const Matrix w = local(job.w[t.expert], &whole).row_slice(t.n0, t.n1 - t.n0);
    // Blocks start at multiples of 8 rows, so a slice never starts inside a group.
    const QuantLayout layout{std::clamp<int64_t>(whole.grouped_rows - t.n0, 0, w.rows)};
    const int64_t begin = r.expert_begin[t.expert], n = r.expert_begin[t.expert + 1] - begin;
    float* y = job.y + begin * job.ldy + t.n0;
    if (offsets[t.job] != SIZE_MAX) {
      const GgmlType wt = *ggml_type_from_dtype(w.dtype);
      quant_matmul_quantized(wt, w.data, w.rows, w.cols,
                             xq + offsets[t.job] + size_t(begin) * quant_activation_row_bytes(wt, w.cols), n, y,
                             job.ldy, nullptr, layout);
    } else {
      matmul_any(w, layout, job.x + begin * job.ldx, job.ldx, n, y, job.ldy, nullptr);
    }
  };
  const int64_t n_tasks = int64_t(tasks.size());
  if (pool_.size() <= 1 || n_tasks <= 1) {
    for (int64_t i = 0; i < n_tasks; ++i) run(i);
  } else {
    // Decode: tasks in the experts' order, one contiguous run per thread (Schedule::kRanges);
    // prefill keeps the shared counter over its largest-first order.
    pool_.parallel_for(n_tasks, run, total_rows > streaming_tokens ? Schedule::kShared : Schedule::kRanges);
  }
}

// ---- Attention ----

void CpuBackend::rope_tables(const int64_t* positions, int64_t rows, const float* inv_freq, int64_t half, float* cs,
                             float* sn) {
  // angle = position · inv_freq in float32, then cos/sin in double, as transformers computes them.
  for_rows(rows, 32 * half, [&](int64_t t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(positions[t]) * inv_freq[i];
      cs[t * half + i] = float(std::cos(double(angle)));
      sn[t * half + i] = float(std::sin(double(angle)));
    }
  });
}

void CpuBackend::attention_prep(const AttentionPrepArgs& a) {
  const int64_t nh = a.n_heads, nkv = a.n_kv, hd = a.head_dim, half = a.rotary_dim / 2;
  const int64_t q_rows = nh * hd * (a.gated ? 2 : 1);
  for_rows(a.rows, (nh + nkv) * hd * 4, [&](int64_t t) {
    float* k = a.k + t * nkv * hd;
    float* v = a.v + t * nkv * hd;
    if (a.k_bias)
      for (int64_t i = 0; i < nkv * hd; ++i) {
        k[i] += a.k_bias[i];
        v[i] += a.v_bias[i];
      }
    const float* cs = a.cos + t * half;
    const float* sn = a.sin + t * half;
    for (int64_t h = 0; h < nh; ++h) {
      // q_proj viewed as [heads, 2·head_dim] and chunked: [query | gate] per head.
      const float* src = a.qg + t * q_rows + h * hd * (a.gated ? 2 : 1);
      const int64_t off = h * hd * (a.gated ? 2 : 1);
      float* qh = a.q + (t * nh + h) * hd;
      for (int64_t i = 0; i < hd; ++i) qh[i] = a.q_bias ? src[i] + a.q_bias[off + i] : src[i];
      if (a.gated)
        for (int64_t i = 0; i < hd; ++i)
          a.gate[(t * nh + h) * hd + i] = a.q_bias ? src[hd + i] + a.q_bias[off + hd + i] : src[hd + i];
      if (a.q_norm) weft::rmsnorm(qh, a.q_norm, qh, hd, a.eps, a.norm_plus_one);
      rope_rotate_half(qh, cs, sn, a.rotary_dim);
    }
    for (int64_t h = 0; h < nkv; ++h) {
      float* kh = k + h * hd;
      if (a.k_norm) weft::rmsnorm(kh, a.k_norm, kh, hd, a.eps, a.norm_plus_one);
      rope_rotate_half(kh, cs, sn, a.rotary_dim);
    }
    // --kv-rotate: q·k = (Hq)·(Hk), so rotating both leaves the scores unchanged while the cache
    // quantizes H·k, whose outliers are spread over the whole head.
    if (a.rotate_k) {
      fwht_rows(a.q + t * nh * hd, nh, hd);
      fwht_rows(k, nkv, hd);
    }
    if (a.rotate_v) fwht_rows(v, nkv, hd);
  });
}

void CpuBackend::kv_append(KvCache& cache, int64_t layer, const float* k, const float* v, int64_t T) {
  cache.append(layer, k, v, T);
}

template <typename Fn>
void CpuBackend::for_calls(int64_t n, const Fn& call) {
  if (n > 1 && n >= pool_.size()) {
    pool_.parallel_for(n, [&](int64_t i) { call(i, nullptr); });
  } else {
    for (int64_t i = 0; i < n; ++i) call(i, &pool_);
  }
}

namespace {

void attention_one(const KvLayerView& view, const AttentionArgs& args, ThreadPool* pool) {
  if (view.k_type == DType::kF16 && view.v_type == DType::kF16) {
    // Strict tier: the tiled kernels, which reproduce the frozen kernel's bits row for row
    // (attention_f16_prefill.h says which runs where).
    attention_f16_strict(view, args, pool);
  } else if (attention_quant_supports(view)) {
    attention_quant(view, args, pool);  // quantized KV tier
  } else {
    attention_reference(view, args, pool);
  }
}

}  // namespace

void CpuBackend::attention(const AttentionCall* calls, int64_t n) {
  for_calls(n, [&](int64_t i, ThreadPool* pool) { attention_one(calls[i].kv, calls[i].args, pool); });
}

void CpuBackend::hadamard_rows(float* x, int64_t rows, int64_t n) { fwht_rows(x, rows, n); }

// ---- Gated DeltaNet ----

void CpuBackend::gdn_unpack(const float* qkvz, const float* ba, int64_t rows, int64_t nk, int64_t nv, int64_t dk,
                            int64_t dv, float* mixed, float* z, float* b, float* a) {
  // in_proj_qkvz rows are grouped per key head: [q (dk) | k (dk) | v (r·dv) | z (r·dv)];
  // in_proj_ba per key head: [b (r) | a (r)] (fix_query_key_value_ordering).
  const int64_t r = nv / nk, group = 2 * dk + 2 * r * dv;
  const int64_t key_dim = nk * dk, value_dim = nv * dv, conv_dim = 2 * key_dim + value_dim;
  for_rows(rows, conv_dim + value_dim, [&](int64_t t) {
    for (int64_t h = 0; h < nk; ++h) {
      const float* src = qkvz + t * nk * group + h * group;
      std::copy(src, src + dk, mixed + t * conv_dim + h * dk);
      std::copy(src + dk, src + 2 * dk, mixed + t * conv_dim + key_dim + h * dk);
      std::copy(src + 2 * dk, src + 2 * dk + r * dv, mixed + t * conv_dim + 2 * key_dim + h * r * dv);
      std::copy(src + 2 * dk + r * dv, src + group, z + t * value_dim + h * r * dv);
      for (int64_t i = 0; i < r; ++i) {
        b[t * nv + h * r + i] = ba[t * 2 * nv + h * 2 * r + i];
        a[t * nv + h * r + i] = ba[t * 2 * nv + h * 2 * r + r + i];
      }
    }
  });
}

void CpuBackend::causal_conv(float* x, int64_t T, int64_t channels, const float* w, int64_t kernel,
                             float* conv_state) {
  // Channels are independent: prefill splits them into blocks of 64 over the pool (same bits).
  constexpr int64_t kBlock = 64;
  for_rows(ceil_div(channels, kBlock), T * kBlock * kernel, [&](int64_t b) {
    causal_conv1d_silu_channels(x, T, channels, w, kernel, conv_state, b * kBlock, std::min(channels, (b + 1) * kBlock));
  });
}

void CpuBackend::gdn_prep(const GdnPrepArgs& a) {
  const float q_scale = 1.0f / std::sqrt(float(a.dk));
  const int64_t key_dim = a.n_k * a.dk;
  for_rows(a.rows, a.conv_dim, [&](int64_t t) {
    for (int64_t h = 0; h < a.n_k; ++h) {
      float* qh = a.mixed + t * a.conv_dim + h * a.dk;
      float* kh = a.mixed + t * a.conv_dim + key_dim + h * a.dk;
      l2norm(qh, a.dk, 1e-6f);
      l2norm(kh, a.dk, 1e-6f);
      for (int64_t i = 0; i < a.dk; ++i) qh[i] *= q_scale;
    }
    for (int64_t j = 0; j < a.n_v; ++j) {
      a.beta[t * a.n_v + j] = sigmoidf(a.beta[t * a.n_v + j]);
      a.g[t * a.n_v + j] = -std::exp(a.a_log[j]) * softplusf(a.g[t * a.n_v + j] + a.dt_bias[j]);
    }
  });
}

void CpuBackend::gdn_recurrence(const GdnCall* calls, int64_t n) {
  for_calls(n, [&](int64_t i, ThreadPool* pool) {
    if (calls[i].chunked) {
      gdn_chunked(calls[i].args, pool);  // prefill: chunks of 64 from the first row
    } else {
      gdn_recurrent(calls[i].args, pool);  // decode: row by row
    }
  });
}

void CpuBackend::rmsnorm_gated(const float* x, const float* z, const float* w, float* y, int64_t rows, int64_t n,
                               float eps) {
  for_rows(rows, n, [&](int64_t i) { weft::rmsnorm_gated(x + i * n, z + i * n, w, y + i * n, n, eps); });
}

// ---- Mixture of experts ----

MoeRouting CpuBackend::moe_route(float* logits, int64_t rows, int64_t E, int64_t K, bool renormalize) {
  return route_on_host(logits, rows, E, K, renormalize, &routing_, &counters_);
}

void CpuBackend::moe_gather(const MoeRouting& r, const float* x, int64_t width, float* dst) {
  for_rows(r.rows * r.k, width, [&](int64_t i) {
    const float* src = x + (r.sorted_slot[i] / r.k) * width;
    std::copy(src, src + width, dst + i * width);
  });
}

void CpuBackend::moe_combine(const MoeRouting& r, const float* out, int64_t width, float* y) {
  // Per row, its K slots in increasing expert id: the order transformers sums experts in.
  for_rows(r.rows, r.k * width, [&](int64_t t) {
    int32_t by_expert[64];
    std::vector<int32_t> big;
    int32_t* idx = r.k <= 64 ? by_expert : (big.resize(size_t(r.k)), big.data());
    for (int64_t j = 0; j < r.k; ++j) idx[j] = int32_t(t * r.k + j);
    std::sort(idx, idx + r.k, [&](int32_t a, int32_t b) { return r.slot_expert[a] < r.slot_expert[b]; });
    float* yt = y + t * width;
    std::fill(yt, yt + width, 0.0f);
    for (int64_t j = 0; j < r.k; ++j) {
      const float wt = r.slot_weight[idx[j]];
      const float* o = out + int64_t(r.slot_pos[idx[j]]) * width;
      for (int64_t h = 0; h < width; ++h) yt[h] += wt * o[h];
    }
  });
}

}  // namespace weft
