// AVX-512 VNNI primitives of the quantized-KV attention kernel (attention_quant.h), chosen where
// weft::use_avx512_vnni(). Bit-identical to the AVX2 set and the scalar twins:
//  * K scores, lanes = heads: each key block made unsigned (q8_0: +128 by an xor; q4_0: the
//    nibbles) and broadcast 4 codes at a time into one vpdpbusd against those 4 codes of all 8
//    heads (the query tile's qt layout), starting from the tile's bias (-128·Σq or -8·Σq), so
//    each lane ends with that head's exact signed dot; then the AVX2 set's cvt and fma per block.
//    Two keys per pass in 512-bit registers (lanes 8-15 the second key's heads): 8 vpdpbusd per
//    block for two keys and 8 heads.
//  * p·v: one 512-bit register holds 16 dims of one head, and all heads of a GQA group (up to 8)
//    stay in registers over the tile's rows, so each V row is loaded once per 16 dims instead of
//    once per 4 heads. Every acc[i][d] still takes fma(p[i][j], v[j][d], acc[i][d]) in j order:
//    the vector width does not touch an element's order.
//  * Quantized V: p·v in integers (pv_quant): per key pair the two rows' codes interleaved and
//    widened once for the group, then vpdpwssd per head, 32 exact products an instruction against
//    the f32 form's 16 fmas (the f32 tile remains for f16 V).
//  * The softmax exps 16 at a time (exp_sum, the AVX2 twin's operations and sum order); rows are
//    otherwise decoded and f16 keys dotted by the AVX2 primitives (the same functions).
// Measured with tools/attention_quant_bench (docs/results.md section 13).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/attention_quant.h"
#include "kernels/cpu/kv_quant.h"

namespace weft {

namespace {

inline __m256i load32(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Scores of up to 8 heads (one tile) against two key rows, lanes = heads: lanes 0-7 are key a's
// 8 heads, lanes 8-15 key b's. Per block each key's 32 codes are made unsigned (q8_0: + 128 as an
// xor; q4_0: the nibbles); each 4-code group of both keys is picked by one vpermd and meets the
// same 4 codes of all 8 heads in one vpdpbusd, starting from the tile's bias (-128·Σq or -8·Σq),
// so the lanes end with the exact signed dot of each head. Two chains of four (integer: exact
// whichever way they are summed), then the scalar twin's one fma per block. A lone last key runs
// as both a and b (its upper lanes are dropped).
inline __m512i key_codes(const uint8_t* row_a, const uint8_t* row_b, int64_t b, bool q4, float* dk_a, float* dk_b) {
  __m256i ka, kb;
  if (q4) {
    const BlockQ4_0& a = reinterpret_cast<const BlockQ4_0*>(row_a)[b];
    const BlockQ4_0& c = reinterpret_cast<const BlockQ4_0*>(row_b)[b];
    const __m128i low4 = _mm_set1_epi8(0x0f);
    const __m128i ra = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.qs));
    const __m128i rc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c.qs));
    ka = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(ra, 4), low4), _mm_and_si128(ra, low4));
    kb = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(rc, 4), low4), _mm_and_si128(rc, low4));
    *dk_a = _cvtsh_ss(a.d);
    *dk_b = _cvtsh_ss(c.d);
  } else {
    const BlockQ8_0& a = reinterpret_cast<const BlockQ8_0*>(row_a)[b];
    const BlockQ8_0& c = reinterpret_cast<const BlockQ8_0*>(row_b)[b];
    ka = _mm256_xor_si256(load32(a.qs), _mm256_set1_epi8(char(0x80)));
    kb = _mm256_xor_si256(load32(c.qs), _mm256_set1_epi8(char(0x80)));
    *dk_a = _cvtsh_ss(a.d);
    *dk_b = _cvtsh_ss(c.d);
  }
  return _mm512_inserti64x4(_mm512_castsi256_si512(ka), kb, 1);
}

