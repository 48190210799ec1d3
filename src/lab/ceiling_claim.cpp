// The paired-ratio claims of lab/ceiling_claim.h.
#include "lab/ceiling_claim.h"

#include <string>

namespace weft::lab {

std::string ceiling_verdict(const Interval& ci, double ceiling, int n, bool* resolved) {
  *resolved = false;
  if (n < kMinRepeatsForClaim)
    return "cannot resolve (" + std::to_string(n) + (n == 1 ? " repeat" : " repeats") + "; " +
           std::to_string(kMinRepeatsForClaim) + " needed)";
  if (ci.contains(1.0) && ci.contains(ceiling)) return "cannot resolve";
  *resolved = true;
  const char* vs_f16 = ci.hi < 1.0 ? "slower than f16" : ci.lo > 1.0 ? "faster than f16" : "not resolved from f16";
  const char* vs_ceiling = ci.hi < ceiling ? "below its ceiling" : ci.lo > ceiling ? "above its ceiling" : "at its ceiling";
  return std::string(vs_f16) + ", " + vs_ceiling;
}

CeilingClaim judge_ceiling(std::span<const double> paired_ratios, double ceiling) {
  CeilingClaim c;
  c.n = int(paired_ratios.size());
  c.ceiling = ceiling;
  c.ratio = median(paired_ratios);
  c.ci = bootstrap_ci(paired_ratios, [](std::span<const double> x) { return median(x); });
  c.of_ceiling = c.ratio / ceiling;
  c.of_ceiling_ci = {c.ci.lo / ceiling, c.ci.hi / ceiling};
  c.verdict = ceiling_verdict(c.ci, ceiling, c.n, &c.resolved);
  return c;
}

}  // namespace weft::lab
