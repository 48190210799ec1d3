// Invariant checks for code behind the input boundary (kernels, caches, engine internals).
// Input is validated where it enters (files, flags, configs) and reported with a Status; what is
// checked here can only fail through a bug in weft itself, so a failure prints the condition and
// where it is, then aborts (STYLE.md §5: checked at the boundary, asserted on the hot path).
//
//   WEFT_CHECK(cond, msg)   always compiled; for checks that cost nothing per element (once per
//                           kernel call), e.g. a weight dtype that has no matmul kernel.
//   WEFT_ASSERT(cond, msg)  compiled in Debug builds (!NDEBUG) and with -DWEFT_CHECKS=ON, out of
//                           Release; for the hot path, e.g. every KV row read inside view.length.
#pragma once

namespace weft {

[[noreturn]] void check_failed(const char* condition, const char* message, const char* file, int line);

#if !defined(NDEBUG) || defined(WEFT_CHECKS)
inline constexpr bool kAssertsEnabled = true;
#else
inline constexpr bool kAssertsEnabled = false;
#endif

}  // namespace weft

#define WEFT_CHECK(cond, msg) \
  ((cond) ? static_cast<void>(0) : ::weft::check_failed(#cond, (msg), __FILE__, __LINE__))

#if !defined(NDEBUG) || defined(WEFT_CHECKS)
#define WEFT_ASSERT(cond, msg) WEFT_CHECK(cond, msg)
#else
#define WEFT_ASSERT(cond, msg) static_cast<void>(0)
#endif