template <bool kQ4>
inline __m512 scores_tile2(const uint8_t* row_a, const uint8_t* row_b, const AttnQTile* tile, int64_t nb) {
  // idx[c]: dword c of key a's codes in lanes 0-7, dword 8 + c (key b's) in lanes 8-15.
  __m512i idx[8];
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c)
    idx[c] = _mm512_inserti64x4(_mm512_set1_epi32(c), _mm256_set1_epi32(8 + c), 1);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const AttnQTile& t = tile[b];
    float dk_a, dk_b;
    const __m512i ku = key_codes(row_a, row_b, b, kQ4, &dk_a, &dk_b);
    __m512i d0 = _mm512_broadcast_i64x4(load32(kQ4 ? t.bias8 : t.bias128)), d1 = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      d0 = _mm512_dpbusd_epi32(d0, _mm512_permutexvar_epi32(idx[c], ku), _mm512_broadcast_i64x4(load32(t.qt[c])));
      d1 = _mm512_dpbusd_epi32(d1, _mm512_permutexvar_epi32(idx[c + 4], ku),
                               _mm512_broadcast_i64x4(load32(t.qt[c + 4])));
    }
    const __m256 dq = _mm256_loadu_ps(t.d);
    const __m512 scale = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_mul_ps(dq, _mm256_set1_ps(dk_a))),
                                            _mm256_mul_ps(dq, _mm256_set1_ps(dk_b)), 1);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(d0, d1)), scale, acc);
  }
  return acc;
}

template <bool kQ4>
void scores_rows(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const AttnGroupQuery& q, float scale,
                 float* s) {
  alignas(64) float out[16];
  // Each key brings in the row kPrefetchKeys ahead (spread_prefetch.h says why: not as a burst),
  // and the first kVFirstRows keys the V rows p·v reads first (its first tile; it prefetches the
  // rest itself). Row addresses come a run at a time (k_rows: no division per key).
  constexpr int64_t kPrefetchKeys = 16, kVFirstRows = kAttnPvKeys, kRun = 256;
  const uint8_t* k_run[kRun + kPrefetchKeys];
  const uint8_t* v_first[kVFirstRows];
  const int64_t nv = std::min(kVFirstRows, n);
  kv.v_rows(g, k0, nv, v_first);
  int64_t j_run = -kRun;
  auto row_of = [&](int64_t j) {
    if (j >= j_run + kRun) {
      j_run = j;
      kv.k_rows(g, k0 + j, std::min(kRun + kPrefetchKeys, n - j), k_run);
    }
    return k_run[j - j_run];
  };
  auto prefetch_for = [&](int64_t j) {
    if (j + kPrefetchKeys < n) {
      const char* ahead = reinterpret_cast<const char*>(k_run[j - j_run + kPrefetchKeys]);
      for (size_t b = 0; b < kv.k_row_bytes; b += 64) __builtin_prefetch(ahead + b, 0, 2);
    }
    if (j < nv) {
      const char* v = reinterpret_cast<const char*>(v_first[j]);
      for (size_t b = 0; b < kv.v_row_bytes; b += 64) __builtin_prefetch(v + b, 0, 2);
    }
  };
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = row_of(j);
    prefetch_for(j);
    const bool pair = j + 1 < n;
    const uint8_t* row_b = row;
    if (pair) {
      row_b = row_of(j + 1);
      prefetch_for(j + 1);
    }
    for (int64_t h0 = 0; h0 < q.group; h0 += 8) {
      _mm512_store_ps(out, _mm512_mul_ps(scores_tile2<kQ4>(row, row_b, q.tiles + (h0 / 8) * q.nb, q.nb),
                                         _mm512_set1_ps(scale)));
      for (int64_t h = 0; h < 8 && h0 + h < q.group; ++h) {
        s[(h0 + h) * n + j] = out[h];
        if (pair) s[(h0 + h) * n + j + 1] = out[8 + h];
      }
    }
    if (pair) ++j;
  }
}

void scores(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const AttnGroupQuery& q, float scale, float* s) {
  if (kv.k_type == DType::kQ4_0) scores_rows<true>(kv, g, k0, n, q, scale, s);
  else scores_rows<false>(kv, g, k0, n, q, scale, s);
}

// attn_exp (attention_quant.h) on 16 lanes: the AVX2 twin's operations in its order (max_ps keeps
// its second operand for NaN; roundscale to nearest = round_ps to nearest; cvtps_epi32 rounds to
// nearest under the default MXCSR, as the 256-bit one does).
inline __m512 attn_exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(kAttnExpMin));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kAttnLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kAttnLn2Hi), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kAttnLn2Lo), r);
  __m512 p = _mm512_set1_ps(kAttnExpP[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kAttnExpP[i]));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(y, _mm512_castsi512_ps(bits));
}

