#include "backend/cuda/graph_recorder.h"

#include <algorithm>

#include "kernels/cuda/common.cuh"

namespace weft {
namespace {

// Graphs kept before the cache is dropped and rebuilt (each decode shape needs one per segment;
// sessions that come and go leave graphs nobody replays).
constexpr size_t kMaxGraphs = 1024;
constexpr size_t kMinArena = size_t(1) << 20;
constexpr size_t kStageAlign = 256;

// FNV-1a over 8-byte words (a signature is tens of KB per step; collisions are caught by
// comparing the whole signature).
uint64_t hash_sig(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  for (; i < s.size(); ++i) h = (h ^ uint8_t(s[i])) * 0x100000001b3ull;
  return h;
}

}  // namespace

GraphRecorder::GraphRecorder(cudaStream_t stream) : stream_(stream) {
  WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&copied_event_, cudaEventDisableTiming));
}

GraphRecorder::~GraphRecorder() {
  cudaStreamSynchronize(stream_);
  clear_graphs();
  free_retired();
  for (Arena* a : {&deferred_, &direct_}) {
    if (a->host) cudaFreeHost(a->host);
    if (a->dev) cudaFree(a->dev);
  }
  cudaEventDestroy(copied_event_);
}

void GraphRecorder::free_retired() {
  for (auto& [h, d] : retired_) {
    cudaFreeHost(h);
    cudaFree(d);
  }
  retired_.clear();
}

void GraphRecorder::clear_graphs() {
  cudaStreamSynchronize(stream_);  // no launch of a graph destroyed here is still queued
  for (auto& [h, seg] : graphs_)
    if (seg.exec) cudaGraphExecDestroy(seg.exec);
  graphs_.clear();
}

void GraphRecorder::begin(bool defer, bool graphs) {
  flush();
  // The arena is rewritten from its start: wait until its last copy to the device has been made.
  if (copy_recorded_) WEFT_CUDA_CHECK(cudaEventSynchronize(copied_event_));
  free_retired();  // cudaFree waits for the kernels that may still read them
  for (Arena* a : {&deferred_, &direct_}) a->used = a->copied = 0;
  defer_ = defer;
  capture_ = graphs;
  in_forward_ = true;
}

void GraphRecorder::end() {
  flush();
  defer_ = false;
  in_forward_ = false;
}

void GraphRecorder::op(std::function<void()> launch) {
  if (!defer_) {
    copy_staged();
    launch();
    return;
  }
  pending_.push_back(std::move(launch));
  ++op_count_;
}

void* GraphRecorder::stage(const void* host, size_t bytes, bool direct) {
  if (!in_forward_ && (deferred_.used > 0 || direct_.used > 0)) {  // outside a forward pass: reuse from the start
    if (copy_recorded_) WEFT_CUDA_CHECK(cudaEventSynchronize(copied_event_));
    for (Arena* a : {&deferred_, &direct_}) a->used = a->copied = 0;
  }
  return stage_in(direct ? direct_ : deferred_, host, bytes);
}

void* GraphRecorder::stage_in(Arena& a, const void* host, size_t bytes) {
  const size_t at = (a.used + kStageAlign - 1) / kStageAlign * kStageAlign;
  if (at + bytes > a.capacity) {
    // Grow: launch what is deferred and copy what is staged, then continue in a new arena. The
    // old one stays alive until the next begin() (an op may hold an address staged in it), and
    // device addresses change, so later segments get new signatures (and graphs).
    flush();
    if (a.host) retired_.push_back({a.host, a.dev});
    const size_t cap = std::max({kMinArena, 2 * a.capacity, 2 * (bytes + kStageAlign)});
    a.host = nullptr, a.dev = nullptr;
    WEFT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&a.host), cap));
    WEFT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&a.dev), cap));
    a.capacity = cap;
    a.used = a.copied = 0;
    return stage_in(a, host, bytes);
  }
  std::memcpy(a.host + at, host, bytes);
  a.used = at + bytes;
  return a.dev + at;
}

void GraphRecorder::copy_staged() {
  bool copied = false;
  for (Arena* a : {&deferred_, &direct_}) {
    if (a->used == a->copied) continue;
    WEFT_CUDA_CHECK(cudaMemcpyAsync(a->dev + a->copied, a->host + a->copied, a->used - a->copied,
                                    cudaMemcpyHostToDevice, stream_));
    a->copied = a->used;
    copied = true;
  }
  if (!copied) return;
  WEFT_CUDA_CHECK(cudaEventRecord(copied_event_, stream_));
  copy_recorded_ = true;
}

void GraphRecorder::run_pending() {
  for (auto& f : pending_) f();
}

void GraphRecorder::capture_and_launch(Segment& seg) {
  WEFT_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    run_pending();
  } catch (...) {
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  WEFT_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  const cudaError_t e = cudaGraphInstantiate(&seg.exec, graph, 0);
  cudaGraphDestroy(graph);
  WEFT_CUDA_CHECK(e);
  WEFT_CUDA_CHECK(cudaGraphLaunch(seg.exec, stream_));
  ++stats_.captures;
}

void GraphRecorder::flush() {
  ++op_count_;
  copy_staged();
  if (pending_.empty()) return;
  if (!capture_) {  // graphs off: the same closures, launched one by one
    run_pending();
    ++stats_.eager_segments;
    pending_.clear();
    sig_.clear();
    return;
  }
  if (graphs_.size() >= kMaxGraphs) clear_graphs();
  Segment& seg = graphs_[hash_sig(sig_)];
  if (seg.sig == sig_ && seg.exec) {
    WEFT_CUDA_CHECK(cudaGraphLaunch(seg.exec, stream_));
    ++stats_.replays;
  } else if (seg.sig == sig_ && seg.seen > 0) {
    capture_and_launch(seg);
  } else {
    // First sighting.
    run_pending();
    if (seg.exec) {  // a hash collision: the newer segment takes the slot
      WEFT_CUDA_CHECK(cudaStreamSynchronize(stream_));
      cudaGraphExecDestroy(seg.exec);
    }
    seg.exec = nullptr;
    if (seg.sig != sig_) seg.sig = sig_, seg.seen = 0;
    ++seg.seen;
    ++stats_.eager_segments;
  }
  pending_.clear();
  sig_.clear();
}

}  // namespace weft
