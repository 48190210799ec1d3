// Row-interleaved repack of q4_K, q5_K, q6_K and q8_0 weights ("x8"): eight rows' super-blocks rearranged so one
// 256-bit register holds the same four code positions of all eight rows, for a decode kernel that
// computes eight outputs per pass from one sequential stream (quant_matmul_x8_avx512.cpp).
//
// Why: the one-row q4_K kernel spends most of its vector work per row on things that do not
// depend on the row's codes (splatting each sub-block scale across a register, unpacking the
// 6-bit scales in scalar code, one mins product per super-block) and runs ~24 GB/s from L2,
// below the ~33-36 GB/s one thread streams from huge pages. With eight rows across the lanes of
// a register, a sub-block's scales are one vpshufb for all eight rows, the activations are
// 4-byte broadcasts, and the 6-bit scales are stored pre-split so their unpack is a few vector
// ops (q5_K likewise, its fifth bits transposed like the codes; q6_K, its ql / qh dwords transposed
// and its signed scales laid out for one sign-extending load per group of eight rows; q8_0, one
// fma chain per row before, gets eight independent chains). Reading eight rows from one interleaved stream (not eight streams) keeps the hardware
// prefetcher's single sequential pattern, which two or more separate row streams defeated
// (docs/formats-gguf.md, "Tried and dropped").
//
// The repack is lossless and the same size (8 blocks per block column of a group),
// made by the CPU backend's huge-page weight copy at bind time (host_weight_copy.h). The
// products are the contract's (quant_matmul.h): the kernels compute the same exact integers S_j,
// M_j per row and the same float steps lane for lane, so every output is bit-identical to the
// one-row kernels on the original layout.
//
// Layout of one group (8 consecutive rows r = 0..7 of a [N, K] q4_K matrix), K / 256 super-block
// columns b, each 8 x 144 = 1152 bytes, in order:
//   [0, 16)     f16 d[r]
//   [16, 32)    f16 dmin[r]
//   [32, 96)    64 scale bytes: entry e = 32h + 16L + 4s' + (r - 4L) for sub-block s = 4h + s'
//               (h, s' < 2, 4; L = r / 4, the 128-bit lane): bits 0-5 = sc_r[s], bits 6-7 =
//               bits 4-5 of m_r[s]
//   [96, 128)   32 min bytes: byte k holds bits 0-3 of the min of scale entry k (low nibble) and
//               of entry 32 + k (high nibble)
//   [128, 1152) codes: for chunk c < 4, position j < 8: 32 bytes, bytes 4r..4r+3 = row r's
//               qs[32c + 4j .. 32c + 4j + 4) (low nibbles: sub-block 2c, elements 4j..4j+3;
//               high nibbles: sub-block 2c + 1, the same elements)
// q5_K (8 x 176 = 1408 bytes per column): the same, with 256 bytes of fifth bits between the mins
// and the codes: [128, 384) for position j < 8: 32 bytes, bytes 4r..4r+3 = row r's
// qh[4j .. 4j + 4) (bit s: sub-block s), then the codes at [384, 1408).
// q8_0 (blocks of 32; 8 x 34 = 272 bytes per block column): [0, 16) f16 d[r]; [16, 272) for
// position j < 8: 32 bytes, bytes 4r..4r+3 = row r's codes 4j..4j+3 (the contract's lane j).
// q6_K (8 x 210 = 1680 bytes per column): [0, 16) f16 d[r]; [16, 144) the signed scales: entry
// 16g + 8L + 4u + (r - 4L) = sc_r[2g + u] (g < 8 the 32-value group, u < 2, L = r / 4: one
// sign-extending load per group gives each 128-bit lane its four rows' two scales as int16);
// [144, 1680) for half h < 2, position j < 8 (in that order), 96 bytes: three registers whose
// bytes 4r..4r+3 are row r's ql[64h + 4j ..), ql[64h + 32 + 4j ..) and qh[32h + 4j ..) (the four
// 32-value groups of half h at positions 4j..4j+3), in the order the kernel reads them: a
// layout read out of order (ql, then qh, dword by dword) ran at 8 GB/s from L3 or DRAM against
// 30 from L2, the prefetchers lost.
// Rows of a matrix past the last whole group (N % 8 of them) stay in the plain layout after the
// groups, so a row's bytes stay within the matrix's own byte range.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/quant_types.h"

namespace weft {

constexpr int kX8GroupRows = 8;  // rows per group, for every grouped type

// How the rows of a block-quantized matrix (or a row slice of one) are stored: the first
// `grouped_rows` rows (a multiple of kX8GroupRows) as x8 groups, the rest plain. Plain
// (grouped_rows = 0) for every matrix not repacked.
struct QuantLayout {
  int64_t grouped_rows = 0;
};

// True for the weight types that have a grouped layout (q4_K, q5_K, q6_K, q8_0).
bool quant_type_has_groups(GgmlType t);

// Rewrites kX8GroupRows plain rows of type t (src, row_bytes apart, K columns) into one group
// (dst, 8 * row_bytes bytes; must not overlap src).
void repack_x8(GgmlType t, const uint8_t* src, size_t row_bytes, int64_t K, uint8_t* dst);
// The inverse: row i (< 8) of a group back to its plain bytes (row_bytes of them).
void unpack_x8_row(GgmlType t, const uint8_t* group, int64_t K, int i, uint8_t* dst);

// Writes a plain [rows, K] matrix of type t to dst (a separate buffer of the same size) with its
// first (rows / 8) * 8 rows as groups; rows past the last group are copied as they are.
void repack_matrix_x8(GgmlType t, const uint8_t* src, int64_t rows, int64_t K, uint8_t* dst);

// The bytes of row r (plain layout) of a matrix stored as `layout` says, starting at w:
// a pointer into w for a plain row, or `scratch` (row_bytes) filled from its group.
const uint8_t* quant_row_plain(GgmlType t, const uint8_t* w, int64_t K, const QuantLayout& layout, int64_t r,
                               uint8_t* scratch);

}  // namespace weft