// exp_sum's contract (attention_quant.h) with the exps 16 at a time: the 8-lane sum takes the low
// half, then the high half (groups of 8 in order, as the AVX2 twin adds them); a lone last group of
// 8 and the tail go to the AVX2 twin's code path, which continues the same sum.
float exp_sum(float* x, int64_t n, float m) {
  const __m512 vm = _mm512_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 e = attn_exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), vm));
    _mm512_storeu_ps(x + j, e);
    acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
    acc = _mm256_add_ps(acc, _mm512_extractf32x8_ps(e, 1));
  }
  if (j + 8 <= n) {
    const __m256 e = _mm512_castps512_ps256(attn_exp16(_mm512_castps256_ps512(_mm256_sub_ps(_mm256_loadu_ps(x + j), _mm256_set1_ps(m)))));
    _mm256_storeu_ps(x + j, e);
    acc = _mm256_add_ps(acc, e);
    j += 8;
  }
  // The lanes reduced (0+4)+(2+6) + (1+5)+(3+7), as the twins do, then the tail in order.
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  float sum = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  for (; j < n; ++j) {
    x[j] = attn_exp(x[j] - m);
    sum += x[j];
  }
  return sum;
}

// NH heads x 16 dims in 512-bit registers across the tile's rows.
template <int NH>
void accumulate_v_tile(const float* v, int64_t n, const float* p, int64_t p_stride, int64_t hd, float* acc) {
  for (int64_t d = 0; d < hd; d += 16) {
    __m512 a[NH];
#pragma GCC unroll 8
    for (int i = 0; i < NH; ++i) a[i] = _mm512_loadu_ps(acc + i * hd + d);
    for (int64_t j = 0; j < n; ++j) {
      const __m512 vj = _mm512_loadu_ps(v + j * hd + d);
#pragma GCC unroll 8
      for (int i = 0; i < NH; ++i) a[i] = _mm512_fmadd_ps(_mm512_set1_ps(p[i * p_stride + j]), vj, a[i]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < NH; ++i) _mm512_storeu_ps(acc + i * hd + d, a[i]);
  }
}

void accumulate_v(const float* v, int64_t n, const float* p, int64_t p_stride, int64_t group, int64_t hd, float* acc) {
  for_head_tiles<8>(group, [&](int64_t h, auto nh) {
    accumulate_v_tile<decltype(nh)::value>(v, n, p + h * p_stride, p_stride, hd, acc + h * hd);
  });
}

// pv_quant (attention_quant.h) for NH <= 8 heads. Per 64-key tile: each head's largest p and its
// scale factor (lanes = heads); per 32-value block: the rows' scales (lanes = keys), the block's
// factor, and per head the keys' 16-bit weights (p read in place, lanes = keys) packed two keys to
// a dword by vpackssdw, whose order is fixed (pack_slot_key); the rows are walked in that order.
// Per slot the two rows' 32 codes are interleaved (a, b, a, b, ..) and widened to 16 bits once for
// all heads, then per head two vpdpwssd against the slot's (w_a, w_b) broadcast: 32 exact products
// each. The int32 sums hold dims [0..7, 16..23] and [8..15, 24..31]; the tile's fma puts them back.
template <bool kQ4>
inline __m256i v_codes32(const uint8_t* row, int64_t b) {
  if constexpr (kQ4) {
    const BlockQ4_0& v = reinterpret_cast<const BlockQ4_0*>(row)[b];
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v.qs)), low4 = _mm_set1_epi8(0x0f);
    const __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low4), _mm_and_si128(raw, low4));
    return _mm256_sub_epi8(nib, _mm256_set1_epi8(8));
  } else {
    return load32(reinterpret_cast<const BlockQ8_0*>(row)[b].qs);
  }
}

// vpackssdw(a = keys 0-15, b = keys 16-31) puts, per 128-bit lane L, a's 4L..4L+3 then b's: dword
// s of the result holds the weights of keys pack_slot_key(s) and pack_slot_key(s) + 1.
constexpr int pack_slot_key(int s) { return s % 4 < 2 ? 4 * (s / 4) + 2 * (s % 4) : 16 + 4 * (s / 4) + 2 * (s % 4 - 2); }

// acc += the 16 dword lanes' pair products of v and w (vpdpwssd). In asm so that acc is updated in
// its register: with the intrinsic GCC 12 copied all 16 accumulators each iteration (vmovdqa32 x 16
// per key pair, perf annotate), about as many instructions as the products themselves.
inline __m512i dpwssd_in_place(__m512i acc, __m512i v, __m512i w) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(v), "v"(w));
  return acc;
}
// The (w_a, w_b) weights of slot s, one dword.
inline int32_t slot_weights(const int16_t* w, int64_t s) {
  int32_t x;
  std::memcpy(&x, w + 2 * s, 4);
  return x;
}

