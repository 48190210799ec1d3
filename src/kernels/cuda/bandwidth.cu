#include "kernels/cuda/bandwidth.cuh"

#include <algorithm>

#include "kernels/cuda/common.cuh"

namespace weft::cuda {

namespace {

// Grid-stride read of n 16-byte words; each block leaves one word so the reads have a use.
__global__ void read_kernel(const uint4* __restrict__ p, size_t n, uint32_t* __restrict__ sink) {
  uint32_t acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  acc = block_sum(acc);  // a fixed tree; only its existence matters here
  if (threadIdx.x == 0) sink[blockIdx.x] = acc;
}

// Device memory freed on every path out (a failed check throws).
struct DeviceArray {
  void* p = nullptr;
  explicit DeviceArray(size_t bytes) { WEFT_CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~DeviceArray() { cudaFree(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
};

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    WEFT_CUDA_CHECK(cudaEventCreate(&start));
    WEFT_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  // Seconds between the two events after they complete.
  double seconds() {
    WEFT_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    WEFT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return double(ms) * 1e-3;
  }
};

}  // namespace

DeviceBandwidth measure_device_bandwidth(size_t bytes, int trials, cudaStream_t stream) {
  int device = 0, l2 = 0, sms = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  DeviceBandwidth r;
  r.cache_bytes = size_t(l2);
  r.buffer_bytes = std::max({bytes, size_t(8) * size_t(l2), size_t(1) << 30}) & ~size_t(15);
  r.trials = std::max(1, trials);
  r.kernel = "cuda";
  DeviceArray a(r.buffer_bytes), b(r.buffer_bytes);
  const int threads = 256, blocks = sms * 8;  // enough loads in flight to cover DRAM latency
  DeviceArray sink(size_t(blocks) * sizeof(uint32_t));
  WEFT_CUDA_CHECK(cudaMemsetAsync(a.p, 1, r.buffer_bytes, stream));
  WEFT_CUDA_CHECK(cudaMemsetAsync(b.p, 2, r.buffer_bytes, stream));
  Events ev;
  double best_copy = 1e300, best_read = 1e300;
  for (int t = -1; t < r.trials; ++t) {  // trial -1 warms up (first-touch, clocks)
    WEFT_CUDA_CHECK(cudaEventRecord(ev.start, stream));
    WEFT_CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, r.buffer_bytes, cudaMemcpyDeviceToDevice, stream));
    WEFT_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
    const double copy = ev.seconds();
    WEFT_CUDA_CHECK(cudaEventRecord(ev.start, stream));
    read_kernel<<<blocks, threads, 0, stream>>>(static_cast<const uint4*>(a.p), r.buffer_bytes / 16,
                                                static_cast<uint32_t*>(sink.p));
    WEFT_CUDA_LAUNCHED();
    WEFT_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
    const double read = ev.seconds();
    if (t < 0) continue;
    best_copy = std::min(best_copy, copy);
    best_read = std::min(best_read, read);
  }
  r.copy_gb_s = 2.0 * double(r.buffer_bytes) / best_copy * 1e-9;  // read + write, as STREAM counts a copy
  r.read_gb_s = double(r.buffer_bytes) / best_read * 1e-9;
  return r;
}

}  // namespace weft::cuda
