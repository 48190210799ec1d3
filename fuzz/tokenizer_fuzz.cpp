// Fuzzes tokenizer.json parsing (Tokenizer::from_json, the code behind load()) and, for a
// tokenizer that loads, encoding and (streaming) decoding with that hostile vocabulary; when the
// input carries them, the sibling tokenizer_config.json and generation_config.json too (through
// load(), which only reads files, so those inputs go through a scratch directory).
//
// Input: tokenizer.json | text to encode | tokenizer_config.json | generation_config.json, cut at
// kPartSeparator (fuzz_util.h); the last two are optional.
#include <cstdint>
#include <cstdlib>

#include "fuzz_util.h"
#include "io/tokenizer.h"

namespace {

// The promises a loaded tokenizer makes to the engine: special ids index the vocabulary.
void check_special_ids(const weft::Tokenizer& tok) {
  if (tok.bos_id() && (*tok.bos_id() < 0 || *tok.bos_id() >= tok.vocab_size())) std::abort();
  for (int32_t id : tok.eos_ids())
    if (id < 0 || id >= tok.vocab_size()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using weft::fuzz::write_scratch_file;
  std::vector<std::string> parts = weft::fuzz::split_parts(data, size, 4);
  auto tok = weft::Tokenizer::from_json(parts[0]);
  if (!tok.ok()) return 0;
  check_special_ids(tok.value());
  // A fixed text with added-token-like markup and multi-byte characters, then the input's own.
  const std::string fixed = "<|im_start|>user\nHello, wörld! 12345 \xE4\xBD\xA0\xE5\xA5\xBD  \n\n<|endoftext|>";
  for (const std::string& text : {fixed, parts[1]}) {
    std::vector<int32_t> ids = tok->encode(text);
    // Every id must index the vocabulary: the model's embedding lookup relies on it. (Exact
    // round trips are not checked: a file may legally map an added token onto a vocab id.)
    for (int32_t id : ids)
      if (id < 0 || id >= tok->vocab_size()) std::abort();
    (void)tok->decode(ids);
    weft::StreamDecoder stream(tok.value());
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    if (!weft::is_valid_utf8(streamed)) std::abort();
  }
  // Ids outside the vocabulary decode to nothing rather than reading past it.
  (void)tok->decode({-1, tok->vocab_size(), 0x7fffffff});

  if (parts[2].empty() && parts[3].empty()) return 0;
  write_scratch_file("tokenizer.json", parts[0], /*remove_if_empty=*/false);
  write_scratch_file("tokenizer_config.json", parts[2], /*remove_if_empty=*/true);
  write_scratch_file("generation_config.json", parts[3], /*remove_if_empty=*/true);
  auto loaded = weft::Tokenizer::load(weft::fuzz::scratch_dir() + "/tokenizer.json");
  if (loaded.ok()) check_special_ids(loaded.value());
  return 0;
}