template <bool kQ4, int NH>
void pv_quant_heads(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const float* p, int64_t p_stride,
                    float* acc) {
  constexpr int64_t kT = kAttnPvKeys, kQ = kT / 16;
  constexpr size_t kBlock = kQ4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  const int64_t hd = kv.head_dim, nb = hd / 32;
  const uint8_t* rows[kT];
  const uint8_t* next[kT];
  const uint8_t* slot_rows[kT];   // rows in slot order (keys past the tile: row 0, weight 0)
  constexpr int64_t kMaxBlocks = 16;  // blocks whose scales are gathered at once (head_dim 512)
  alignas(64) uint16_t dh[kMaxBlocks][kT];  // the tile's block scales (f16), [block][key]
  alignas(64) int16_t w[NH][kT];  // per head the keys' 16-bit weights, in slot order
  alignas(32) float h_inv[8], h_out[8], inv[8], out[8];
  const int64_t n0 = std::min(kT, n);
  kv.v_rows(g, k0, n0, next);
  for (int64_t j0 = 0; j0 < n; j0 += kT) {
    const int64_t nt = std::min(kT, n - j0), nn = std::min(kT, n - j0 - nt), nq = (nt + 15) / 16;
    const int64_t n_slots = 16 * ((nt + 31) / 32);
    std::copy(next, next + nt, rows);
    if (nn > 0) kv.v_rows(g, k0 + j0 + nt, nn, next);
    // Rows past the keys prefetch their own blocks (in cache), so the loop below has no branch.
    for (int64_t j = nn; j < kT; ++j) next[j] = rows[j < nt ? j : 0];
    for (int64_t s = 0; s < n_slots; ++s) {
      const int64_t key = 32 * (s / 16) + pack_slot_key(int(s % 16));
      slot_rows[2 * s] = key < nt ? rows[key] : rows[0];
      slot_rows[2 * s + 1] = key + 1 < nt ? rows[key + 1] : rows[0];
    }
    __mmask16 live[kQ];
#pragma GCC unroll 4
    for (int64_t q = 0; q < kQ; ++q)
      live[q] = q < nq ? _cvtu32_mask16(uint32_t(0xffffull >> std::max<int64_t>(0, 16 * q + 16 - nt))) : 0;
    // Each head's largest p over the tile (max_ps(p, m) is std::max(m, p)), then its factor.
    alignas(32) float ph[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma GCC unroll 8
    for (int i = 0; i < NH; ++i) {
      __m512 m = _mm512_setzero_ps();
#pragma GCC unroll 4
      for (int64_t q = 0; q < kQ; ++q) m = _mm512_max_ps(_mm512_maskz_loadu_ps(live[q], p + i * p_stride + j0 + 16 * q), m);
      ph[i] = _mm512_reduce_max_ps(m);
    }
    {
      const __m256 pm = _mm256_load_ps(ph), big = _mm256_set1_ps(32767.0f);
      const __m256 ok = _mm256_cmp_ps(pm, _mm256_set1_ps(kAttnPvFloor), _CMP_GE_OQ);
      _mm256_store_ps(h_inv, _mm256_and_ps(ok, _mm256_div_ps(big, pm)));
      _mm256_store_ps(h_out, _mm256_and_ps(ok, _mm256_div_ps(pm, big)));
    }
    for (int64_t b = 0; b < nb; ++b) {
      // The block scales of the tile's rows, gathered for up to kMaxBlocks blocks a row at a time
      // (one row pointer per row, not per row and block); keys past the tile get scale 0.
      if (b % kMaxBlocks == 0) {
        const int64_t nbg = std::min(kMaxBlocks, nb - b);
        for (int64_t j = 0; j < kT; ++j) {
          const uint8_t* row = rows[j < nt ? j : 0];
          for (int64_t c = 0; c < nbg; ++c)
            dh[c][j] = j >= nt ? uint16_t(0)
                       : kQ4 ? reinterpret_cast<const BlockQ4_0*>(row)[b + c].d
                             : reinterpret_cast<const BlockQ8_0*>(row)[b + c].d;
        }
      }
      const uint16_t* dhb = dh[b % kMaxBlocks];
      __m512 d[kQ];
      __m512 dmax = _mm512_setzero_ps();
#pragma GCC unroll 4
      for (int64_t q = 0; q < kQ; ++q) {
        d[q] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dhb + 16 * q)));
        dmax = _mm512_max_ps(_mm512_abs_ps(d[q]), dmax);
      }
      const AttnPvScale blk = attn_pv_block_scale(_mm512_reduce_max_ps(dmax));
      _mm256_store_ps(inv, _mm256_mul_ps(_mm256_load_ps(h_inv), _mm256_set1_ps(blk.inv)));
      _mm256_store_ps(out, _mm256_mul_ps(_mm256_load_ps(h_out), _mm256_set1_ps(blk.out)));
      // The 16-bit weights of each head: (p·d)·inv over the tile's keys, two keys to a dword.
#pragma GCC unroll 8
      for (int i = 0; i < NH; ++i) {
        const float* pi = p + i * p_stride + j0;
        const __m512 vi = _mm512_set1_ps(inv[i]);
        auto weights = [&](int64_t q) {
          const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(live[q], pi + 16 * q), d[q]);
          return _mm512_cvtps_epi32(_mm512_mul_ps(x, vi));
        };
#pragma GCC unroll 2
        for (int64_t q = 0; q < kQ; q += 2)
          _mm512_store_si512(reinterpret_cast<__m512i*>(w[i] + 16 * q), _mm512_packs_epi32(weights(q), weights(q + 1)));
      }
      __m512i a0[NH], a1[NH];
