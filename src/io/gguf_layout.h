// The row and column reorders llama.cpp's converter applies to some tensors (gguf_names.h lists
// which), as index maps, so the converter (HF -> GGUF) and the GGUF model loader (GGUF -> HF)
// apply one definition in both directions: GGUF row i holds HF row map[i].
//
// Reorders move whole rows (or whole column chunks), so they are exact in every weight type; a
// column chunk of a block type must be a whole number of blocks (permute_col_chunks checks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace weft {

// Llama q_proj / k_proj: per head of `head_dim` rows, HF's rotate-half halves (j, i) become
// ggml's interleaved pairs (i, j): GGUF row h*hd + 2i + j holds HF row h*hd + j*hd/2 + i.
std::vector<int64_t> llama_rope_row_map(int64_t n_heads, int64_t head_dim);

// Qwen3.5 GDN value heads (n_k key heads, n_v value heads, r = n_v / n_k): HF groups them by key
// head (v = g*r + k), GGUF tiles them (v' = k*n_k + g). Element v' is HF head map[v'].
std::vector<int64_t> vhead_tiled_map(int64_t n_k, int64_t n_v);

// Expands a head map to rows: `per_head` rows per head, after `offset` untouched rows.
std::vector<int64_t> expand_head_map(const std::vector<int64_t>& heads, int64_t per_head, int64_t offset = 0);

// Qwen3-Next in_proj_qkvz [n_k * (2*dk + 2*r*dv), H], packed per key head as [q k v z], against
// GGUF attn_qkv ([all q | all k | all v]) followed by attn_gate (all z): GGUF row i (of the two
// stacked) holds HF row map[i].
std::vector<int64_t> qwen3next_qkvz_row_map(int64_t n_k, int64_t dk, int64_t n_v, int64_t dv);

// dst row i = src row map[i] (gather) or dst row map[i] = src row i (scatter); rows of
// row_bytes bytes.
void gather_rows(const void* src, size_t row_bytes, const std::vector<int64_t>& map, void* dst);
void scatter_rows(const void* src, size_t row_bytes, const std::vector<int64_t>& map, void* dst);

// Column chunks of `chunk_cols` values within each of `rows` rows of a [rows, cols] matrix of
// `dtype`: dst chunk i = src chunk map[i] (gather) or the reverse (scatter). False (nothing
// written) when a chunk is not a whole number of blocks.
bool permute_col_chunks(DType dtype, const void* src, int64_t rows, int64_t cols, int64_t chunk_cols,
                        const std::vector<int64_t>& map, bool scatter, void* dst);

// The float x nearest log(-a) for which -std::exp(x) == a exactly (the expression the GDN gate
// uses, cpu_backend.cpp), so an ssm_a = -exp(A_log) written from f32 A_log loads back to an
// A_log that gives the same gate bit for bit. Falls back to logf(-a) when no float within a few
// ulps hits a exactly (files from converters that rounded exp differently).
float a_log_from_ssm_a(float a);

}  // namespace weft
