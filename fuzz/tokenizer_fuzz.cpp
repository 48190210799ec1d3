// Fuzzes tokenizer.json parsing (Tokenizer::from_json, the code behind load()) and, for a
// tokenizer that loads, encoding and (streaming) decoding with that hostile vocabulary.
//
// Input: tokenizer.json | text to encode, cut at kPartSeparator (fuzz_util.h).
#include <cstdint>
#include <cstdlib>

#include "fuzz_util.h"
#include "io/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> parts = weft::fuzz::split_parts(data, size, 2);
  auto tok = weft::Tokenizer::from_json(parts[0]);
  if (!tok.ok()) return 0;
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
  return 0;
}