#pragma GCC unroll 8
      for (int i = 0; i < NH; ++i) a0[i] = a1[i] = _mm512_setzero_si512();
      auto slot = [&](const __m256i ca, const __m256i cb, int64_t s) {
        const __m512i v0 = _mm512_cvtepi8_epi16(_mm256_unpacklo_epi8(ca, cb));  // dims 0-7, 16-23
        const __m512i v1 = _mm512_cvtepi8_epi16(_mm256_unpackhi_epi8(ca, cb));  // dims 8-15, 24-31
#pragma GCC unroll 8
        for (int i = 0; i < NH; ++i) {
          const __m512i wi = _mm512_set1_epi32(slot_weights(w[i], s));
          a0[i] = dpwssd_in_place(a0[i], v0, wi);
          a1[i] = dpwssd_in_place(a1[i], v1, wi);
        }
      };
      // Block b of the next tile's rows is brought in two rows per slot (past the keys: their own).
      for (int64_t s = 0; s < n_slots; ++s) {
        __builtin_prefetch(next[2 * s] + kBlock * size_t(b), 0, 3);
        __builtin_prefetch(next[2 * s + 1] + kBlock * size_t(b), 0, 3);
        slot(v_codes32<kQ4>(slot_rows[2 * s], b), v_codes32<kQ4>(slot_rows[2 * s + 1], b), s);
      }
#pragma GCC unroll 8
      for (int i = 0; i < NH; ++i) {
        const __m512 f0 = _mm512_cvtepi32_ps(a0[i]), f1 = _mm512_cvtepi32_ps(a1[i]);
        const __m512 o = _mm512_set1_ps(out[i]);
        float* dst = acc + i * hd + 32 * b;
        _mm512_storeu_ps(dst, _mm512_fmadd_ps(_mm512_shuffle_f32x4(f0, f1, 0x44), o, _mm512_loadu_ps(dst)));
        _mm512_storeu_ps(dst + 16, _mm512_fmadd_ps(_mm512_shuffle_f32x4(f0, f1, 0xee), o, _mm512_loadu_ps(dst + 16)));
      }
    }
  }
}

void pv_quant(const KvLayerView& kv, int64_t g, int64_t k0, int64_t n, const float* p, int64_t p_stride,
              int64_t group, float* acc) {
  const int64_t hd = kv.head_dim;
  const bool q4 = kv.v_type == DType::kQ4_0;
  for_head_tiles<8>(group, [&](int64_t h, auto nh) {
    constexpr int NH = decltype(nh)::value;
    if (q4) pv_quant_heads<true, NH>(kv, g, k0, n, p + h * p_stride, p_stride, acc + h * hd);
    else pv_quant_heads<false, NH>(kv, g, k0, n, p + h * p_stride, p_stride, acc + h * hd);
  });
}

}  // namespace

const AttnQuantOps& attn_quant_ops_avx512() {
  static const AttnQuantOps ops = {scores, exp_sum, attn_quant_ops_avx2().load_row,
                                   attn_quant_ops_avx2().dot, accumulate_v, pv_quant};
  return ops;
}

}  // namespace weft
