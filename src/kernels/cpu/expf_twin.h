// The softmax's exp, vectorised bit for bit: glibc's expf as this process runs it (the FMA
// variant that glibc >= 2.28 picks on AVX2 + FMA machines), computed 8 or 16 lanes at a time.
//
// Why: the strict tier's outputs carry libm's expf bits (the frozen attention kernel calls
// std::exp once per score), so the prefill attention must too, and one libm call per (query,
// key, head) was ~13% of the shipped model's 4096-token prefill (softmax loop + __expf_fma).
//
// The algorithm is the published one of glibc's e_expf.c (from Arm's optimized-routines):
// x in double, k = round(x · 32/ln2) by adding 0x1.8p52, r = x · 32/ln2 − k, 2^(k/32) from a
// 32-entry table of 2^(i/32) with k's high bits added to the exponent, a degree-3 polynomial in
// r, and one rounding to float at the end; the FMA variant contracts exactly the five products
// named in expf_twin_*.cpp. Inputs of magnitude >= 88 (over/underflow, inf, NaN) are rare in a
// softmax and go through std::exp itself.
//
// Trust, not assumption: exp_sub_inplace uses the vector twin only after expf_twin_matches_libm()
// has compared it with std::exp on ~1.7 M inputs (every exponent, both signs, the softmax range
// densely); a libm that computes other bits keeps the scalar calls. expf_twin_test compares
// both twins with std::exp on a stride over all 2^32 inputs (and on all of them, disabled).
#pragma once

#include <cstdint>

namespace weft {

// s[j] = std::exp(s[j] - m) for j < n, with the same bits as that scalar loop.
void exp_sub_inplace(float* s, int64_t n, float m);
// The scalar form (std::exp), for the scalar twins and tests.
void exp_sub_inplace_scalar(float* s, int64_t n, float m);
// x[i] = silu(x[i]) = x[i] / (1 + expf(-x[i])) for i < n, ops.h's silu bit for bit.
void silu_inplace(float* x, int64_t n);

// Whether the vector twin reproduces this process's std::exp (checked once, then cached).
bool expf_twin_matches_libm();

// The raw twins: y[i] = expf(x[i]) (x == y allowed). AVX2 + FMA / AVX-512F; callers check
// use_avx2() / use_avx512().
void expf_twin_avx2(const float* x, float* y, int64_t n);
void expf_twin_avx512(const float* x, float* y, int64_t n);
// s[j] = expf(s[j] - m), j < n.
void exp_sub_avx2(float* s, int64_t n, float m);
void exp_sub_avx512(float* s, int64_t n, float m);

}  // namespace weft
