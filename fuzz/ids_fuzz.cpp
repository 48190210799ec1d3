// Fuzzes the token-id file parser (cli::parse_ids, behind --ids-file): integers separated by
// whitespace or commas; anything else must be a clear error.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cli/common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto ids = weft::cli::parse_ids(text, "fuzz.txt");
  if (!ids.ok()) return 0;
  for (int32_t id : ids.value())
    if (id < 0) std::abort();  // the parser's promise: ids are non-negative int32
  return 0;
}
