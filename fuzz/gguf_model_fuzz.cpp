// Fuzzes loading a GGUF *model*: ModelFiles::open_gguf (hyper-parameters -> config, tensors
// bound by name with llama.cpp's reorders undone), weight binding in Model::load, and the
// tokenizer from tokenizer.ggml.* metadata. Input: the bytes of one .gguf file. Seeds: small
// models written by `weft convert` (fuzz/corpus/gguf_model/).
#include <cstdint>
#include <cstdlib>

#include "fuzz_util.h"
#include "io/tokenizer.h"
#include "model/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft::fuzz::write_scratch_file("model.gguf", std::string(reinterpret_cast<const char*>(data), size), false);
  const std::string path = weft::fuzz::scratch_dir() + "/model.gguf";
  auto model = weft::Model::load(path);
  if (model.ok()) {
    // Every bound matrix must lie inside memory the model owns or maps.
    const weft::ModelWeights& w = (*model)->weights();
    if (w.embed_tokens.bytes() == 0 || w.layers.size() != size_t((*model)->config().num_hidden_layers)) std::abort();
  }
  auto tok = weft::Tokenizer::load_from_dir(path);
  if (tok.ok()) (void)tok->encode("It is a truth universally acknowledged, 12345 <|endoftext|>");
  return 0;
}
