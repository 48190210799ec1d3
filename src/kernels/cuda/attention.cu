// CUDA attention: checks each call, picks its kernel (a tiled kernel where it applies, by KV type:
// attention_qkeys.cu or attention_split.cu; the simple reference kernel
// otherwise) and hands out the workspace. See attention.cuh.
#include "kernels/cuda/attention.cuh"

#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_kernels.cuh"

namespace weft::cuda {

namespace detail {

void validate_call(const AttentionCall& c) {
  const KvLayerView& kv = c.kv;
  const AttentionArgs& a = c.args;
  auto fail = [](const std::string& why) { throw std::invalid_argument("cuda::attention: " + why); };
  if (a.T < 0 || a.pos0 < 0) fail("negative T or pos0");
  if (a.pos0 + a.T > kv.length) fail("query rows past the KV cache (append before attention)");
  if (kv.n_kv_heads <= 0 || kv.head_dim <= 0 || kv.page_tokens <= 0) fail("empty KV layer geometry");
  if (a.n_heads <= 0 || a.n_heads % kv.n_kv_heads != 0) fail("n_heads must be a positive multiple of n_kv_heads");
  if (kv_type_of(kv.k_type) == kKvOther || kv_type_of(kv.v_type) == kKvOther) fail("unsupported KV cache type");
  if (a.T > 0 && (a.q == nullptr || a.out == nullptr || kv.pages == nullptr)) fail("null q, out or page table");
}

}  // namespace detail

using namespace detail;

namespace {

// Bytes are handed out in 256-byte steps so every call's partials start aligned.
size_t align_up(size_t n) { return (n + 255) & ~size_t(255); }

// The kernel a call takes: the KV types pick it (SplitTuning::keys_quant / keys_f16).
enum class Route { kQKeys, kSplit, kSimple, kNone };
Route route_of(const AttentionCall& c) {
  const SplitTuning t = split_tuning();
  const bool quant = c.kv.k_type != DType::kF16 || c.kv.v_type != DType::kF16;
  if ((quant ? t.keys_quant : t.keys_f16) && qkeys_supports(c)) return Route::kQKeys;
  if (split_supports(c)) return Route::kSplit;
  if (simple_supports(c)) return Route::kSimple;
  return Route::kNone;
}

}  // namespace

size_t attention_workspace_bytes(const AttentionCall* calls, int64_t n) {
  size_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (calls[i].args.T <= 0) continue;
    const Route r = route_of(calls[i]);
    if (r == Route::kQKeys) total += align_up(qkeys_workspace_bytes(calls[i]));
    else if (r == Route::kSplit) total += align_up(split_workspace_bytes(calls[i]));
  }
  return total;
}

void attention(const AttentionCall* calls, int64_t n, void* workspace, cudaStream_t stream) {
  std::vector<AttentionCall> split, qkeys;
  std::vector<size_t> offsets, qkeys_offsets;
  size_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    const AttentionCall& c = calls[i];
    validate_call(c);
    if (c.args.T == 0) continue;
    const Route r = route_of(c);
    if (r == Route::kQKeys) {
      qkeys.push_back(c);
      qkeys_offsets.push_back(offset);
      offset += align_up(qkeys_workspace_bytes(c));
    } else if (r == Route::kSplit) {
      split.push_back(c);
      offsets.push_back(offset);
      offset += align_up(split_workspace_bytes(c));
    } else if (r == Route::kSimple) {
      attention_simple(c, stream);
    } else {
      throw std::invalid_argument("cuda::attention: head_dim " + std::to_string(c.kv.head_dim) +
                                  " is not supported");
    }
  }
  if (!qkeys.empty())
    attention_qkeys(qkeys.data(), qkeys_offsets.data(), int64_t(qkeys.size()), static_cast<uint8_t*>(workspace),
                    stream);
  if (!split.empty())
    attention_split(split.data(), offsets.data(), int64_t(split.size()), static_cast<uint8_t*>(workspace), stream);
}

}  // namespace weft::cuda
