// Reference quantizers and dequantizers of the GGML weight blocks (layouts in quant_blocks.h).
#include "kernels/cpu/quant_blocks.h"

#include <cassert>
#include <cmath>
#include <cstring>

namespace weft {

namespace {

inline int round_clamp(float v, int lo, int hi) {
  // NaN compares false everywhere and lands on lo: codes stay in range whatever the input.
  if (!(v >= float(lo))) return lo;
  if (v >= float(hi)) return hi;
  return int(std::lround(v));
}


// Least-squares fit of x ≈ a*L - m with L in [0, nmax] integers and m >= 0 (the offset of q4_K /
// q5_K may only move values down, since the stored min is unsigned). Tries a few grid densities
// around the plain min/max grid and keeps the smallest squared error. Returns a >= 0 and m >= 0.
void fit_affine(const float* x, int n, int nmax, float* a_out, float* m_out) {
  float lo = 0, hi = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::fmin(lo, x[i]);
    hi = std::fmax(hi, x[i]);
  }
  lo = std::fmin(lo, 0.0f);
  if (!(hi > lo)) {  // all values equal (lo <= 0): a constant reproduced by the min alone
    *a_out = 0;
    *m_out = -lo;
    return;
  }
  float best_a = (hi - lo) / float(nmax), best_m = -lo, best_err = INFINITY;
  auto error_of = [&](float a, float m) {
    float e = 0;
    for (int i = 0; i < n; ++i) {
      const int l = a > 0 ? round_clamp((x[i] + m) / a, 0, nmax) : 0;
      const float d = a * float(l) - m - x[i];
      e += d * d;
    }
    return e;
  };
  best_err = error_of(best_a, best_m);
  int L[32];
  for (int step = -4; step <= 12; ++step) {
    const float iscale = (float(nmax) + 0.1f * float(step)) / (hi - lo);
    double sl = 0, sl2 = 0, sx = 0, sxl = 0;
    for (int i = 0; i < n; ++i) {
      L[i] = round_clamp((x[i] - lo) * iscale, 0, nmax);
      sl += L[i];
      sl2 += double(L[i]) * L[i];
      sx += x[i];
      sxl += double(x[i]) * L[i];
    }
    const double det = double(n) * sl2 - sl * sl;
    if (det <= 0) continue;
    double a = (double(n) * sxl - sl * sx) / det;
    double b = (sl2 * sx - sl * sxl) / det;  // the offset; must be <= 0
    if (b > 0) {
      b = 0;
      a = sl2 > 0 ? sxl / sl2 : 0;
    }
    if (!(a > 0)) continue;
    const float err = error_of(float(a), float(-b));
    if (err < best_err) {
      best_err = err;
      best_a = float(a);
      best_m = float(-b);
    }
  }
  *a_out = best_a;
  *m_out = best_m;
}

// Least-squares fit of x ≈ a*L with L in [-nmax, nmax-1] (q6_K); a may be negative, which lets
// the lone extra negative code cover the value of largest magnitude.
float fit_symmetric(const float* x, int n, int nmax) {
  float amax = 0, vmax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      vmax = x[i];
    }
  }
  if (!(amax > 0)) return 0;
  float best_a = vmax / float(-nmax), best_err = INFINITY;
  for (int step = -6; step <= 6; ++step) {
    const float iscale = -(float(nmax) + 0.1f * float(step)) / vmax;
    double sxl = 0, sl2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = round_clamp(x[i] * iscale, -nmax, nmax - 1);
      sxl += double(x[i]) * l;
      sl2 += double(l) * l;
    }
    if (sl2 <= 0) continue;
    const float a = float(sxl / sl2);
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const int l = a != 0 ? round_clamp(x[i] / a, -nmax, nmax - 1) : 0;
      const float d = a * float(l) - x[i];
      err += d * d;
    }
    if (err < best_err) {
      best_err = err;
      best_a = a;
    }
  }
  return best_a;
}

