// Tests for the byte-level BPE tokenizer: reference ids from llama.cpp's vocab tests, lossless
// round trips over the shared corpora, streaming detokenization, and hostile tokenizer files.
#include "io/tokenizer.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "io/json_text.h"
#include "io/unicode_tables.h"
#include "test_util.h"

namespace weft {
namespace {

using json = nlohmann::json;

std::string tokenizers_dir() { return test::shared_dir() + "/data/tokenizers"; }

bool read_text(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// Loads a shared tokenizer once per process (the JSON files take a second each to parse).
const Tokenizer* shared_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  std::unique_ptr<Tokenizer> tok;
  Result<Tokenizer> r = Tokenizer::load(tokenizers_dir() + "/" + name + "/tokenizer.json");
  if (r.ok()) {
    tok = std::make_unique<Tokenizer>(std::move(r).value());
  } else {
    ADD_FAILURE() << r.status().message();
  }
  return (cache[name] = std::move(tok)).get();
}

#define SKIP_WITHOUT_SHARED()                                                           \
  if (!std::filesystem::exists(tokenizers_dir())) {                                     \
    GTEST_SKIP() << "shared data not found at " << tokenizers_dir() << " (../shared)"; \
  }

// The .inp file holds inputs each followed by "\n__ggml_vocab_test__\n"; the .out file has one line
// per input of space-separated ids (each id preceded by a space; empty for the empty input).
void check_vocab_file(const std::string& tokenizer, const std::string& stem) {
  const Tokenizer* tok = shared_tokenizer(tokenizer);
  ASSERT_NE(tok, nullptr);
  std::string inp, outp;
  const std::string base = tokenizers_dir() + "/vocab-tests/" + stem;
  ASSERT_TRUE(read_text(base + ".inp", &inp));
  ASSERT_TRUE(read_text(base + ".out", &outp));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  size_t pos = 0;
  while (pos < inp.size()) {
    size_t at = inp.find(sep, pos);
    ASSERT_NE(at, std::string::npos) << "input not terminated by the separator";
    inputs.push_back(inp.substr(pos, at - pos));
    pos = at + sep.size();
  }
  std::vector<std::vector<int32_t>> expected;
  std::istringstream lines(outp);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ids(line);
    std::vector<int32_t> v;
    int32_t id;
    while (ids >> id) v.push_back(id);
    expected.push_back(v);
  }
  ASSERT_EQ(inputs.size(), expected.size());
  ASSERT_GT(inputs.size(), 40u);
  int passed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int32_t> got = tok->encode(inputs[i]);
    if (got == expected[i]) {
      ++passed;
    } else {
      std::string g, e;
      for (int32_t x : got) g += " " + std::to_string(x);
      for (int32_t x : expected[i]) e += " " + std::to_string(x);
      ADD_FAILURE() << stem << " case " << i << " input \"" << inputs[i] << "\"\n got:" << g
                    << "\n want:" << e;
    }
    EXPECT_EQ(tok->decode(got), inputs[i]);
  }
  std::printf("%s: %d/%zu cases match\n", stem.c_str(), passed, inputs.size());
  EXPECT_EQ(passed, static_cast<int>(inputs.size()));
}

TEST(TokenizerVocab, Qwen2ReferenceIds) {
  SKIP_WITHOUT_SHARED();
  check_vocab_file("qwen3", "ggml-vocab-qwen2.gguf");
}

// The llama-bpe reference ids carry no BOS (llama.cpp wrote them without one), so they compare
// directly with encode(), which never adds one.
TEST(TokenizerVocab, Llama3ReferenceIds) {
  SKIP_WITHOUT_SHARED();
  check_vocab_file("llama3", "ggml-vocab-llama-bpe.gguf");
}

