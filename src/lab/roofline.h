// Whether a byte roofline applies to a measured decode speed, and its fraction when it does.
//
//   fraction = bytes_per_token · tok/s / bandwidth      (bandwidth: the probe's best pass, DRAM)
//
// The fraction says how close a decode came to streaming its bytes from memory at the measured
// rate. It only means that when those bytes do come from memory:
//   * bytes_per_token ≤ last-level cache: the token's working set can stay in cache between
//     tokens, so DRAM bandwidth is not its bound — "does not apply (fits in cache)";
//   * fraction > 1: the decode moved bytes faster than the probe saw DRAM deliver, so part of
//     them came from cache (or the probe was disturbed) — "does not apply (above the probe)";
//     a percentage over 100 is never printed.
#pragma once

#include <cstddef>
#include <string>

namespace weft::lab {

enum class RooflineKind { kFraction, kFitsInCache, kAboveProbe };

struct Roofline {
  RooflineKind kind = RooflineKind::kFraction;
  double fraction = 0;  // always computed (also when it does not apply), for the JSON record
  bool applies() const { return kind == RooflineKind::kFraction; }
  // "62.3%", "does not apply (fits in cache)", "does not apply (above the probe: 1.12x)".
  std::string label() const;
  // "fraction", "fits_in_cache", "above_probe".
  const char* kind_name() const;
};

// llc_bytes == 0 (unknown) skips the cache test. bandwidth_bytes_s must be > 0.
Roofline judge_roofline(double bytes_per_token, double tok_s, double bandwidth_bytes_s, size_t llc_bytes);

}  // namespace weft::lab
