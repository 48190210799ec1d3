// Byte-level BPE tokenizer: tokenizer.json loading, hand-written pre-tokenizer split patterns,
// BPE merging, decoding and streaming detokenization.
#include "io/tokenizer.h"

#include "io/gguf.h"
#include "io/model_files.h"

#include <algorithm>
#include <fstream>
#include <queue>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/unicode_tables.h"

namespace weft {

namespace {

using json = nlohmann::json;

// Ids beyond this are refused: a hostile file must not make us allocate gigabytes.
constexpr int64_t kMaxTokenId = 1 << 24;
// Per-call cache of pre-token -> ids; bounded so one huge call cannot grow it without limit.
constexpr size_t kMaxCacheEntries = 1 << 20;
constexpr uint32_t kInvalidCodepoint = 0xFFFFFFFFu;  // classifies as kOther
constexpr char kReplacementChar[] = "\xEF\xBF\xBD";   // U+FFFD

// The pattern strings as they appear (after JSON unescaping) in tokenizer.json files.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// ---- UTF-8 ----

enum class Utf8Kind { kComplete, kTruncated, kInvalid };
struct Utf8Scan {
  Utf8Kind kind;
  uint32_t len;  // bytes of the character (kComplete) or of the bad maximal subpart (kInvalid)
  uint32_t cp;
};

// Reads one character at s[pos]. Follows the Unicode "maximal subpart" rule for errors so that
// replacement with U+FFFD matches what other decoders produce.
inline Utf8Scan scan_utf8(std::string_view s, size_t pos) {
  const uint8_t b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return {Utf8Kind::kComplete, 1, b0};
  uint32_t need;
  uint32_t cp;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return {Utf8Kind::kInvalid, 1, kInvalidCodepoint};
  }
  for (uint32_t k = 1; k <= need; ++k) {
    if (pos + k >= s.size()) return {Utf8Kind::kTruncated, k, kInvalidCodepoint};
    const uint8_t b = static_cast<uint8_t>(s[pos + k]);
    const uint8_t lo_k = k == 1 ? lo : 0x80, hi_k = k == 1 ? hi : 0xBF;
    if (b < lo_k || b > hi_k) return {Utf8Kind::kInvalid, k, kInvalidCodepoint};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Kind::kComplete, need + 1, cp};
}

struct CharInfo {
  uint32_t cp;
  uint32_t len;
};

// For pre-tokenization: an undecodable byte is a one-byte character of class kOther, which keeps
// every byte of the input in some pre-token and so makes encode/decode lossless on any input.
inline CharInfo char_at(std::string_view s, size_t pos) {
  const uint8_t b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return {b0, 1};
  Utf8Scan r = scan_utf8(s, pos);
  if (r.kind == Utf8Kind::kComplete) return {r.cp, r.len};
  return {kInvalidCodepoint, 1};
}

inline CharClass class_at(std::string_view s, size_t pos) {
  return classify_codepoint(char_at(s, pos).cp);
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// ---- GPT-2 byte <-> printable-codepoint mapping used by byte-level vocabularies ----

// Printable Latin-1 bytes stand for themselves; the other 68 bytes are moved to U+0100.. in
// byte order, so every token string is printable text.
struct ByteLevelMap {
  std::array<uint32_t, 256> byte_to_cp;
  std::array<int16_t, 512> cp_to_byte;  // -1 where the codepoint is not part of the mapping
  ByteLevelMap() {
    cp_to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      byte_to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelMap& byte_level_map() {
  static const ByteLevelMap map;
  return map;
}

// Byte-level token spelling -> raw bytes. A character outside the mapping (only possible in
// odd vocabularies) is kept as its own UTF-8 rather than dropped.
std::string byte_level_decode(std::string_view token) {
  const ByteLevelMap& map = byte_level_map();
  std::string out;
  out.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    Utf8Scan r = scan_utf8(token, pos);
    const uint32_t len = r.kind == Utf8Kind::kComplete ? r.len : 1;
    if (r.kind == Utf8Kind::kComplete && r.cp < map.cp_to_byte.size() && map.cp_to_byte[r.cp] >= 0) {
      out.push_back(static_cast<char>(map.cp_to_byte[r.cp]));
    } else {
      out.append(token.substr(pos, len));
    }
    pos += len;
  }
  return out;
}

// ---- pre-tokenizer matchers ----

// End of the run of characters of class cls starting at pos.
inline size_t run_end(std::string_view s, size_t pos, CharClass cls) {
  while (pos < s.size()) {
    CharInfo c = char_at(s, pos);
    if (classify_codepoint(c.cp) != cls) break;
    pos += c.len;
  }
  return pos;
}

inline char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

// Length of 's|'t|'re|'ve|'m|'ll|'d at pos (s[pos] is '\''), 0 if none. The alternatives have
// distinct first letters, so alternation order does not matter.
inline size_t contraction_length(std::string_view s, size_t pos, bool case_insensitive) {
  if (pos + 1 >= s.size()) return 0;
  auto at = [&](size_t i) { return case_insensitive ? ascii_lower(s[i]) : s[i]; };
  const char c1 = at(pos + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (pos + 2 >= s.size()) return 0;
  const char c2 = at(pos + 2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// `\s+(?!\S)|\s+` for the whitespace run [pos, end) whose last character starts at last_start:
// the greedy run backs off one character when a non-space follows it, so that space can lead
// the next word; a lone space, or a run reaching the end of text, is taken whole.
inline size_t whitespace_tail(size_t pos, size_t end, size_t last_start, size_t n) {
  if (end == n) return end;
  if (last_start > pos) return last_start;
  return end;
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t split_gpt2(std::string_view s, size_t pos) {
  const size_t n = s.size();
  CharInfo c = char_at(s, pos);
  if (c.cp == '\'') {
    if (size_t len = contraction_length(s, pos, false)) return pos + len;
  }
  // The three ` ?X+` alternatives: an optional literal space then a run of one class.
  size_t body = pos;
  CharClass body_cls = classify_codepoint(c.cp);
  if (c.cp == ' ' && pos + 1 < n) {
    CharClass next_cls = class_at(s, pos + 1);
    if (next_cls != CharClass::kSpace) {
      body = pos + 1;
      body_cls = next_cls;
    }
  }
  if (body_cls != CharClass::kSpace) return run_end(s, body, body_cls);
  size_t end = pos, last_start = pos;
  while (end < n) {
    CharInfo w = char_at(s, end);
    if (classify_codepoint(w.cp) != CharClass::kSpace) break;
    last_start = end;
    end += w.len;
  }
  return whitespace_tail(pos, end, last_start, n);
}

// Llama-3 (max_digits 3) and Qwen2 (max_digits 1):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+
size_t split_llama3(std::string_view s, size_t pos, int max_digits) {
  const size_t n = s.size();
  CharInfo c = char_at(s, pos);
  const CharClass cls = classify_codepoint(c.cp);
  if (c.cp == '\'') {
    if (size_t len = contraction_length(s, pos, true)) return pos + len;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+ : any one non-newline, non-alphanumeric char (spaces and tabs
  // included) may lead a word.
  if (cls == CharClass::kLetter) return run_end(s, pos, CharClass::kLetter);
  if (c.cp != '\r' && c.cp != '\n' && cls != CharClass::kNumber) {
    const size_t next = pos + c.len;
    if (next < n && class_at(s, next) == CharClass::kLetter) {
      return run_end(s, next, CharClass::kLetter);
    }
  }
  if (cls == CharClass::kNumber) {
    size_t end = pos;
    for (int i = 0; i < max_digits && end < n; ++i) {
      CharInfo d = char_at(s, end);
      if (classify_codepoint(d.cp) != CharClass::kNumber) break;
      end += d.len;
    }
    return end;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t body = pos;
  CharClass body_cls = cls;
  if (c.cp == ' ' && pos + 1 < n && class_at(s, pos + 1) == CharClass::kOther) {
    body = pos + 1;
    body_cls = CharClass::kOther;
  }
  if (body_cls == CharClass::kOther) {
    size_t end = run_end(s, body, CharClass::kOther);
    while (end < n && (s[end] == '\r' || s[end] == '\n')) ++end;
    return end;
  }
  // Only whitespace is left. \s*[\r\n]+ backtracks to end just after the run's last newline.
  size_t end = pos, last_start = pos, last_newline = std::string_view::npos;
  while (end < n) {
    CharInfo w = char_at(s, end);
    if (classify_codepoint(w.cp) != CharClass::kSpace) break;
    if (w.cp == '\r' || w.cp == '\n') last_newline = end;
    last_start = end;
    end += w.len;
  }
  if (last_newline != std::string_view::npos) return last_newline + 1;
  return whitespace_tail(pos, end, last_start, n);
}

// ---- JSON helpers ----

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::error("error reading " + path);
  return ss.str();
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

// A token named in a config: either a plain string or an AddedToken object {"content": ...}.
std::optional<std::string> token_name(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) {
    return j["content"].get<std::string>();
  }
  return std::nullopt;
}

bool json_bool(const json& obj, const char* key, bool fallback) {
  if (!obj.is_object() || !obj.contains(key) || !obj[key].is_boolean()) return fallback;
  return obj[key].get<bool>();
}

Result<SplitPattern> pattern_from_string(std::string_view p) {
  if (p == kGpt2Pattern) return SplitPattern::kGpt2;
  if (p == kLlama3Pattern) return SplitPattern::kLlama3;
  if (p == kQwen2Pattern) return SplitPattern::kQwen2;
  return Status::error("unsupported pre-tokenizer split pattern (weft implements only the GPT-2, "
                       "Llama-3 and Qwen2 patterns): " + std::string(p));
}

// Walks pre_tokenizer: accepts Split(Regex, Isolated) followed by ByteLevel(use_regex=false), or
// a ByteLevel that splits with its own GPT-2 regex, optionally wrapped in a Sequence.
struct PreTokenizerSpec {
  std::optional<SplitPattern> pattern;
  bool byte_level = false;
  bool add_prefix_space = false;
};

Status walk_pre_tokenizer(const json& j, PreTokenizerSpec* spec) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return Status::error("pre_tokenizer entry without a type");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) {
      return Status::error("pre_tokenizer Sequence without a pretokenizers array");
    }
    for (const json& sub : j["pretokenizers"]) WEFT_RETURN_IF_ERROR(walk_pre_tokenizer(sub, spec));
    return Status::ok_status();
  }
  if (type == "Split") {
    if (spec->pattern || spec->byte_level) {
      return Status::error("unsupported pre_tokenizer: more than one split, or a split after ByteLevel");
    }
    const json& pattern = j.value("pattern", json());
    if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string()) {
      return Status::error("unsupported pre_tokenizer Split: pattern must be {\"Regex\": ...}");
    }
    if (j.value("behavior", std::string()) != "Isolated" || json_bool(j, "invert", false)) {
      return Status::error("unsupported pre_tokenizer Split: only behavior Isolated, invert false");
    }
    Result<SplitPattern> p = pattern_from_string(pattern["Regex"].get<std::string>());
    if (!p.ok()) return p.status();
    spec->pattern = p.value();
    return Status::ok_status();
  }
  if (type == "ByteLevel") {
    if (spec->byte_level) return Status::error("pre_tokenizer has two ByteLevel steps");
    spec->byte_level = true;
    if (json_bool(j, "add_prefix_space", false)) {
      // HF prefixes every piece produced so far, which only makes sense without a prior Split.
      if (spec->pattern) {
        return Status::error("unsupported pre_tokenizer: ByteLevel add_prefix_space after a Split");
      }
      spec->add_prefix_space = true;
    }
    if (json_bool(j, "use_regex", true)) {
      if (spec->pattern) return Status::error("unsupported pre_tokenizer: ByteLevel regex after a Split");
      spec->pattern = SplitPattern::kGpt2;
    }
    return Status::ok_status();
  }
  return Status::error("unsupported pre_tokenizer type " + type);
}

// NFC is accepted and treated as identity: byte-level BPE vocabularies are trained on NFC text
// and weft's inputs are expected to be NFC already (the test corpora are).
Status check_normalizer(const json& j) {
  if (j.is_null()) return Status::ok_status();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return Status::error("normalizer without a type");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC") return Status::ok_status();
  if (type == "Sequence" && j.contains("normalizers") && j["normalizers"].is_array()) {
    for (const json& sub : j["normalizers"]) WEFT_RETURN_IF_ERROR(check_normalizer(sub));
    return Status::ok_status();
  }
  return Status::error("unsupported normalizer type " + type);
}

Status check_decoder(const json& j) {
  if (j.is_null()) return Status::ok_status();
  if (j.is_object() && j.value("type", std::string()) == "ByteLevel") return Status::ok_status();
  return Status::error("unsupported decoder (only ByteLevel): " + j.dump().substr(0, 200));
}

// Whether a post_processor template starts single sequences with a special token (a BOS).
bool template_adds_bos(const json& j) {
  if (!j.is_object()) return false;
  const std::string type = j.value("type", std::string());
  if (type == "Sequence" && j.contains("processors") && j["processors"].is_array()) {
    for (const json& sub : j["processors"]) {
      if (template_adds_bos(sub)) return true;
    }
    return false;
  }
  if (type != "TemplateProcessing" || !j.contains("single") || !j["single"].is_array() ||
      j["single"].empty()) {
    return false;
  }
  return j["single"][0].is_object() && j["single"][0].contains("SpecialToken");
}

// Transparent hashing so the per-call cache can be probed with a string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};

}  // namespace

struct Tokenizer::PieceCache {
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};

// ---- loading ----

Result<Tokenizer> Tokenizer::load(const std::string& tokenizer_json_path) {
  Result<std::string> text = read_file(tokenizer_json_path);
  if (!text.ok()) return text.status();
  Tokenizer tok;
  Status s;
  try {
    s = tok.parse(text.value());
    if (s.ok()) s = tok.parse_config(dir_of(tokenizer_json_path));
  } catch (const std::exception& e) {
    // Every access is type-checked first; this only guards against a check we missed.
    s = Status::error(std::string("malformed tokenizer data: ") + e.what());
  }
  if (!s.ok()) return s.with_context(tokenizer_json_path);
  return tok;
}

Result<Tokenizer> Tokenizer::from_json(const std::string& tokenizer_json) {
  Tokenizer tok;
  Status s;
  try {
    s = tok.parse(tokenizer_json);
  } catch (const std::exception& e) {
    s = Status::error(std::string("malformed tokenizer data: ") + e.what());  // as in load()
  }
  if (!s.ok()) return s;
  return tok;
}

Result<Tokenizer> Tokenizer::load_from_dir(const std::string& model_dir) {
  if (ModelFiles::is_gguf(model_dir)) {
    auto f = GgufFile::open(model_dir);
    if (!f.ok()) return f.status();
    return from_gguf(f.value());
  }
  return load(model_dir + "/tokenizer.json");
}

Result<Tokenizer> Tokenizer::from_gguf(const GgufFile& f) {
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model.ok()) return Status::error("GGUF file has no tokenizer (tokenizer.ggml.model)");
  if (model.value() != "gpt2")
    return Status::error("GGUF tokenizer model '" + model.value() + "' is not supported (weft reads byte-level BPE, \"gpt2\")");
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  auto merges = f.get_string_array("tokenizer.ggml.merges");
  if (!merges.ok()) return merges.status();
  const GgufValue* types = f.find("tokenizer.ggml.token_type");
  auto type_of = [&](size_t i) -> int64_t {
    if (!types || types->type != GgufType::kArray || i >= types->items.size()) return 1;
    const GgufValue& v = types->items[i];
    return v.is_signed() ? v.i : int64_t(v.u);
  };
  std::string pre = "gpt-2";
  if (auto p = f.get_string("tokenizer.ggml.pre"); p.ok()) pre = p.value();
  std::string_view pattern = kGpt2Pattern;
  if (pre == "qwen2" || pre == "qwen35") pattern = kQwen2Pattern;
  else if (pre == "llama-bpe" || pre == "llama3") pattern = kLlama3Pattern;
  else if (pre != "gpt-2" && pre != "default")
    return Status::error("GGUF tokenizer pre-tokenizer '" + pre + "' is not supported (gpt-2, llama-bpe, qwen2)");
  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < tokens->size(); ++i) {
    const int64_t t = type_of(i);
    if (t == 5) continue;  // unused
    if (t == 3 || t == 4) added.push_back({{"id", i}, {"content", (*tokens)[i]}, {"special", t == 3}});
    else vocab[(*tokens)[i]] = i;
  }
  json root = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", *merges}}},
      {"added_tokens", added},
      {"pre_tokenizer", {{"type", "Sequence"},
                         {"pretokenizers", json::array({
                              {{"type", "Split"}, {"pattern", {{"Regex", std::string(pattern)}}}, {"behavior", "Isolated"}, {"invert", false}},
                              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}})}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
  };
  Tokenizer tok;
  Status s;
  try {
    s = tok.parse(root.dump());
  } catch (const std::exception& e) {
    s = Status::error(std::string("malformed tokenizer data: ") + e.what());
  }
  if (!s.ok()) return s.with_context("GGUF tokenizer");
  auto id = [&](const char* key) -> std::optional<int32_t> {
    auto v = f.get_uint(key);
    if (!v.ok() || v.value() >= tokens->size()) return std::nullopt;
    return int32_t(v.value());
  };
  tok.bos_id_ = id("tokenizer.ggml.bos_token_id");
  tok.eos_ids_.clear();
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
    if (auto e = id(key); e && std::find(tok.eos_ids_.begin(), tok.eos_ids_.end(), *e) == tok.eos_ids_.end())
      tok.eos_ids_.push_back(*e);
  const GgufValue* add_bos = f.find("tokenizer.ggml.add_bos_token");
  tok.add_bos_ = add_bos && add_bos->type == GgufType::kBool ? add_bos->u != 0 : false;
  return tok;
}

Status Tokenizer::parse(const std::string& json_text) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Status::error("not valid JSON");
  if (!root.is_object()) return Status::error("top level is not a JSON object");
  if (!root.contains("model") || !root["model"].is_object()) {
    return Status::error("missing \"model\" object");
  }
  const json& model = root["model"];
  if (model.contains("type") && !(model["type"].is_string() && model["type"] == "BPE")) {
    return Status::error("model type is not BPE");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      return Status::error(std::string("unsupported model.") + key);
    }
  }
  ignore_merges_ = json_bool(model, "ignore_merges", false);