// Shared by q4_K and q5_K: per-sub-block (scale, min) fits quantized to 6 bits against f16
// super-block scales, then the codes L recomputed with the scales as they will be decoded.
void quantize_k4_superblock(const float* x, int nmax, uint16_t* d_out, uint16_t* dmin_out,
                            uint8_t scales[12], uint8_t L[256]) {
  float a[8], m[8], amax = 0, mmax = 0;
  for (int s = 0; s < 8; ++s) {
    fit_affine(x + 32 * s, 32, nmax, &a[s], &m[s]);
    amax = std::fmax(amax, a[s]);
    mmax = std::fmax(mmax, m[s]);
  }
  const float d = amax / 63.0f, dmin = mmax / 63.0f;
  *d_out = f32_to_f16(d);
  *dmin_out = f32_to_f16(dmin);
  const float d16 = f16_to_f32(*d_out), dmin16 = f16_to_f32(*dmin_out);
  uint8_t sc[8], mq[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = uint8_t(d16 > 0 ? round_clamp(a[s] / d16, 0, 63) : 0);
    mq[s] = uint8_t(dmin16 > 0 ? round_clamp(m[s] / dmin16, 0, 63) : 0);
    const float as = d16 * float(sc[s]), ms = dmin16 * float(mq[s]);
    for (int i = 0; i < 32; ++i) {
      L[32 * s + i] = uint8_t(as > 0 ? round_clamp((x[32 * s + i] + ms) / as, 0, nmax) : 0);
    }
  }
  pack_scales_k4(sc, mq, scales);
}

}  // namespace

void quantize_row_q4_K(const float* x, BlockQ4_K* y, int64_t n) {
  assert(n % kQK_K == 0);
  uint8_t L[256];
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    quantize_k4_superblock(x, 15, &y[b].d, &y[b].dmin, y[b].scales, L);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) y[b].qs[32 * c + l] = uint8_t(L[64 * c + l] | L[64 * c + 32 + l] << 4);
    }
  }
}

void quantize_row_q5_K(const float* x, BlockQ5_K* y, int64_t n) {
  assert(n % kQK_K == 0);
  uint8_t L[256];
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    quantize_k4_superblock(x, 31, &y[b].d, &y[b].dmin, y[b].scales, L);
    std::memset(y[b].qh, 0, sizeof(y[b].qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = L[64 * c + l], hi = L[64 * c + 32 + l];
        y[b].qs[32 * c + l] = uint8_t((lo & 0xF) | (hi & 0xF) << 4);
        y[b].qh[l] |= uint8_t(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

void quantize_row_q6_K(const float* x, BlockQ6_K* y, int64_t n) {
  assert(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float a[16], amax = 0;
    for (int s = 0; s < 16; ++s) {
      a[s] = fit_symmetric(x + 16 * s, 16, 32);
      amax = std::fmax(amax, std::fabs(a[s]));
    }
    y[b].d = f32_to_f16(amax / 127.0f);
    const float d16 = f16_to_f32(y[b].d);
    uint8_t L[256];
    for (int s = 0; s < 16; ++s) {
      y[b].scales[s] = int8_t(d16 > 0 ? round_clamp(a[s] / d16, -127, 127) : 0);
      const float as = d16 * float(y[b].scales[s]);
      for (int i = 0; i < 16; ++i) {
        L[16 * s + i] = uint8_t((as != 0 ? round_clamp(x[16 * s + i] / as, -32, 31) : 0) + 32);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const uint8_t* Lh = L + 128 * h;
      uint8_t* ql = y[b].ql + 64 * h;
      uint8_t* qh = y[b].qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = uint8_t((Lh[l] & 0xF) | (Lh[l + 64] & 0xF) << 4);
        ql[l + 32] = uint8_t((Lh[l + 32] & 0xF) | (Lh[l + 96] & 0xF) << 4);
        qh[l] = uint8_t((Lh[l] >> 4) | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 | (Lh[l + 96] >> 4) << 6);
      }
    }
  }
}

// ggml's quantize_row_q8_K_ref rule (which its x86 build uses as is, and which its repacked
// q4_K kernels reproduce), so weft and llama.cpp give the same activations the same codes and
// scale: the element of largest magnitude (the first, on ties) sets iscale = -127 / max, codes are
// iscale * x rounded half to even, the scale is 1 / iscale (negative when max > 0: the codes
// carry the opposite sign, the product is the same).
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n) {
  assert(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float amax = 0, max = 0;
    for (int i = 0; i < kQK_K; ++i) {
      const float ax = std::fabs(x[i]);
      if (ax > amax) {
        amax = ax;
        max = x[i];
      }
    }
    if (!(amax > 0) || !std::isfinite(amax)) {  // zeros (or NaN / inf input): all codes 0
      std::memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) {
        const int q = code_half_even(iscale * x[16 * g + i]);
        y[b].qs[16 * g + i] = int8_t(q);
        sum += q;
      }
      y[b].bsums[g] = int16_t(sum);
    }
    y[b].d = 1.0f / iscale;
  }
}

void dequantize_row_q4_K(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
    uint8_t sc[8], m[8];
    unpack_scales_k4(x[b].scales, sc, m);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = x[b].qs + 32 * c;
      const float d1 = d * float(sc[2 * c]), m1 = dmin * float(m[2 * c]);
      const float d2 = d * float(sc[2 * c + 1]), m2 = dmin * float(m[2 * c + 1]);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void dequantize_row_q5_K(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
    uint8_t sc[8], m[8];
    unpack_scales_k4(x[b].scales, sc, m);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = x[b].qs + 32 * c;
      const float d1 = d * float(sc[2 * c]), m1 = dmin * float(m[2 * c]);
      const float d2 = d * float(sc[2 * c + 1]), m2 = dmin * float(m[2 * c + 1]);
      for (int l = 0; l < 32; ++l) {
        *y++ = d1 * float((q[l] & 0xF) | ((x[b].qh[l] >> (2 * c)) & 1) << 4) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *y++ = d2 * float((q[l] >> 4) | ((x[b].qh[l] >> (2 * c + 1)) & 1) << 4) - m2;
      }
    }
  }
}

void dequantize_row_q6_K(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = f16_to_f32(x[b].d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = x[b].ql + 64 * h;
      const uint8_t* qh = x[b].qh + 32 * h;
      const int8_t* sc = x[b].scales + 8 * h;
      float* yh = y + 256 * b + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int q0 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
        const int q1 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
        const int q2 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
        const int q3 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
        // Element 32i + l belongs to sub-block (32i + l) / 16 of this half.
        const int s = l / 16;
        yh[l] = d * float(sc[s]) * float(q0);
        yh[l + 32] = d * float(sc[s + 2]) * float(q1);
        yh[l + 64] = d * float(sc[s + 4]) * float(q2);
        yh[l + 96] = d * float(sc[s + 6]) * float(q3);
      }
    }
  }
}

