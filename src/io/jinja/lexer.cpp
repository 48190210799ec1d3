// Jinja lexer; the whitespace rules follow jinja2's lexer (read, not copied): a '-' marker strips
// all whitespace on its side, lstrip_blocks removes a line's indentation before {% and {#, and
// trim_blocks removes the single newline after %} and #}.
#include "io/jinja/lexer.h"

#include <cctype>
#include <cstring>

#include "io/jinja/strings.h"
#include "io/jinja/value.h"

namespace weft::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Python's str.rstrip() / regex \s: Unicode whitespace, not just ASCII.
std::string rstrip_space(const std::string& text) { return py_strip(text, nullptr, false, true); }
bool all_space(const std::string& text, size_t from) {
  for (uint32_t cp : utf8_decode(text.substr(from))) if (!py_isspace(cp)) return false;
  return true;
}

class Lexer {
 public:
  Lexer(std::string source, const LexOptions& options) : src_(std::move(source)), opt_(options) {
    line_starts_.push_back(0);
    for (size_t k = 0; k < src_.size(); ++k) if (src_[k] == '\n') line_starts_.push_back(k + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    const size_t n = src_.size();
    while (pos < n) {
      const size_t start = find_tag(pos);
      std::string text = src_.substr(pos, (start == std::string::npos ? n : start) - pos);
      if (start == std::string::npos) {
        emit_text(std::move(text), pos);
        break;
      }
      const char kind = src_[start + 1];  // '{', '%' or '#'
      const char sign = start + 2 < n && (src_[start + 2] == '-' || src_[start + 2] == '+') ? src_[start + 2] : 0;
      size_t raw_body = 0;
      const bool raw = kind == '%' && match_raw_begin(start, &raw_body);
      // Whitespace control on the text before the tag.
      if (sign == '-') {
        text = rstrip_space(text);
      } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_space(text, l_pos)) text.resize(l_pos);
      }
      emit_text(std::move(text), pos);
      if (raw) {
        pos = lex_raw(start, raw_body, &line_starting);
      } else if (kind == '#') {
        pos = lex_comment(start, &line_starting);
      } else {
        pos = lex_tag(start, kind, sign != 0, &line_starting);
      }
    }
    Token eof{Token::Type::kEof, "", 0, 0};
    position(n, &eof);
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  void position(size_t offset, Token* t) const {
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      if (line_starts_[mid] <= offset) lo = mid; else hi = mid;
    }
    t->line = static_cast<int>(lo + 1);
    t->column = static_cast<int>(offset - line_starts_[lo] + 1);
  }
  [[noreturn]] void fail(const std::string& message, size_t offset) const {
    Token t;
    position(offset, &t);
    throw Error(message, t.line, t.column);
  }
  void push(Token::Type type, std::string text, size_t offset) {
    Token t{type, std::move(text), 0, 0};
    position(offset, &t);
    tokens_.push_back(std::move(t));
  }
  void emit_text(std::string text, size_t offset) {
    if (!text.empty()) push(Token::Type::kText, std::move(text), offset);
  }

  size_t find_tag(size_t pos) const {
    for (size_t k = src_.find('{', pos); k != std::string::npos; k = src_.find('{', k + 1)) {
      if (k + 1 < src_.size() && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    }
    return std::string::npos;
  }

  bool word_at(size_t pos, const char* word) const { return src_.compare(pos, std::strlen(word), word) == 0; }
  // Skips Unicode whitespace (regex \s in Python), decoding only where a byte is non-ASCII.
  size_t skip_ws(size_t pos) const {
    while (pos < src_.size()) {
      if (is_space(src_[pos]) || (src_[pos] >= 0x1c && src_[pos] <= 0x1f)) {
        ++pos;
        continue;
      }
      if (!(src_[pos] & 0x80)) break;
      size_t len = 1;
      while (len < 4 && pos + len < src_.size() && (src_[pos + len] & 0xC0) == 0x80) ++len;
      const std::vector<uint32_t> cp = utf8_decode(src_.substr(pos, len));
      if (cp.size() != 1 || !py_isspace(cp[0])) break;
      pos += len;
    }
    return pos;
  }
  // {%[-+]? raw [-]?%}: *body = where the raw text starts.
  bool match_raw_begin(size_t start, size_t* body) const {
    size_t p = start + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_ws(p);
    if (!word_at(p, "raw")) return false;
    p = skip_ws(p + 3);
    if (word_at(p, "-%}")) {
      *body = skip_ws(p + 3);
      return true;
    }
    if (word_at(p, "%}")) {
      *body = p + 2;
      return true;
    }
    return false;
  }
  // After an end delimiter: the whitespace that '-' or trim_blocks removes.
  size_t after_end(size_t pos, char marker, bool block_like, bool* line_starting) const {
    if (marker == '-') pos = skip_ws(pos);
    else if (marker != '+' && block_like && opt_.trim_blocks && pos < src_.size() && src_[pos] == '\n') ++pos;
    *line_starting = pos > 0 && src_[pos - 1] == '\n';
    return pos;
  }

  size_t lex_raw(size_t start, size_t body, bool* line_starting) {
    *line_starting = src_[body - 1] == '\n';
    for (size_t k = src_.find("{%", body); k != std::string::npos; k = src_.find("{%", k + 1)) {
      size_t p = k + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      p = skip_ws(p);
      if (!word_at(p, "endraw")) continue;
      p = skip_ws(p + 6);
      char marker = 0;
      if (word_at(p, "-%}") || word_at(p, "+%}")) marker = src_[p++];
      if (!word_at(p, "%}")) continue;
      std::string text = src_.substr(body, k - body);
      if (sign == '-') {
        text = rstrip_space(text);
      } else if (sign != '+' && opt_.lstrip_blocks) {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || *line_starting) && l_pos < text.size() && all_space(text, l_pos)) text.resize(l_pos);
      }
      emit_text(std::move(text), body);
      return after_end(p + 2, marker, true, line_starting);
    }
    fail("missing end of raw directive", start);
  }

  size_t lex_comment(size_t start, bool* line_starting) {
    const size_t close = src_.find("#}", start + 2);
    if (close == std::string::npos) fail("missing end of comment tag", start);
    // The comment's own text starts after "{#" and its optional sign; only a '-'/'+' inside it
    // can mark the end.
    const size_t content = start + 2 + ((src_[start + 2] == '-' || src_[start + 2] == '+') ? 1 : 0);
    char marker = 0;
    if (close >= content + 1 && (src_[close - 1] == '-' || src_[close - 1] == '+')) marker = src_[close - 1];
    return after_end(close + 2, marker, true, line_starting);
  }

  size_t lex_tag(size_t start, char kind, bool has_sign, bool* line_starting) {
    const bool is_var = kind == '{';
    push(is_var ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", start);
    size_t p = start + 2 + (has_sign ? 1 : 0);
    std::vector<char> balance;
    const size_t n = src_.size();
    while (true) {
      p = skip_ws(p);
      if (p >= n) fail(is_var ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'", start);
      if (balance.empty()) {
        const char* close = is_var ? "}}" : "%}";
        char marker = 0;
        size_t q = p;
        if ((src_[q] == '-' || (!is_var && src_[q] == '+')) && word_at(q + 1, close)) marker = src_[q++];
        if (word_at(q, close)) {
          push(is_var ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", p);
          return after_end(q + 2, marker, !is_var, line_starting);
        }
      }
      p = lex_token(p, &balance);
    }
  }

  size_t lex_token(size_t p, std::vector<char>* balance) {
    const char c = src_[p];
    const size_t n = src_.size();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = p + 1;
      while (e < n && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
      push(Token::Type::kName, src_.substr(p, e - p), p);
      return e;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number(p);
    if (c == '\'' || c == '"') return lex_string(p);
    static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                       ">", "=", ".", ",", ":", "|", "(", ")", "[", "]", "{", "}"};
    for (const char* op : kOps) {
      if (!word_at(p, op)) continue;
      const char o = op[0];
      if (op[1] == 0 && (o == '(' || o == '[' || o == '{')) {
        balance->push_back(o == '(' ? ')' : o == '[' ? ']' : '}');
      } else if (op[1] == 0 && (o == ')' || o == ']' || o == '}')) {
        if (balance->empty()) fail(std::string("unexpected '") + o + "'", p);
        if (balance->back() != o) fail(std::string("unexpected '") + o + "', expected '" + balance->back() + "'", p);
        balance->pop_back();
      }
      push(Token::Type::kOp, op, p);
      return p + std::strlen(op);
    }
    fail(std::string("unexpected character '") + c + "'", p);
  }

  size_t lex_number(size_t p) {
    const size_t n = src_.size();
    size_t e = p;
    auto digits = [&]() {
      while (e < n && (std::isdigit(static_cast<unsigned char>(src_[e])) ||
                       (src_[e] == '_' && e + 1 < n && std::isdigit(static_cast<unsigned char>(src_[e + 1]))))) ++e;
    };
    digits();
    bool is_float = false;
    if (e + 1 < n && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      ++e;
      digits();
    }
    if (e < n && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t q = e + 1;
      if (q < n && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < n && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        is_float = true;
        e = q;
        digits();
      }
    }
    std::string spelling;
    for (size_t k = p; k < e; ++k) if (src_[k] != '_') spelling += src_[k];
    push(is_float ? Token::Type::kFloat : Token::Type::kInt, spelling, p);
    return e;
  }

  static void append_utf8(uint32_t cp, std::string* out) { *out += utf8_encode({cp}, 0, 1); }

  // Python string-literal escapes (jinja2 unescapes literals as Python does).
  size_t lex_string(size_t p) {
    const char quote = src_[p];
    const size_t n = src_.size();
    std::string value;
    size_t k = p + 1;
    while (true) {
      if (k >= n) fail("unterminated string", p);
      const char c = src_[k];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++k;
        continue;
      }
      if (k + 1 >= n) fail("unterminated string", p);
      const char e = src_[k + 1];
      k += 2;
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\n': break;  // line continuation
        case 'x': case 'u': case 'U': {
          const size_t len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (k + len > n) fail("truncated \\" + std::string(1, e) + " escape", k - 2);
          uint32_t cp = 0;
          for (size_t q = 0; q < len; ++q) {
            const char h = src_[k + q];
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail("truncated \\" + std::string(1, e) + " escape", k - 2);
            cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          if (cp > 0x10FFFF) fail("illegal Unicode character in escape", k - 2);
          append_utf8(cp, &value);
          k += len;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {  // octal, up to three digits
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int q = 0; q < 2 && k < n && src_[k] >= '0' && src_[k] <= '7'; ++q) cp = cp * 8 + static_cast<uint32_t>(src_[k++] - '0');
            append_utf8(cp, &value);
          } else {
            value += '\\';  // Python keeps an unknown escape as written
            value += e;
          }
      }
    }
    push(Token::Type::kString, std::move(value), p);
    return k + 1;
  }

  std::string src_;
  LexOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

// jinja2 normalizes \r\n and \r to \n and, without keep_trailing_newline, drops one final newline.
std::string normalize_source(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      out += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      out += source[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> lex(const std::string& source, const LexOptions& options) {
  return Lexer(normalize_source(source), options).run();
}

}  // namespace weft::jinja
