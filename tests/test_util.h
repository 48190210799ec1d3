// Helpers shared by the tests: paths to the source tree, the built binary, and running it.
#pragma once

#include <string>

namespace weft::test {

// Whether this build runs under AddressSanitizer (GCC says so with __SANITIZE_ADDRESS__, clang
// through __has_feature): its shadow memory and quarantine change what resident-memory figures mean.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kUnderAddressSanitizer = true;
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif

std::string source_dir();             // repo root
std::string weft_binary();            // path of the built `weft` tool
std::string shared_dir();             // ../shared beside the repo (may be absent)
std::string temp_dir(const std::string& tag);  // a fresh empty directory under /tmp, removed at exit
// Runs a shell command; returns its exit status and captures stdout+stderr into *output.
int run_command(const std::string& cmd, std::string* output);
// The whole file at path, byte for byte ("" when it cannot be read).
std::string read_bytes(const std::string& path);

}  // namespace weft::test
