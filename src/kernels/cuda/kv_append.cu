// KV append on the GPU: T rows of f32 K and V encoded into the layer's page table, bit for bit as
// the CPU's encode_kv_row (src/kernels/cpu/kv_quant.cpp). One thread per 32-value block (q8_0,
// q4_0) or per value (f16, f32). Runs once per appended token per layer (never on the attention
// hot path), so it is plain and simple.
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_common.cuh"

namespace weft::cuda {

namespace {

using namespace detail;

struct AppendArgs {
  const uint8_t* const* pages;
  int64_t page_tokens, n_kv, hd, pos0, T;
  size_t k_row_bytes, v_row_bytes;
  int k_type, v_type;
  const float* k;
  const float* v;
};

// Encodes the 32 values x[0..32) as one q8_0 block at dst (kv_quant.cpp: quantize_row_q8_0).
__device__ void encode_q8_block(const float* x, uint8_t* dst) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d != 0 ? __fdiv_rn(1.0f, d) : 0.0f;
  const uint16_t dh = f32_to_f16_bits(d);
  dst[0] = uint8_t(dh & 0xff);
  dst[1] = uint8_t(dh >> 8);
  // A block of subnormals has a scale whose inverse overflows: its products are ±inf or NaN and
  // encode as 0, as on the CPU (kv_quant.cpp), where lround would be unspecified.
  for (int j = 0; j < 32; ++j) {
    const float v = __fmul_rn(x[j], id);
    dst[2 + j] = isfinite(v) ? uint8_t(int8_t(lroundf(v))) : 0;
  }
}

// Encodes 32 values as one q4_0 block (kv_quant.cpp: quantize_row_q4_0).
__device__ void encode_q4_block(const float* x, uint8_t* dst) {
  float amax = 0, m = 0;
  for (int j = 0; j < 32; ++j)
    if (fabsf(x[j]) > amax) {
      amax = fabsf(x[j]);
      m = x[j];
    }
  const float d = __fdiv_rn(m, -8.0f);
  const float id = d != 0 ? __fdiv_rn(1.0f, d) : 0.0f;
  const uint16_t dh = f32_to_f16_bits(d);
  dst[0] = uint8_t(dh & 0xff);
  dst[1] = uint8_t(dh >> 8);
  for (int j = 0; j < 16; ++j) {
    // Non-finite (a block of subnormals: see encode_q8_block) encodes as 0, as on the CPU.
    const float v0 = floorf(__fadd_rn(__fmul_rn(x[j], id), 8.5f));
    const float v1 = floorf(__fadd_rn(__fmul_rn(x[j + 16], id), 8.5f));
    int q0 = isfinite(v0) ? int(v0) : 0;
    int q1 = isfinite(v1) ? int(v1) : 0;
    q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
    q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
    dst[2 + j] = uint8_t(q0 | q1 << 4);
  }
}

// Thread i of the grid: (t, kv head, K or V, unit) where a unit is a 32-value block for the
// quantized types and one value otherwise.
__global__ void kv_append_kernel(AppendArgs a, int64_t units_k, int64_t units_v) {
  const int64_t per_row = units_k + units_v;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.T * a.n_kv * per_row) return;
  const int64_t row = i / per_row, u0 = i % per_row;
  const int64_t t = row / a.n_kv, h = row % a.n_kv;
  const bool is_v = u0 >= units_k;
  const int64_t u = is_v ? u0 - units_k : u0;
  const int type = is_v ? a.v_type : a.k_type;
  const float* src = (is_v ? a.v : a.k) + (t * a.n_kv + h) * a.hd;
  uint8_t* dst = const_cast<uint8_t*>(kv_row_ptr(a.pages, a.page_tokens, a.n_kv, a.k_row_bytes,
                                                 is_v ? a.v_row_bytes : a.k_row_bytes, is_v, h, a.pos0 + t));
  switch (type) {
    case kKvF32: reinterpret_cast<float*>(dst)[u] = src[u]; break;
    case kKvF16: reinterpret_cast<uint16_t*>(dst)[u] = f32_to_f16_bits(src[u]); break;
    case kKvQ8: encode_q8_block(src + u * 32, dst + u * 34); break;
    default: encode_q4_block(src + u * 32, dst + u * 18); break;
  }
}

int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

int64_t units(int type, int64_t hd) { return type == kKvQ8 || type == kKvQ4 ? hd / 32 : hd; }

}  // namespace

void kv_append(const KvLayerView& layer, int64_t pos0, const float* k, const float* v, int64_t T,
               cudaStream_t stream) {
  if (T <= 0) return;
  const KvType kt = kv_type_of(layer.k_type), vt = kv_type_of(layer.v_type);
  if (kt == kKvOther || vt == kKvOther) throw std::invalid_argument("cuda::kv_append: unsupported KV cache type");
  if (((kt == kKvQ8 || kt == kKvQ4) || (vt == kKvQ8 || vt == kKvQ4)) && layer.head_dim % 32 != 0)
    throw std::invalid_argument("cuda::kv_append: quantized KV needs head_dim % 32 == 0");
  if (pos0 < 0 || pos0 + T > layer.length)
    throw std::invalid_argument("cuda::kv_append: rows outside the layer's page table (grow the cache first)");
  AppendArgs a{layer.pages, layer.page_tokens, layer.n_kv_heads, layer.head_dim, pos0, T,
               layer.k_row_bytes, layer.v_row_bytes, int(kt), int(vt), k, v};
  const int64_t uk = units(kt, layer.head_dim), uv = units(vt, layer.head_dim);
  const int64_t n = T * layer.n_kv_heads * (uk + uv);
  const int threads = 256;
  kv_append_kernel<<<unsigned(ceil_div(n, threads)), threads, 0, stream>>>(a, uk, uv);
  check(cudaGetLastError(), "kv_append launch");
}

}  // namespace weft::cuda
