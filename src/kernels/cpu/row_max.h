// The softmax's running max of one row of scores, as `m = s[0]; m = std::max(m, s[j])` for j in
// order gives it, without that loop's serial chain (one max per 4-cycle latency: ~8 ns per key at
// GQA 8 in the decode kernels). Eight lanes, each started from s[0], take every eighth score, then
// fold left to right with the same std::max.
//
// Why the result is that loop's: std::max(m, x) keeps m unless m < x. Without NaNs a maximum is
// the same value in any order (up to the sign of a zero max, and a zero max's sign cannot change
// an output: it enters only as exp(s - m) and the merge's exp(m1 - m), where ±0 give the same
// bits). A NaN score never wins a comparison, so it is skipped in either form; a NaN s[0] starts
// every lane and stays, as it stays in the loop.
#pragma once

#include <algorithm>
#include <cstdint>

namespace weft {

inline float row_max(const float* s, int64_t n) {
  float lane[8];
  for (float& l : lane) l = s[0];
  int64_t j = 1;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) lane[k] = std::max(lane[k], s[j + k]);
  for (int k = 0; j < n; ++j, ++k) lane[k] = std::max(lane[k], s[j]);
  float m = lane[0];
  for (int k = 1; k < 8; ++k) m = std::max(m, lane[k]);
  return m;
}

}  // namespace weft
