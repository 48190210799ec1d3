// Orthonormal fast Walsh–Hadamard transform, used to rotate q/k/v heads of quantized KV caches.
//
// H_n = H_1 ⊗ ... ⊗ H_1 / sqrt(n) with H_1 = [[1, 1], [1, -1]] (Sylvester order, n a power of two).
// It is symmetric and orthogonal, so H = Hᵀ = H⁻¹: applying it twice gives the input back, and
// dot products are preserved, (Hq)·(Hk) = q·k. It spreads an outlier channel over all n values,
// which lowers the per-block max that q8_0 / q4_0 scales to (see kv_quant.h).
// Runs per token per head (O(n log n)), never on the attention hot path, so plain scalar code.
#pragma once

#include <cstdint>

namespace weft {

// True for n = 1, 2, 4, ...: the sizes fwht accepts.
inline bool fwht_size_ok(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// x <- H_n x in place. n must satisfy fwht_size_ok.
void fwht(float* x, int64_t n);
// Applies fwht to `rows` consecutive rows of n values each.
void fwht_rows(float* x, int64_t rows, int64_t n);

}  // namespace weft