TEST(TokenizerVocab, SpecialTokensAndConfig) {
  SKIP_WITHOUT_SHARED();
  const Tokenizer* qwen = shared_tokenizer("qwen3");
  ASSERT_NE(qwen, nullptr);
  EXPECT_EQ(qwen->vocab_size(), 151669);
  EXPECT_EQ(qwen->split_pattern(), SplitPattern::kQwen2);
  EXPECT_FALSE(qwen->bos_id().has_value());
  EXPECT_EQ(qwen->eos_ids(), std::vector<int32_t>{151645});
  EXPECT_FALSE(qwen->add_bos());
  EXPECT_EQ(qwen->token_to_id("<|im_start|>"), std::optional<int32_t>(151644));
  EXPECT_EQ(qwen->token_to_id("Hello"), std::optional<int32_t>(9707));
  EXPECT_EQ(qwen->token_to_id("ĠHello"), std::optional<int32_t>(21927));
  EXPECT_FALSE(qwen->token_to_id("no such token").has_value());
  EXPECT_EQ(qwen->token_bytes(21927), " Hello");
  EXPECT_EQ(qwen->token_bytes(-1), "");
  EXPECT_EQ(qwen->token_bytes(1 << 30), "");
  EXPECT_TRUE(qwen->is_added_token(151644));
  EXPECT_FALSE(qwen->is_added_token(9707));
  std::vector<int32_t> ids = qwen->encode("<|im_start|>user\nHello<|im_end|><think>");
  std::vector<int32_t> want = {151644, 872, 198, 9707, 151645, 151667};
  EXPECT_EQ(ids, want);
  // A partial special token is ordinary text.
  ids = qwen->encode("<|im_start");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 151644), 0);
  EXPECT_EQ(qwen->decode(ids), "<|im_start");

  const Tokenizer* llama = shared_tokenizer("llama3");
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(llama->split_pattern(), SplitPattern::kLlama3);
  EXPECT_EQ(llama->vocab_size(), 128256);
  EXPECT_EQ(llama->bos_id(), std::optional<int32_t>(128000));
  EXPECT_EQ(llama->eos_ids(), std::vector<int32_t>{128001});
  ids = llama->encode("<|begin_of_text|>Hello world");
  want = {128000, 9906, 1917};
  EXPECT_EQ(ids, want);
}

// Pieces the reference files do not cover: contractions, digit grouping, whitespace runs before
// text and at the end, CRLF, non-ASCII spaces. Checked through decode of each token boundary.
TEST(TokenizerVocab, SplitBoundaries) {
  SKIP_WITHOUT_SHARED();
  const Tokenizer* llama = shared_tokenizer("llama3");
  ASSERT_NE(llama, nullptr);
  auto pieces = [&](const std::string& text) {
    std::vector<std::string> out;
    for (int32_t id : llama->encode(text)) out.push_back(llama->token_bytes(id));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("I'M"), (V{"I", "'M"}));
  EXPECT_EQ(pieces("1234567"), (V{"123", "456", "7"}));
  EXPECT_EQ(pieces("a  \n\n  b"), (V{"a", "  \n\n", " ", " b"}));
  EXPECT_EQ(pieces("x   "), (V{"x", "   "}));
  EXPECT_EQ(pieces("\r\n"), (V{"\r\n"}));
  EXPECT_EQ(pieces("... ok"), (V{"...", " ok"}));
}

