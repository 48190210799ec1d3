// The device generator of synthetic weights: fills SynthChunks in GPU memory with the bytes the
// host generator (kernels/cpu/synth_fill.h) writes, bit for bit (recipe: kernels/synth_fill_args.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/synth_fill_args.h"

namespace weft::cuda {

// Fills chunks[0..n) (a host array; every dst is device memory) on `stream` and waits for it.
// Chunk values must be kIrwinHall or kUniform and dtypes bf16, f16 or f32 (the caller checks).
// One thread per chunk: a chunk is one xoshiro256++ stream, sequential by nature, and 1 Mi values
// per thread keep a 35 GB model's ~33k chunks in one launch. Throws std::runtime_error on a CUDA
// error.
void synth_fill(const SynthChunk* chunks, int64_t n, cudaStream_t stream);

}  // namespace weft::cuda
