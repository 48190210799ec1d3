// libFuzzer target for the GGUF reader: any bytes must give a file or an error, never a crash,
// an out-of-bounds read, or an allocation out of proportion to the input.
// Seeds: fuzz/corpus/gguf/ (small valid files written by weft's own writer, see its README).
#include <cstddef>
#include <cstdint>

#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = weft::GgufFile::parse(data, size);
  if (!f.ok()) return 0;
  // Touch what was accepted: every tensor's bytes must lie inside the input.
  volatile uint8_t sink = 0;
  for (const auto& t : f->tensors()) {
    if (t.nbytes > 0) sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
  }
  for (const auto& kv : f->metadata()) sink = sink ^ uint8_t(kv.first.size());
  return 0;
}