  // Vocabulary.
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return Status::error("missing model.vocab object");
  }
  const json& vocab = model["vocab"];
  std::vector<std::string> spelling;  // byte-level spelling by id, for merge results
  auto grow = [&](int64_t id) {
    if (static_cast<size_t>(id) >= id_to_bytes_.size()) {
      id_to_bytes_.resize(id + 1);
      is_added_.resize(id + 1, 0);
    }
  };
  std::vector<uint8_t> present;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) {
      return Status::error("model.vocab entry \"" + it.key() + "\" has a non-integer id");
    }
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= kMaxTokenId) {
      return Status::error("model.vocab id out of range: " + std::to_string(id));
    }
    grow(id);
    if (present.size() <= static_cast<size_t>(id)) present.resize(id + 1, 0);
    if (present[id]) return Status::error("model.vocab id used twice: " + std::to_string(id));
    present[id] = 1;
    id_to_bytes_[id] = byte_level_decode(it.key());
    token_to_id_.emplace(it.key(), static_cast<int32_t>(id));
    if (ignore_merges_) bytes_to_id_.emplace(id_to_bytes_[id], static_cast<int32_t>(id));
  }

  // Every byte must have a token, or some inputs would be unencodable.
  const ByteLevelMap& map = byte_level_map();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(map.byte_to_cp[b], &s);
    auto it = token_to_id_.find(s);
    if (it == token_to_id_.end()) {
      return Status::error("model.vocab lacks the byte-level token for byte " + std::to_string(b) +
                           " (not a byte-level BPE vocabulary?)");
    }
    byte_to_id_[b] = it->second;
  }

  // Merges: rank is the position in the list.
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return Status::error("missing model.merges array");
  }
  const json& merges = model["merges"];
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return Status::error("merge " + std::to_string(rank) + " is not two tokens: \"" + s + "\"");
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return Status::error("merge " + std::to_string(rank) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto find = [&](const std::string& t) -> std::optional<int32_t> {
      auto it = token_to_id_.find(t);
      if (it == token_to_id_.end()) return std::nullopt;
      return it->second;
    };
    std::optional<int32_t> l = find(left), r = find(right), merged = find(left + right);
    if (!l || !r) {
      return Status::error("merge " + std::to_string(rank) + " names a token not in the vocab: \"" +
                           (l ? right : left) + "\"");
    }
    if (!merged) {
      return Status::error("merge " + std::to_string(rank) + " result \"" + left + right +
                           "\" is not in the vocab");
    }
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(*l)) << 32) |
                         static_cast<uint32_t>(*r);
    // A repeated pair keeps its first (highest-priority) rank.
    merges_.emplace(key, Merge{static_cast<int32_t>(rank), *merged});
  }

  // Added tokens: matched literally in the input before any pre-tokenization.
  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    if (!root["added_tokens"].is_array()) return Status::error("added_tokens is not an array");
    for (const json& a : root["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
          !a.contains("content") || !a["content"].is_string()) {
        return Status::error("added_tokens entry needs an integer id and a string content");
      }
      const int64_t id = a["id"].get<int64_t>();
      const std::string content = a["content"].get<std::string>();
      if (id < 0 || id >= kMaxTokenId) {
        return Status::error("added token id out of range: " + std::to_string(id));
      }
      if (content.empty()) return Status::error("added token " + std::to_string(id) + " is empty");
      grow(id);
      id_to_bytes_[id] = content;
      is_added_[id] = 1;
      token_to_id_[content] = static_cast<int32_t>(id);
      auto& bucket = added_by_first_byte_[static_cast<uint8_t>(content[0])];
      bucket.push_back({content, static_cast<int32_t>(id)});
    }
    // Longest first, so "<|a|><|b|>"-style overlaps resolve to the longest match.
    for (auto& bucket : added_by_first_byte_) {
      std::stable_sort(bucket.begin(), bucket.end(), [](const AddedToken& x, const AddedToken& y) {
        return x.content.size() > y.content.size();
      });
    }
  }

  WEFT_RETURN_IF_ERROR(check_normalizer(root.value("normalizer", json())).with_context("normalizer"));
  WEFT_RETURN_IF_ERROR(check_decoder(root.value("decoder", json())).with_context("decoder"));
  if (!root.contains("pre_tokenizer") || root["pre_tokenizer"].is_null()) {
    return Status::error("missing pre_tokenizer (byte-level BPE needs ByteLevel)");
  }
  PreTokenizerSpec spec;
  WEFT_RETURN_IF_ERROR(walk_pre_tokenizer(root["pre_tokenizer"], &spec).with_context("pre_tokenizer"));
  if (!spec.byte_level) return Status::error("pre_tokenizer has no ByteLevel step");
  if (!spec.pattern) return Status::error("pre_tokenizer has no split pattern");
  pattern_ = *spec.pattern;
  add_prefix_space_ = spec.add_prefix_space;

  add_bos_ = template_adds_bos(root.value("post_processor", json()));
  return Status::ok_status();
}

