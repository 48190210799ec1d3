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
//     neither "X% of the ceiling" nor "faster" may then be claimed. Fewer than 2 repeats:
//     "cannot resolve (one repeat)".
#pragma once

#include <span>
#include <string>

#include "lab/stats.h"

namespace weft::lab {

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