// The split patterns on their own. Expected pieces were checked against Python's `regex` module
// running the exact pattern strings (a 90,000-case random differential run agreed fully).
TEST(PreTokenize, PatternSemantics) {
  using V = std::vector<std::string_view>;
  auto split = [](SplitPattern p, std::string_view s) { return Tokenizer::pre_tokenize(p, s); };
  EXPECT_EQ(split(SplitPattern::kLlama3, "12345"), (V{"123", "45"}));
  EXPECT_EQ(split(SplitPattern::kQwen2, "12345"), (V{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(split(SplitPattern::kGpt2, " 12345"), (V{" 12345"}));
  // \s+(?!\S) gives back one character (here a 3-byte ideographic space) to lead the next word.
  EXPECT_EQ(split(SplitPattern::kLlama3, "a \u3000\u3000b"), (V{"a", " \u3000", "\u3000b"}));
  EXPECT_EQ(split(SplitPattern::kLlama3, "a\t\tb"), (V{"a", "\t", "\tb"}));
  EXPECT_EQ(split(SplitPattern::kLlama3, "x \n \n  y"), (V{"x", " \n \n", " ", " y"}));
  EXPECT_EQ(split(SplitPattern::kLlama3, "end  "), (V{"end", "  "}));
  EXPECT_EQ(split(SplitPattern::kLlama3, "we'RE 'lls"), (V{"we", "'RE", " '", "lls"}));
  EXPECT_EQ(split(SplitPattern::kGpt2, "we'RE"), (V{"we", "'", "RE"}));
  EXPECT_EQ(split(SplitPattern::kLlama3, "a?!\n\nb"), (V{"a", "?!\n\n", "b"}));
  EXPECT_EQ(split(SplitPattern::kLlama3, "\xFF\xFE" "ab"), (V{"\xFF\xFE", "ab"}));  // bad bytes are kOther
  EXPECT_TRUE(split(SplitPattern::kQwen2, "").empty());
}

// Reads a whole file, or the first max_bytes of an .xz file through `xz -dc`.
bool read_corpus(const std::string& path, size_t max_bytes, std::string* out) {
  out->clear();
  if (path.size() < 3 || path.substr(path.size() - 3) != ".xz") return read_text(path, out);
  FILE* p = popen(("xz -dc '" + path + "' 2>/dev/null").c_str(), "r");
  if (p == nullptr) return false;
  char buf[1 << 16];
  size_t n;
  while (out->size() < max_bytes && (n = fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  const int rc = pclose(p);
  // Stopping early makes xz die of SIGPIPE; only a short read that failed is an error.
  return !out->empty() && (out->size() >= max_bytes || rc == 0);
}

// decode(encode(x)) == x over every shared corpus with the Qwen3 tokenizer. The corpora are read
// whole (about 14 MB, a few seconds); kMaxCorpusBytes only bounds a corpus that grows later.
TEST(TokenizerRoundTrip, SharedCorpora) {
  SKIP_WITHOUT_SHARED();
  const Tokenizer* tok = shared_tokenizer("qwen3");
  ASSERT_NE(tok, nullptr);
  constexpr size_t kMaxCorpusBytes = 64u << 20;
  std::vector<std::string> paths = {test::shared_dir() + "/data/corpora/heldout/wikitext2-test.txt"};
  const bool have_xz = test::run_command("xz --version", nullptr) == 0;
  const std::string train = test::shared_dir() + "/data/corpora/train";
  if (have_xz && std::filesystem::exists(train)) {
    std::vector<std::string> xz;
    for (const auto& e : std::filesystem::directory_iterator(train)) {
      if (e.path().extension() == ".xz") xz.push_back(e.path().string());
    }
    std::sort(xz.begin(), xz.end());
    paths.insert(paths.end(), xz.begin(), xz.end());
  } else {
    std::printf("xz or train corpora missing: round trip covers only the heldout file\n");
  }
  size_t total_bytes = 0, total_tokens = 0;
  double total_seconds = 0;
  for (const std::string& path : paths) {
    std::string text;
    ASSERT_TRUE(read_corpus(path, kMaxCorpusBytes, &text)) << path;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = tok->encode(text);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(tok->decode(ids) == text) << "round trip differs for " << path;
    // Real merging happened: English text averages about four bytes per token.
    EXPECT_LT(ids.size(), text.size() / 3) << path;
    total_bytes += text.size();
    total_tokens += ids.size();
    total_seconds += s;
  }
  std::printf("round trip: %zu files, %.1f MB, %zu tokens, encode %.2f s (%.1f MB/s)\n",
              paths.size(), total_bytes / 1e6, total_tokens, total_seconds,
              total_bytes / 1e6 / total_seconds);
}

TEST(TokenizerRoundTrip, ArbitraryBytes) {
  SKIP_WITHOUT_SHARED();
  const Tokenizer* tok = shared_tokenizer("llama3");
  ASSERT_NE(tok, nullptr);
  std::string text;
  for (int i = 0; i < 4096; ++i) text.push_back(static_cast<char>((i * 7919 + i / 13) & 0xFF));
  text += "\xF0\x9F\xA6";  // truncated emoji at the end
  EXPECT_TRUE(tok->decode(tok->encode(text)) == text);
  // A long run with no split point exercises the heap path of BPE.
  std::string cjk;
  for (int i = 0; i < 400; ++i) cjk += "我想在苹果公司工作";
  EXPECT_EQ(tok->decode(tok->encode(cjk)), cjk);
}

TEST(StreamDecoder, NeverEmitsPartialCharacters) {
  SKIP_WITHOUT_SHARED();
  for (const char* name : {"qwen3", "llama3"}) {
    const Tokenizer* tok = shared_tokenizer(name);
    ASSERT_NE(tok, nullptr);
    const std::string text =
        "我想在apple工作1314151天～ 🦙🚀 😶‍🌫️ ✅ កាន់តែពិសេស нещо на Български 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 …";
    std::vector<int32_t> ids = tok->encode(text);
    ASSERT_EQ(tok->decode(ids), text);
    StreamDecoder stream(*tok);
    std::string joined;
    int held_back = 0;
    for (int32_t id : ids) {
      std::string piece = stream.push(id);
      EXPECT_TRUE(is_valid_utf8(piece)) << name << " id " << id;
      if (!is_valid_utf8(tok->token_bytes(id))) ++held_back;
      joined += piece;
    }
    std::string tail = stream.flush();
    EXPECT_TRUE(tail.empty());
    joined += tail;
    EXPECT_EQ(joined, text) << name;
    EXPECT_GT(held_back, 0) << name << ": the text should split some characters across tokens";
  }
  // Bytes that can never become valid UTF-8 turn into U+FFFD; an unfinished tail is flushed so.
  const Tokenizer* tok = shared_tokenizer("qwen3");
  ASSERT_NE(tok, nullptr);
  StreamDecoder stream(*tok);
  std::vector<int32_t> bad = tok->encode("\xFF" "a\xF0\x9F");
  std::string out;
  for (int32_t id : bad) out += stream.push(id);
  out += stream.flush();
  EXPECT_EQ(out, "\xEF\xBF\xBD" "a\xEF\xBF\xBD");
}

TEST(Utf8, Validation) {
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("\xC3\xA4\xE2\x82\xAC\xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xC0\x80"));          // overlong
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xE2\x82"));          // truncated
}

TEST(UnicodeTables, Classes) {
  EXPECT_GT(codepoint_range_count(), 100u);
  EXPECT_EQ(classify_codepoint('a'), CharClass::kLetter);
  EXPECT_EQ(classify_codepoint('7'), CharClass::kNumber);
  EXPECT_EQ(classify_codepoint('\t'), CharClass::kSpace);
  EXPECT_EQ(classify_codepoint('_'), CharClass::kOther);
  EXPECT_EQ(classify_codepoint(0x00E4), CharClass::kLetter);   // ä
  EXPECT_EQ(classify_codepoint(0x6211), CharClass::kLetter);   // 我
  EXPECT_EQ(classify_codepoint(0x00BD), CharClass::kNumber);   // ½ (No)
  EXPECT_EQ(classify_codepoint(0x0663), CharClass::kNumber);   // Arabic-Indic 3
  EXPECT_EQ(classify_codepoint(0x3000), CharClass::kSpace);    // ideographic space
  EXPECT_EQ(classify_codepoint(0x00A0), CharClass::kSpace);    // no-break space
  EXPECT_EQ(classify_codepoint(0x001F), CharClass::kOther);    // unit separator is not \s
  EXPECT_EQ(classify_codepoint(0x1F999), CharClass::kOther);   // 🦙
  EXPECT_EQ(classify_codepoint(0x17E1), CharClass::kNumber);   // Khmer digit
  EXPECT_EQ(classify_codepoint(0x110000), CharClass::kOther);
  for (uint32_t cp = 0; cp < 0x80; ++cp) {
    EXPECT_EQ(classify_codepoint(cp), classify_codepoint_slow(cp)) << cp;
  }
}

// ---- synthetic tokenizers ----

// The GPT-2 byte -> printable codepoint spelling, written independently of the library.
std::string byte_token(int b) {
  int cp = b;
  if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
    int k = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) ++k;
    }
    cp = 256 + k;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

// A minimal byte-level tokenizer.json: 256 byte tokens plus the given merged tokens.
json tiny_tokenizer(const std::vector<std::pair<std::string, std::string>>& merges,
                    bool array_merges, const json& pre_tokenizer) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_token(b)] = b;
  json m = json::array();
  for (const auto& [l, r] : merges) {
    if (!vocab.contains(l + r)) vocab[l + r] = static_cast<int>(vocab.size());
    m.push_back(array_merges ? json::array({l, r}) : json(l + " " + r));
  }
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}};
  j["added_tokens"] = json::array({{{"id", 1000}, {"content", "<s>"}, {"special", true}},
                                   {{"id", 1001}, {"content", "<s><s>"}, {"special", true}}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = pre_tokenizer;
  j["decoder"] = {{"type", "ByteLevel"}};
  return j;
}

json gpt2_pre_tokenizer() {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
}

Result<Tokenizer> load_json_text(const std::string& text) {
  const std::string dir = test::temp_dir("tok");
  std::ofstream(dir + "/tokenizer.json") << text;
  return Tokenizer::load_from_dir(dir);
}

TEST(TokenizerSynthetic, MergesInBothFormsAndAddedTokens) {
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"}};
  for (bool array_form : {false, true}) {
    Result<Tokenizer> tok = load_json_text(tiny_tokenizer(merges, array_form, gpt2_pre_tokenizer()).dump());
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    EXPECT_EQ(tok->split_pattern(), SplitPattern::kGpt2);
    const int32_t hello = *tok->token_to_id("hello");
    const int32_t sp_w = *tok->token_to_id("Ġw");
    std::vector<int32_t> ids = tok->encode("hello<s><s><s> wo");
    // "<s><s>" is the longest match at the first '<', the third "<s>" stands alone.
    std::vector<int32_t> want = {hello, 1001, 1000, sp_w, 'o'};
    EXPECT_EQ(ids, want);
    EXPECT_EQ(tok->decode(ids), "hello<s><s><s> wo");
    EXPECT_EQ(tok->vocab_size(), 1002);
  }
}

TEST(TokenizerSynthetic, Gpt2PatternSplits) {
  // With merges for every adjacent pair, a token can only span what one pre-token holds.
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"'", "s"}, {"Ġ", "Ġ"}, {"Ġ", "a"}, {"a", "b"}, {"Ġ", "1"}, {"1", "2"}, {"!", "!"}};
  Result<Tokenizer> tok = load_json_text(tiny_tokenizer(merges, false, gpt2_pre_tokenizer()).dump());
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  auto pieces = [&](const std::string& text) {
    std::vector<std::string> out;
    for (int32_t id : tok->encode(text)) out.push_back(tok->token_bytes(id));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("'s"), (V{"'s"}));
  EXPECT_EQ(pieces("'S"), (V{"'", "S"}));  // GPT-2 contractions are case-sensitive
  EXPECT_EQ(pieces("  a"), (V{" ", " a"}));
  EXPECT_EQ(pieces(" 12 !!"), (V{" 1", "2", " ", "!!"}));  // "Ġ1" outranks "12"
  EXPECT_EQ(pieces("ab  "), (V{"ab", "  "}));
}

