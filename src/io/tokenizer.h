// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (GPT-2 / Llama-3 / Qwen2-3
// families), plus a streaming detokenizer that never splits a UTF-8 character.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace weft {

class GgufFile;

// The pre-tokenizer split patterns weft implements by hand (no regex engine). Any other pattern
// string in tokenizer.json is rejected at load time rather than approximated.
enum class SplitPattern {
  kGpt2,     // 's|'t|...| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,   // (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|...
  kQwen2,    // as kLlama3 but \p{N} (single digits)
};

// Immutable after load; encode/decode are const and keep no shared mutable state, so one
// Tokenizer may serve many threads. Known simplifications: an NFC normalizer is taken as identity
// (input is expected to be NFC already), and added-token flags lstrip/rstrip/single_word are
// ignored (exact, longest-first matching only), which is right for the Llama-3 and Qwen families.
class Tokenizer {
 public:
  // Reads tokenizer.json and, when present beside it, tokenizer_config.json (BOS/EOS) and
  // generation_config.json (extra EOS ids).
  static Result<Tokenizer> load(const std::string& tokenizer_json_path);
  // <dir>/tokenizer.json, or the tokenizer.ggml.* metadata when model_dir is a .gguf file.
  static Result<Tokenizer> load_from_dir(const std::string& model_dir);
  // Parses tokenizer.json text held in memory (fuzzing, tests); no sibling configs are read, so
  // BOS/EOS come only from the post-processor.
  static Result<Tokenizer> from_json(const std::string& tokenizer_json);
  // A "gpt2" (byte-level BPE) tokenizer from GGUF metadata: tokenizer.ggml.tokens / token_type
  // (control and user-defined tokens become added tokens; unused ones are holes) / merges, the
  // split pattern named by tokenizer.ggml.pre, bos / eos / eot ids and add_bos_token.
  static Result<Tokenizer> from_gguf(const GgufFile& file);

  // Tokenizes text; added/special tokens written literally in the text are recognised. No BOS is
  // added (see add_bos()). Any byte string is accepted: invalid UTF-8 bytes become byte tokens.
  std::vector<int32_t> encode(std::string_view text) const;
  // Concatenated raw bytes of the tokens; ids outside the vocabulary contribute nothing.
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string token_bytes(int32_t id) const;  // "" for an unknown id

  int32_t vocab_size() const { return static_cast<int32_t>(id_to_bytes_.size()); }
  // Looks up a token by its tokenizer.json spelling (byte-level form such as "Ġthe", or the
  // literal content of an added token such as "<|im_end|>").
  std::optional<int32_t> token_to_id(std::string_view token) const;
  bool is_added_token(int32_t id) const;

  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::vector<int32_t> eos_ids() const { return eos_ids_; }
  // Whether the model expects a BOS in front of a prompt (tokenizer_config.json add_bos_token,
  // else whether the post-processor template inserts one).
  bool add_bos() const { return add_bos_; }
  SplitPattern split_pattern() const { return pattern_; }

  // The pre-tokenizer alone: text cut into the pieces the split pattern matches (they cover the
  // text exactly, in order). Exposed for tests and diagnostics.
  static std::vector<std::string_view> pre_tokenize(SplitPattern pattern, std::string_view text);

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  struct AddedToken {
    std::string content;
    int32_t id;
  };

  Tokenizer() = default;
  Status parse(const std::string& json_text);
  Status parse_config(const std::string& dir);
  // Appends the ids of one text run holding no added tokens.
  struct PieceCache;  // per-call memo of pre-token -> ids
  void encode_plain(std::string_view text, PieceCache* cache, std::vector<int32_t>* out) const;
  // Byte-pair-encodes one pre-token (raw bytes).
  void bpe(std::string_view piece, std::vector<int32_t>* out) const;
  static size_t next_split(SplitPattern pattern, std::string_view text, size_t pos);

  std::vector<std::string> id_to_bytes_;   // decoded bytes of each id ("" for holes)
  std::vector<uint8_t> is_added_;          // 1 where the id is an added token
  std::unordered_map<std::string, int32_t> token_to_id_;  // tokenizer.json spelling -> id
  std::unordered_map<uint64_t, Merge> merges_;             // (left id << 32 | right id) -> merge
  std::array<int32_t, 256> byte_to_id_{};                  // single-byte token of each byte
  std::unordered_map<std::string, int32_t> bytes_to_id_;   // raw bytes -> id, for ignore_merges
  // Added tokens bucketed by first byte, longest first, so the scan for them is cheap.
  std::array<std::vector<AddedToken>, 256> added_by_first_byte_;
  SplitPattern pattern_ = SplitPattern::kGpt2;
  bool ignore_merges_ = false;
  bool add_prefix_space_ = false;
  std::optional<int32_t> bos_id_;
  std::vector<int32_t> eos_ids_;
  bool add_bos_ = false;
};

// Turns a stream of generated ids into text, holding back the bytes of a UTF-8 character until
// it is complete. Bytes that can never form valid UTF-8 are emitted as U+FFFD, so every string
// returned is valid UTF-8; for ids whose decode() is valid UTF-8 the concatenation equals it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
  std::string push(int32_t id);
  std::string flush();  // emits what is held back (an unfinished character becomes U+FFFD)

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;
};

// True when s is well-formed UTF-8 (no overlongs, surrogates or values past U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace weft
