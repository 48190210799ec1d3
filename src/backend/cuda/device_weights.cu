#include "backend/cuda/device_weights.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>

#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/weight_layout.cuh"

namespace weft {

namespace {

// True for memory cudaMalloc gave out (in this process, on any device); plain host memory, mapped
// files and pinned host memory are not.
bool is_device_memory(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // older runtimes report unregistered host memory as an error
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}

// The host ranges of the block-quantized matrices (q8_0, q4_0, q4_K, q5_K, q6_K), merged where views share rows (a
// tied embedding and output head, row slices of a fused tensor), so each row is repacked into the
// device layout (kernels/cuda/weight_layout.cuh) exactly once. Views that overlap without sharing
// their row grid and type are an error (no such model exists; repacking one would corrupt the other).
struct BlockRange {
  uintptr_t begin, end;
  int64_t K;
  DType type;
  uintptr_t row_bytes() const { return uintptr_t(dtype_bytes(type, size_t(K))); }
};
Result<std::vector<BlockRange>> block_ranges(const WeightSet& set) {
  std::vector<BlockRange> ranges;
  for (const Matrix& m : set.matrices) {
    if (!dtype_is_block_quant(m.dtype) || m.rows == 0) continue;
    if (m.cols % dtype_block(m.dtype) != 0)
      return Status::error(std::string("a ") + dtype_name(m.dtype) + " matrix of " + std::to_string(m.cols) +
                           " columns (not a multiple of its block)");
    const uintptr_t b = reinterpret_cast<uintptr_t>(m.data);
    ranges.push_back({b, b + m.bytes(), m.cols, m.dtype});
  }
  std::sort(ranges.begin(), ranges.end(), [](const BlockRange& a, const BlockRange& b) { return a.begin < b.begin; });
  std::vector<BlockRange> merged;
  for (const BlockRange& r : ranges) {
    if (!merged.empty() && r.begin < merged.back().end) {
      BlockRange& m = merged.back();
      if (r.K != m.K || r.type != m.type || (r.begin - m.begin) % m.row_bytes() != 0 ||
          (r.end - m.begin) % m.row_bytes() != 0)
        return Status::error("two quantized weight views overlap without sharing their rows");
      m.end = std::max(m.end, r.end);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

}  // namespace

DeviceWeights::~DeviceWeights() {
  for (void* p : allocations_) cudaFree(p);
}

Result<std::shared_ptr<DeviceWeights>> DeviceWeights::upload(const WeightSet& set) {
  struct Span {
    uintptr_t begin, end;
  };
  std::vector<Span> spans;
  for (const Matrix& m : set.matrices) {
    if (!cuda::matmul_supports(m.dtype))
      return Status::error(std::string("weight type ") + dtype_name(m.dtype) + " (a [" + std::to_string(m.rows) + ", " +
                           std::to_string(m.cols) + "] matrix) is not yet on CUDA; the CUDA backend takes bf16, "
                           "f16, f32, q8_0, q4_0, q4_K, q5_K and q6_K weights (`weft quantize IN.gguf OUT.gguf --type q4_k_m`, or "
                           "`weft convert --type bf16`)");
    const uintptr_t b = reinterpret_cast<uintptr_t>(m.data);
    spans.push_back({b, b + m.bytes()});
  }
  for (const auto& v : set.vectors) {
    const uintptr_t b = reinterpret_cast<uintptr_t>(v.data());
    spans.push_back({b, b + v.size_bytes()});
  }
  auto blocked = block_ranges(set);
  if (!blocked.ok()) return blocked.status();
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  // Merge overlapping ranges (slices of one fused tensor, tied embeddings) into one upload.
  std::vector<Span> merged;
  for (const Span& s : spans) {
    if (s.end == s.begin) continue;
    if (!merged.empty() && s.begin < merged.back().end) merged.back().end = std::max(merged.back().end, s.end);
    else merged.push_back(s);
  }
  auto w = std::make_shared<DeviceWeights>();
  for (const Span& s : merged) {
    const size_t bytes = s.end - s.begin;
    // Already on the device (a synthetic model generated there: WeightMemory): used in place, no
    // range recorded (translate returns the address itself), not freed here.
    const bool first_on_device = is_device_memory(reinterpret_cast<const void*>(s.begin));
    if (first_on_device != is_device_memory(reinterpret_cast<const void*>(s.end - 1)))
      return Status::error("a weight range is partly in GPU memory and partly not (" + std::to_string(bytes) +
                           " bytes)");
    // The block-quantized rows inside this span (the merged spans contain whole matrices).
    std::vector<BlockRange> span_blocked;
    for (const BlockRange& r : blocked.value())
      if (r.begin >= s.begin && r.end <= s.end) span_blocked.push_back(r);
    if (first_on_device) {
      if (!span_blocked.empty())
        return Status::error("quantized weights already in GPU memory (they must be uploaded from the host, "
                             "which repacks them for the kernels)");
      w->resident_bytes_ += bytes;
      continue;
    }
    void* base = nullptr;  // cudaMalloc: 256-byte aligned
    if (cudaError_t e = cudaMalloc(&base, bytes); e != cudaSuccess) {
      cudaGetLastError();
      return Status::error("out of GPU memory uploading the weights (" + std::to_string(w->bytes_ + bytes) +
                           " bytes so far): " + cudaGetErrorString(e));
    }
    w->allocations_.push_back(base);
    uint8_t* dev = static_cast<uint8_t*>(base);
    const void* src = reinterpret_cast<const void*>(s.begin);
    std::vector<uint8_t> staged;  // the span with its quantized rows in the device layout
    if (!span_blocked.empty()) {
      staged.assign(static_cast<const uint8_t*>(src), static_cast<const uint8_t*>(src) + bytes);
      for (const BlockRange& r : span_blocked) {
        const int64_t rows = int64_t((r.end - r.begin) / r.row_bytes());
        const uint8_t* from = reinterpret_cast<const uint8_t*>(r.begin);
        uint8_t* to = staged.data() + (r.begin - s.begin);
        cuda::repack_rows(r.type, from, to, rows, r.K);
      }
      src = staged.data();
    }
    if (cudaError_t e = cudaMemcpy(dev, src, bytes, cudaMemcpyHostToDevice);
        e != cudaSuccess)
      return Status::error(std::string("uploading the weights to the GPU: ") + cudaGetErrorString(e));
    w->ranges_[s.begin] = {s.end, dev};
    w->bytes_ += bytes;
  }
  return w;
}

const void* DeviceWeights::translate(const void* host) const {
  const uintptr_t h = reinterpret_cast<uintptr_t>(host);
  auto it = ranges_.upper_bound(h);
  if (it == ranges_.begin()) return host;
  --it;
  if (h >= it->second.end) return host;
  return it->second.device + (h - it->first);
}

Result<std::shared_ptr<DeviceWeights>> shared_device_weights(const void* key, const WeightSet& set) {
  // A model is identified by its weights' address plus its first matrix and counts, so a model
  // loaded later at a freed address never reuses a stale upload.
  struct Entry {
    std::weak_ptr<DeviceWeights> weights;
    const void* first = nullptr;
    size_t n_matrices = 0, n_vectors = 0;
  };
  static std::mutex mu;
  static std::map<const void*, Entry> registry;
  std::lock_guard<std::mutex> lock(mu);
  const void* first = set.matrices.empty() ? nullptr : set.matrices.front().data;
  auto it = registry.find(key);
  if (it != registry.end() && it->second.first == first && it->second.n_matrices == set.matrices.size() &&
      it->second.n_vectors == set.vectors.size())
    if (auto live = it->second.weights.lock()) return live;
  auto up = DeviceWeights::upload(set);
  if (!up.ok()) return up.status();
  registry[key] = {up.value(), first, set.matrices.size(), set.vectors.size()};
  return up.value();
}

}  // namespace weft
