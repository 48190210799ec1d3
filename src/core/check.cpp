// The failure path of WEFT_CHECK / WEFT_ASSERT (see check.h).
#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace weft {

void check_failed(const char* condition, const char* message, const char* file, int line) {
  std::fprintf(stderr, "weft: internal invariant violated at %s:%d: %s (%s)\n", file, line, message, condition);
  std::fflush(stderr);
  std::abort();
}

}  // namespace weft