TEST(TokenizerHostile, BadFiles) {
  Result<Tokenizer> missing = Tokenizer::load("/nonexistent/dir/tokenizer.json");
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot open"), std::string::npos);
  EXPECT_FALSE(Tokenizer::load_from_dir("/nonexistent").ok());

  const std::vector<std::pair<std::string, std::string>> merges = {{"a", "b"}};
  const json good = tiny_tokenizer(merges, false, gpt2_pre_tokenizer());
  ASSERT_TRUE(load_json_text(good.dump()).ok());

  auto expect_error = [&](const std::string& text, const std::string& fragment) {
    Result<Tokenizer> r = load_json_text(text);
    ASSERT_FALSE(r.ok()) << "accepted: " << text.substr(0, 200);
    EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
  };
  expect_error("", "not valid JSON");
  expect_error("{\"model\": {\"vocab\": {", "not valid JSON");
  expect_error(good.dump().substr(0, good.dump().size() / 2), "not valid JSON");
  expect_error("[1, 2, 3]", "not a JSON object");
  expect_error("{}", "model");

  json j = good;
  j["model"]["merges"].push_back("a zzz");
  expect_error(j.dump(), "not in the vocab");
  j = good;
  j["model"]["merges"].push_back(json::array({"qq", "b"}));
  expect_error(j.dump(), "not in the vocab");
  j = good;
  j["model"]["merges"].push_back("b a");  // "ba" has no token
  expect_error(j.dump(), "not in the vocab");
  j = good;
  j["model"]["merges"].push_back(42);
  expect_error(j.dump(), "merge");
  j = good;
  j["model"]["merges"].push_back("a b c");
  expect_error(j.dump(), "merge");
  j = good;
  j["model"]["vocab"]["x"] = "seven";
  expect_error(j.dump(), "non-integer");
  j = good;
  j["model"]["vocab"]["zz"] = -3;
  expect_error(j.dump(), "out of range");
  j = good;
  j["model"]["vocab"]["zz"] = 1LL << 40;
  expect_error(j.dump(), "out of range");
  j = good;
  j["model"]["vocab"].erase("a");
  expect_error(j.dump(), "byte");
  j = good;
  j["model"]["vocab"] = json::array();
  expect_error(j.dump(), "vocab");
  j = good;
  j["added_tokens"].push_back({{"id", "x"}, {"content", "<x>"}});
  expect_error(j.dump(), "added_tokens");
  j = good;
  j["added_tokens"].push_back({{"id", 5000}, {"content", ""}});
  expect_error(j.dump(), "empty");
  j = good;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         json::array({{{"type", "Split"},
                                       {"pattern", {{"Regex", "\\p{L}+|[^\\p{L}]+"}}},
                                       {"behavior", "Isolated"},
                                       {"invert", false}},
                                      {{"type", "ByteLevel"}, {"use_regex", false}}})}};
  expect_error(j.dump(), "unsupported pre-tokenizer split pattern");
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = 7;  // wrong type deep inside
  EXPECT_FALSE(load_json_text(j.dump()).ok());
  j = good;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error(j.dump(), "unsupported");
  j = good;
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_error(j.dump(), "normalizer");
  j = good;
  j["model"]["type"] = "WordPiece";
  expect_error(j.dump(), "BPE");

  // A malformed tokenizer_config.json beside a good tokenizer.json is reported too.
  const std::string dir = test::temp_dir("tokcfg");
  std::ofstream(dir + "/tokenizer.json") << good.dump();
  std::ofstream(dir + "/tokenizer_config.json") << "{not json";
  EXPECT_FALSE(Tokenizer::load_from_dir(dir).ok());
  std::ofstream(dir + "/tokenizer_config.json")
      << R"({"bos_token": {"content": "<s>"}, "eos_token": "<s><s>", "add_bos_token": true})";
  std::ofstream(dir + "/generation_config.json") << R"({"eos_token_id": [1001, 1000, 99999999]})";
  Result<Tokenizer> cfg = Tokenizer::load_from_dir(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->bos_id(), std::optional<int32_t>(1000));
  EXPECT_EQ(cfg->eos_ids(), (std::vector<int32_t>{1001, 1000}));
  EXPECT_TRUE(cfg->add_bos());
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// A token can end inside a UTF-8 character; the JSON lines weft prints must still be written
// (U+FFFD in place of the invalid bytes), not thrown on at the end of a run.
TEST(JsonText, InvalidUtf8BecomesReplacementCharacter) {
  nlohmann::json j;
  j["text"] = std::string("ok \xAF end \xE4\xB8");
  j["tokens"] = {1, 2, 3};
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);  // what the plain dump does
  const std::string s = json_text(j);
  const nlohmann::json back = nlohmann::json::parse(s);
  EXPECT_EQ(back["text"].get<std::string>(), "ok \xEF\xBF\xBD end \xEF\xBF\xBD");
  EXPECT_EQ(back["tokens"], j["tokens"]);
  EXPECT_NE(json_text(j, 2).find("\n  \""), std::string::npos);
}

}  // namespace
}  // namespace weft
