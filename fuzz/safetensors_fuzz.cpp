// Fuzzes the safetensors header check (SafetensorsFile::from_memory, the code behind open()):
// any bytes must give either a clear error or tensors that lie wholly inside the input.
#include <cstdint>
#include <cstdlib>

#include "io/safetensors.h"

// Written so the reads below are not optimised away.
volatile uint8_t g_sink;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = weft::SafetensorsFile::from_memory(data, size, "fuzz.safetensors");
  if (!file.ok()) return 0;
  uint8_t sum = 0;
  for (const auto& [name, view] : file->tensors()) {
    // The reader's promises: bytes = numel * dtype size, and every byte inside the input.
    const auto* p = static_cast<const uint8_t*>(view.data);
    if (uint64_t(view.numel()) * weft::dtype_size(view.dtype) != view.nbytes) std::abort();
    if (p < data || p + view.nbytes > data + size) std::abort();
    // Touch the first and last byte so ASan checks the span too.
    if (view.nbytes) sum ^= p[0] ^ p[view.nbytes - 1];
  }
  g_sink = sum;
  return 0;
}