Status Tokenizer::parse_config(const std::string& dir) {
  std::optional<std::string> bos_name, eos_name;
  const std::string config_path = dir + "/tokenizer_config.json";
  if (file_exists(config_path)) {
    Result<std::string> text = read_file(config_path);
    if (!text.ok()) return text.status();
    const json config = json::parse(text.value(), nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
      return Status::error(config_path + " is not a JSON object");
    }
    if (config.contains("bos_token")) bos_name = token_name(config["bos_token"]);
    if (config.contains("eos_token")) eos_name = token_name(config["eos_token"]);
    if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
      add_bos_ = config["add_bos_token"].get<bool>();
    }
  }
  // A config naming a token the vocabulary lacks is tolerated: the id is just left unset.
  if (bos_name) bos_id_ = token_to_id(*bos_name);
  if (eos_name) {
    if (std::optional<int32_t> id = token_to_id(*eos_name)) eos_ids_.push_back(*id);
  }
  // generation_config.json often lists extra stop ids (e.g. end-of-turn besides end-of-text).
  const std::string gen_path = dir + "/generation_config.json";
  if (file_exists(gen_path)) {
    Result<std::string> text = read_file(gen_path);
    if (!text.ok()) return text.status();
    const json gen = json::parse(text.value(), nullptr, false);
    if (gen.is_discarded() || !gen.is_object()) return Status::error(gen_path + " is not a JSON object");
    std::vector<json> ids;
    if (gen.contains("eos_token_id")) {
      if (gen["eos_token_id"].is_array()) {
        for (const json& v : gen["eos_token_id"]) ids.push_back(v);
      } else {
        ids.push_back(gen["eos_token_id"]);
      }
    }
    for (const json& v : ids) {
      if (!v.is_number_integer()) continue;
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id >= vocab_size()) continue;
      if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) {
        eos_ids_.push_back(static_cast<int32_t>(id));
      }
    }
    if (!bos_id_ && gen.contains("bos_token_id") && gen["bos_token_id"].is_number_integer()) {
      const int64_t id = gen["bos_token_id"].get<int64_t>();
      if (id >= 0 && id < vocab_size()) bos_id_ = static_cast<int32_t>(id);
    }
  }
  return Status::ok_status();
}

