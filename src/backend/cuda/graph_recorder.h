// GraphRecorder: the CUDA backend's launches of one forward pass, deferred into segments and
// replayed as CUDA graphs.
//
// Why: a decode step of a 40-layer MoE model is ~1,000 small kernels; launched one by one the
// step is bound by launch cost, not by bytes. Captured once and replayed, a segment of hundreds of
// kernels costs one launch.
//
// How: between begin() and end() each op appends its *signature* (an op tag plus every argument
// its kernels are launched with: pointers, sizes, scalars) and a closure that launches it. Host
// arrays an op needs (token ids, positions, row lists, the grouped matmul's job table) are staged
// into one pinned arena and reach the device by one copy before the segment runs; kernels read
// them at fixed device offsets, so new contents need no new graph. An op whose launch arguments
// change every step (KV append and attention: their position and page count are arguments) is not
// deferred: it ends the segment (flush) and runs directly, so one graph per segment serves every
// step of the same shape. At flush, a segment whose signature was seen before is replayed from its
// graph; seen once before without a graph, it is captured now (stream capture of the same
// closures) and launched; never seen, it runs eagerly (one-off shapes such as prefill chunks are
// never captured). Equal signatures mean equal launches, so a replay computes exactly what the
// eager launches would: same kernels, same arguments, same bits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace weft {

class GraphRecorder {
 public:
  struct Stats {
    int64_t replays = 0, captures = 0, eager_segments = 0;
  };

  explicit GraphRecorder(cudaStream_t stream);
  ~GraphRecorder();
  GraphRecorder(const GraphRecorder&) = delete;
  GraphRecorder& operator=(const GraphRecorder&) = delete;

  // Starts a forward pass; `defer` false runs every op at once (as outside a forward pass).
  // `graphs` false still defers (so the backend merges and fuses exactly as with graphs) but
  // runs every segment's closures eagerly instead of capturing them.
  void begin(bool defer, bool graphs = true);
  // Launches what is still deferred; ops run at once again.
  void end();
  bool deferring() const { return defer_; }

  // Appends trivially copyable values to the current op's signature (no-op when not deferring).
  class Sig {
   public:
    explicit Sig(std::string* s) : s_(s) {}
    template <typename T>
    Sig& operator<<(const T& v) {
      static_assert(std::is_trivially_copyable_v<T> && !std::is_class_v<T>, "signature fields are scalars/pointers");
      if (s_) s_->append(reinterpret_cast<const char*>(&v), sizeof v);
      return *this;
    }

   private:
    std::string* s_;
  };
  Sig sig() { return Sig(defer_ ? &sig_ : nullptr); }
  // Runs `launch` (kernel launches only) now, or defers it into the current segment.
  void op(std::function<void()> launch);
  // Copies `bytes` of host memory to the device before the next launch; returns the device copy,
  // valid until the next begin(). Ops that run at once (not deferred) stage with `direct`: their
  // sizes vary from step to step (page tables) and must not move the deferred ops' offsets.
  void* stage(const void* host, size_t bytes, bool direct = false);
  // Launches every deferred op (and copies what is staged). Ops that must run now, and anything
  // about to free device memory a deferred op may read, call this first.
  void flush();

  const Stats& stats() const { return stats_; }
  // Identifies the last deferred op: it changes with every op deferred and every flush, so an
  // op may extend its predecessor (see CudaBackend::matmul) only while this is unchanged.
  uint64_t last_op_id() const { return defer_ ? op_count_ : 0; }

 private:
  struct Segment {
    std::string sig;
    int seen = 0;
    cudaGraphExec_t exec = nullptr;
  };
  // Pinned host bytes and their device twin; [copied, used) not yet copied.
  struct Arena {
    uint8_t* host = nullptr;
    uint8_t* dev = nullptr;
    size_t capacity = 0, used = 0, copied = 0;
  };
  void* stage_in(Arena& a, const void* host, size_t bytes);
  void copy_staged();
  void run_pending();
  void capture_and_launch(Segment& seg);
  void clear_graphs();
  void free_retired();

  cudaStream_t stream_;
  bool defer_ = false, capture_ = true, in_forward_ = false;
  std::string sig_;
  std::vector<std::function<void()>> pending_;
  uint64_t op_count_ = 1;
  std::unordered_map<uint64_t, Segment> graphs_;
  Arena deferred_, direct_;
  std::vector<std::pair<uint8_t*, uint8_t*>> retired_;  // outgrown arenas (host, device)
  cudaEvent_t copied_event_ = nullptr;  // the last staging copy: host_ is reusable after it
  bool copy_recorded_ = false;
  Stats stats_;
};

}  // namespace weft
