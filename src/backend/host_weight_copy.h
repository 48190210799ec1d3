// HostWeightCopy: the CPU backend's copy of a model's weight matrices in anonymous memory backed
// by transparent huge pages (2 MiB), read by the kernels instead of the memory-mapped file.
//
// Why: decode streams every active weight once per token, and with 4 KiB pages each 4 KiB of
// weights costs a TLB miss — on a virtual machine a two-level page walk. One thread reading the
// same 512 MiB measured 17 GB/s on 4 KiB anonymous pages, ~24 GB/s through the GGUF file's
// mapping and 32 GB/s on 2 MiB pages (this 2-core Zen 4 VM; `quant_bench --pages huge|4k` shows
// the split per weight type, docs/formats-gguf.md). llama.cpp also computes from anonymous
// copies wherever its CPU backend repacks weights.
//
// Cost: the weights are resident as the copy (anonymous memory) instead of as file pages, and
// the copy at bind time (~1 s per GiB here). The source is read in chunks and each chunk's pages
// handed back (MADV_PAGEOUT), so the peak is the weights plus one chunk, not twice the weights
// (`weft logits` on a V = 131072 synth model: 109 MiB peak against 93 MiB reading in place);
// the file's pages leave the page cache, so the next load reads the file again. So it is skipped when
// the matrices exceed half of MemAvailable, when transparent huge pages are off ("[never]"), or
// when WEFT_CPU_WEIGHTS=mmap.
//
// Repack: where the CPU has the grouped kernels (AVX-512 VNNI), every q4_K, q5_K, q6_K and q8_0
// matrix of the set with at least 8 rows is stored in the copy as x8 groups (kernels/cpu/quant_repack.h: the
// same bytes per matrix, rearranged within the matrix's own range), and layout() says so; every
// other byte is copied unchanged. The kernels give the same bits either way (the grouped kernel
// keeps each output's float order). WEFT_CPU_WEIGHTS=copy-plain copies without repacking (the
// "before" arm of a measurement). A matrix that overlaps another of the set without being the same
// matrix (a view of a stacked tensor that another view cuts differently) is never repacked.
//
// Sharing: one copy per model (key) and process, held by every CPU backend that bound it (bench
// arms, fidelity arms), released with the last one. Overlapping or nearby ranges (per-expert
// slices of one stacked tensor, a tied lm_head, neighbouring tensors of one file) are copied as
// one range, so a translated pointer keeps its neighbours. Each range keeps its source address
// modulo 64, so rows are exactly as aligned as in the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kernels/cpu/quant_repack.h"

namespace weft {

class HostWeightCopy {
 public:
  ~HostWeightCopy();
  HostWeightCopy(const HostWeightCopy&) = delete;
  HostWeightCopy& operator=(const HostWeightCopy&) = delete;

  // The copy of `set` for the model `key`, shared with other holders in this process; nullptr
  // when the weights are to be read in place (see above; `why` then says why, empty if by
  // choice of WEFT_CPU_WEIGHTS).
  static std::shared_ptr<const HostWeightCopy> shared(const void* key, const WeightSet& set, std::string* why);

  // The copy of address p, or p itself when it lies in no copied range.
  const void* translate(const void* p) const;
  // How the copy stores matrix m (a matrix of the set or a row slice of one): its grouped rows,
  // 0 for plain; nullopt when m cuts a repacked group or straddles a repacked matrix, which the
  // caller must then read in place (its source bytes are still mapped).
  std::optional<QuantLayout> layout(const Matrix& m) const;
  // Number of matrices stored as groups.
  size_t repacked_matrices() const { return repacked_.size(); }
  size_t bytes() const { return bytes_; }
  // Bytes of the copy on 2 MiB pages when it was made (/proc/self/smaps); SIZE_MAX if unknown.
  size_t huge_bytes() const { return huge_bytes_; }

 private:
  HostWeightCopy() = default;
  struct Range {
    uintptr_t begin = 0, end = 0;
    const uint8_t* copy = nullptr;  // the copy of byte `begin`
  };
  std::vector<Range> ranges_;  // sorted by begin, disjoint
  struct Repacked {
    uintptr_t begin = 0, end = 0;  // source addresses
    size_t row_bytes = 0;
    int64_t grouped_rows = 0;
    GgmlType type = GgmlType::kQ4_K;
  };
  std::vector<Repacked> repacked_;  // sorted by begin, disjoint
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  size_t bytes_ = 0;
  size_t huge_bytes_ = SIZE_MAX;
  // Rewrites the set's grouped-type matrices in the (still writable) copy as groups; fills repacked_.
  void repack(const WeightSet& set);
  std::vector<uintptr_t> fingerprint_;  // the set's matrix addresses: a reused key is not a match
  friend struct HostWeightCopyBuilder;
};

// The source of WEFT_CPU_WEIGHTS: "copy" (default), "copy-plain" (a copy, never repacked) or
// "mmap"; anything else is reported on stderr once and read as the default.
bool host_weight_copy_enabled();
// False under WEFT_CPU_WEIGHTS=copy-plain or mmap, or where the CPU lacks the grouped kernels.
bool host_weight_repack_enabled();

}  // namespace weft
