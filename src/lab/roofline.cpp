// The roofline judgement of lab/roofline.h.
#include "lab/roofline.h"

#include <cstdio>

namespace weft::lab {

std::string Roofline::label() const {
  char buf[96];
  switch (kind) {
    case RooflineKind::kFraction: std::snprintf(buf, sizeof buf, "%.1f%%", fraction * 100.0); break;
    case RooflineKind::kFitsInCache: std::snprintf(buf, sizeof buf, "does not apply (fits in cache)"); break;
    case RooflineKind::kAboveProbe:
      std::snprintf(buf, sizeof buf, "does not apply (above the probe: %.2fx)", fraction);
      break;
  }
  return buf;
}

const char* Roofline::kind_name() const {
  switch (kind) {
    case RooflineKind::kFraction: return "fraction";
    case RooflineKind::kFitsInCache: return "fits_in_cache";
    case RooflineKind::kAboveProbe: return "above_probe";
  }
  return "fraction";
}

Roofline judge_roofline(double bytes_per_token, double tok_s, double bandwidth_bytes_s, size_t llc_bytes) {
  Roofline r;
  r.fraction = bytes_per_token * tok_s / bandwidth_bytes_s;
  if (llc_bytes > 0 && bytes_per_token <= double(llc_bytes)) r.kind = RooflineKind::kFitsInCache;
  else if (!(r.fraction <= 1.0)) r.kind = RooflineKind::kAboveProbe;  // NaN too: never print it
  return r;
}

}  // namespace weft::lab
