// The host generator of synthetic weights: fills one SynthChunk (kernels/synth_fill_args.h has the
// recipe, which the device generator kernels/cuda/synth_fill.cuh follows bit for bit).
#pragma once

#include <cstdint>

#include "kernels/synth_fill_args.h"

namespace weft {

void synth_fill_chunk(const SynthChunk& chunk);

// splitmix64: advances *x and returns the next output (chunk seeds and the generator's state).
inline uint64_t splitmix64(uint64_t* x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace weft
