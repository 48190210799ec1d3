// What a paired speed ratio against f16 allows one to say about a KV type's byte ceiling.
//
// Input: the paired per-repeat ratios r_i = tok/s(arm, repeat i) / tok/s(f16, repeat i) of one
// depth (the arms decode interleaved, so a repeat's ratio cancels the machine's drift) and the
// byte-model ceiling c of the arm (lab/bench.h).
//   * ratio = median(r);
//   * ci = 95% percentile bootstrap of the median (lab/stats.h bootstrap_ci: 10000 resamples,
//     seed kDefaultSeed, as `weft compare` bootstraps its paired differences). With few repeats
//     it is about [min, max] of r, which is the honest width of so little data;
//   * of_ceiling = ratio / c with ci / c: the share of the ceiling reached;
//   * verdict: the interval's place against 1.0 (f16) and against c. When it holds both, the
//     harness "cannot resolve" whether the type is any faster than f16 or already at its ceiling:
//     neither "X% of the ceiling" nor "faster" may then be claimed;
//   * fewer than kMinRepeatsForClaim repeats: "cannot resolve (n repeats; 6 needed)". With n
//     paired repeats even a unanimous sign has sign-test p = 2^(1−n), over 0.05 below n = 6, and
//     no interval from n < 6 values covers the median with 95% (lab/stats.h median_with_ci): the
//     bootstrap interval of 3 repeats is their [min, max], which covers it only 75% of the time.
#pragma once

#include <span>
#include <string>

#include "lab/stats.h"

namespace weft::lab {

inline constexpr int kMinRepeatsForClaim = 6;

struct CeilingClaim {
  int n = 0;
  double ratio = 1;
  Interval ci{1, 1};
  double ceiling = 1;
  double of_ceiling = 1;
  Interval of_ceiling_ci{1, 1};
  bool resolved = false;  // false: "cannot resolve"
  std::string verdict;
};

CeilingClaim judge_ceiling(std::span<const double> paired_ratios, double ceiling);
// The verdict alone, from an interval: "cannot resolve", or "<against f16>, <against ceiling>"
// such as "faster than f16, at its ceiling" or "not resolved from f16, below its ceiling".
std::string ceiling_verdict(const Interval& ci, double ceiling, int n, bool* resolved);

}  // namespace weft::lab
