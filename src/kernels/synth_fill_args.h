// SynthChunk: one chunk of a synthetic tensor's values (model/synth.cpp), the unit both generators
// fill — the host one (kernels/cpu/synth_fill.h) and the device one (kernels/cuda/synth_fill.cuh).
// Their bytes must be the same, bit for bit, so the recipe is written down once, here:
//
//   rng = xoshiro256++ whose four state words are splitmix64(seed) drawn four times;
//   for i in [0, count): r = rng.next();
//     kIrwinHall:  x = float(sum of r's four 16-bit lanes - 131070)   (exact in float)
//     kUniform:    x = float(r >> 40) * 2^-24                          (exact: a 24-bit integer)
//     kLogUniform: as kUniform, then value = log(value) (host only: std::log has no bit-exact
//                  device twin, and the tensors that use it are small host-read vectors)
//     value = offset + x * scale, a float multiply then a float add, each rounded (never an FMA);
//     dst[i] = value rounded to nearest even in `dtype` (bf16, f16 or f32).
//
// `offset` and `scale` are computed once on the host (normal: mean and std / 37837.2273; uniform:
// low and high - low), so the device never recomputes them in another order.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace weft {

// Chunks hold at most this many values; a tensor's chunk c starts at value c * kSynthChunk.
constexpr int64_t kSynthChunk = int64_t(1) << 20;

enum class SynthValues : uint8_t { kIrwinHall, kUniform, kLogUniform };

struct SynthChunk {
  uint64_t seed = 0;   // this chunk's seed (model/synth.cpp: from the tensor's stream and the chunk index)
  void* dst = nullptr; // the chunk's first value
  int64_t count = 0;   // values in the chunk, 1..kSynthChunk
  float offset = 0.0f;
  float scale = 0.0f;
  SynthValues values = SynthValues::kIrwinHall;
  DType dtype = DType::kBF16;  // kBF16, kF16 or kF32
};

}  // namespace weft