// ---- queries ----

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = token_to_id_.find(std::string(token));
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_added_token(int32_t id) const {
  return id >= 0 && id < vocab_size() && is_added_[id] != 0;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return std::string();
  return id_to_bytes_[id];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && id < vocab_size()) out += id_to_bytes_[id];
  }
  return out;
}

// ---- encoding ----

size_t Tokenizer::next_split(SplitPattern pattern, std::string_view text, size_t pos) {
  switch (pattern) {
    case SplitPattern::kGpt2:
      return split_gpt2(text, pos);
    case SplitPattern::kLlama3:
      return split_llama3(text, pos, 3);
    case SplitPattern::kQwen2:
      return split_llama3(text, pos, 1);
  }
  return text.size();
}

std::vector<std::string_view> Tokenizer::pre_tokenize(SplitPattern pattern, std::string_view text) {
  std::vector<std::string_view> pieces;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = next_split(pattern, text, pos);
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return pieces;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  PieceCache cache;
  size_t run_start = 0, pos = 0;
  while (pos < text.size()) {
    const auto& bucket = added_by_first_byte_[static_cast<uint8_t>(text[pos])];
    const AddedToken* hit = nullptr;
    for (const AddedToken& a : bucket) {
      if (text.compare(pos, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    encode_plain(text.substr(run_start, pos - run_start), &cache, &out);
    out.push_back(hit->id);
    pos += hit->content.size();
    run_start = pos;
  }
  encode_plain(text.substr(run_start), &cache, &out);
  return out;
}

void Tokenizer::encode_plain(std::string_view text, PieceCache* cache,
                             std::vector<int32_t>* out) const {
  if (text.empty()) return;
  std::string prefixed;
  if (add_prefix_space_ && text[0] != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = next_split(pattern_, text, pos);
    const std::string_view piece = text.substr(pos, end - pos);
    pos = end;
    if (piece.size() == 1) {
      out->push_back(byte_to_id_[static_cast<uint8_t>(piece[0])]);
      continue;
    }
    auto it = cache->map.find(piece);
    if (it != cache->map.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      continue;
    }
    const size_t before = out->size();
    bpe(piece, out);
    if (cache->map.size() < kMaxCacheEntries) {
      cache->map.emplace(std::string(piece), std::vector<int32_t>(out->begin() + before, out->end()));
    }
  }
}

void Tokenizer::bpe(std::string_view piece, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    auto it = bytes_to_id_.find(std::string(piece));
    if (it != bytes_to_id_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  const int n = static_cast<int>(piece.size());
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = byte_to_id_[static_cast<uint8_t>(piece[i])];
  auto lookup = [&](int32_t l, int32_t r) -> const Merge* {
    auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) |
                           static_cast<uint32_t>(r));
    return it == merges_.end() ? nullptr : &it->second;
  };

  // Both paths apply the lowest-rank merge first, leftmost among equals, as HF does.
  if (n <= 48) {
    // Short pieces (nearly all of them): rescanning is cheaper than maintaining a heap.
    while (ids.size() > 1) {
      int best = -1;
      const Merge* best_merge = nullptr;
      for (size_t i = 0; i + 1 < ids.size(); ++i) {
        const Merge* m = lookup(ids[i], ids[i + 1]);
        if (m != nullptr && (best_merge == nullptr || m->rank < best_merge->rank)) {
          best = static_cast<int>(i);
          best_merge = m;
        }
      }
      if (best_merge == nullptr) break;
      ids[best] = best_merge->merged_id;
      ids.erase(ids.begin() + best + 1);
    }
    out->insert(out->end(), ids.begin(), ids.end());
    return;
  }

  // Long pieces (long CJK or symbol runs): symbols in a linked list, candidate pairs in a heap;
  // entries made stale by an earlier merge are recognised by their recorded ids and skipped.
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t left_id, right_id;
    int right_pos;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int i) {
    if (i < 0 || next[i] < 0) return;
    if (const Merge* m = lookup(ids[i], ids[next[i]])) {
      heap.push({m->rank, i, ids[i], ids[next[i]], next[i]});
    }
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  std::vector<uint8_t> alive(n, 1);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    if (!alive[c.pos] || next[c.pos] != c.right_pos || ids[c.pos] != c.left_id ||
        ids[c.right_pos] != c.right_id) {
      continue;
    }
    ids[c.pos] = lookup(c.left_id, c.right_id)->merged_id;
    alive[c.right_pos] = 0;
    next[c.pos] = next[c.right_pos];
    if (next[c.pos] >= 0) prev[next[c.pos]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  for (int i = 0; i >= 0; i = next[i]) out->push_back(ids[i]);
}

// ---- streaming ----

std::string StreamDecoder::push(int32_t id) {
  pending_ += tokenizer_->token_bytes(id);
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    Utf8Scan r = scan_utf8(pending_, pos);
    if (r.kind == Utf8Kind::kTruncated) break;  // may be completed by the next token
    if (r.kind == Utf8Kind::kComplete) {
      out.append(pending_, pos, r.len);
    } else {
      out += kReplacementChar;
    }
    pos += r.len;
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = push(-1);  // an unknown id adds no bytes, so this emits what is complete
  if (!pending_.empty()) out += kReplacementChar;
  pending_.clear();
  return out;
}

bool is_valid_utf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    Utf8Scan r = scan_utf8(s, pos);
    if (r.kind != Utf8Kind::kComplete) return false;
    pos += r.len;
  }
  return true;
}

}  // namespace weft