void dequantize_row_q8_K(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    for (int i = 0; i < kQK_K; ++i) *y++ = x[b].d * float(x[b].qs[i]);
  }
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  switch (type) {
    case GgmlType::kF32: std::memcpy(dst, src, size_t(n) * 4); break;
    case GgmlType::kF16:
    case GgmlType::kBF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = type == GgmlType::kF16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
      break;
    }
    case GgmlType::kQ8_0: quantize_row_q8_0(src, static_cast<BlockQ8_0*>(dst), n); break;
    case GgmlType::kQ4_0: quantize_row_q4_0(src, static_cast<BlockQ4_0*>(dst), n); break;
    case GgmlType::kQ4_K: quantize_row_q4_K(src, static_cast<BlockQ4_K*>(dst), n); break;
    case GgmlType::kQ5_K: quantize_row_q5_K(src, static_cast<BlockQ5_K*>(dst), n); break;
    case GgmlType::kQ6_K: quantize_row_q6_K(src, static_cast<BlockQ6_K*>(dst), n); break;
    case GgmlType::kQ8_K: quantize_row_q8_K(src, static_cast<BlockQ8_K*>(dst), n); break;
  }
}

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case GgmlType::kF32: std::memcpy(dst, src, size_t(n) * 4); break;
    case GgmlType::kF16:
    case GgmlType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = type == GgmlType::kF16 ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
      break;
    }
    case GgmlType::kQ8_0: dequantize_row_q8_0(static_cast<const BlockQ8_0*>(src), dst, n); break;
    case GgmlType::kQ4_0: dequantize_row_q4_0(static_cast<const BlockQ4_0*>(src), dst, n); break;
    case GgmlType::kQ4_K: dequantize_row_q4_K(static_cast<const BlockQ4_K*>(src), dst, n); break;
    case GgmlType::kQ5_K: dequantize_row_q5_K(static_cast<const BlockQ5_K*>(src), dst, n); break;
    case GgmlType::kQ6_K: dequantize_row_q6_K(static_cast<const BlockQ6_K*>(src), dst, n); break;
    case GgmlType::kQ8_K: dequantize_row_q8_K(static_cast<const BlockQ8_K*>(src), dst, n); break;
  }
}

}  // namespace weft
