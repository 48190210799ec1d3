// Fuzzes ModelFiles::open on a model directory: the sharded index
// (model.safetensors.index.json) and the shards it names, as cross-checked against each other.
//
// Input: up to four parts cut at kPartSeparator (fuzz_util.h):
//   config.json | model.safetensors.index.json | a.safetensors | b.safetensors
// An empty index part means "no index": the loader then looks for model.safetensors, written
// from the third part, so the single-file path is covered too. ModelFiles only takes a
// directory, so the parts are written to a scratch directory of this process.
#include <cstdint>
#include <cstdlib>

#include "fuzz_util.h"
#include "io/model_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using weft::fuzz::write_scratch_file;
  std::vector<std::string> parts = weft::fuzz::split_parts(data, size, 4);
  const std::string& dir = weft::fuzz::scratch_dir();
  write_scratch_file("config.json", parts[0], /*remove_if_empty=*/true);
  write_scratch_file("model.safetensors.index.json", parts[1], /*remove_if_empty=*/true);
  write_scratch_file("model.safetensors", parts[1].empty() ? parts[2] : std::string(), true);
  write_scratch_file("a.safetensors", parts[2], true);
  write_scratch_file("b.safetensors", parts[3], true);

  auto files = weft::ModelFiles::open(dir);
  if (!files.ok()) return 0;
  // Every tensor the index promises must be found, and every view must have its bytes.
  for (const auto& [name, view] : (*files)->tensors()) {
    if ((*files)->find(name) == nullptr) std::abort();
    if (uint64_t(view.numel()) * weft::dtype_size(view.dtype) != view.nbytes) std::abort();
  }
  (void)(*files)->total_bytes();
  return 0;
}
