// Python str semantics over UTF-8: code points from value.h's decoder, whitespace as str.isspace.
#include "io/jinja/strings.h"

#include <algorithm>

#include "io/jinja/builtins.h"
#include "io/jinja/value.h"

namespace weft::jinja {

bool py_isspace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  const std::vector<uint32_t> cps = utf8_decode(s);
  std::vector<uint32_t> set;
  if (chars) set = utf8_decode(*chars);
  auto strip_it = [&](uint32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : py_isspace(cp);
  };
  size_t b = 0, e = cps.size();
  if (left) while (b < e && strip_it(cps[b])) ++b;
  if (right) while (e > b && strip_it(cps[e - 1])) --e;
  return utf8_encode(cps, b, e);
}

std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep) {
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        const size_t at = s.find(*sep, pos);
        if (at == std::string::npos) break;
        out.push_back(s.substr(pos, at - pos));
        pos = at + sep->size();
      }
      out.push_back(s.substr(pos));
    } else {
      size_t end = s.size();
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        if (end < sep->size()) break;
        const size_t at = s.rfind(*sep, end - sep->size());
        if (at == std::string::npos) break;
        out.push_back(s.substr(at + sep->size(), end - at - sep->size()));
        end = at;
      }
      out.push_back(s.substr(0, end));
      std::reverse(out.begin(), out.end());
    }
    return out;
  }
  // Whitespace runs separate; no empty strings; the remainder keeps its inner whitespace.
  const std::vector<uint32_t> cps = utf8_decode(s);
  if (!from_right) {
    size_t k = 0;
    const size_t n = cps.size();
    while (true) {
      while (k < n && py_isspace(cps[k])) ++k;
      if (k >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(utf8_encode(cps, k, n));  // the remainder keeps its trailing whitespace
        break;
      }
      size_t e = k;
      while (e < n && !py_isspace(cps[e])) ++e;
      out.push_back(utf8_encode(cps, k, e));
      k = e;
    }
  } else {
    size_t k = cps.size();
    while (true) {
      while (k > 0 && py_isspace(cps[k - 1])) --k;
      if (k == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(utf8_encode(cps, 0, k));  // the remainder keeps its leading whitespace
        break;
      }
      size_t b = k;
      while (b > 0 && !py_isspace(cps[b - 1])) --b;
      out.push_back(utf8_encode(cps, b, k));
      k = b;
    }
    std::reverse(out.begin(), out.end());
  }
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s) {
  const std::vector<uint32_t> cps = utf8_decode(s);
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t k = 0; k < cps.size(); ++k) {
    const uint32_t c = cps[k];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                     c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    out.push_back(utf8_encode(cps, start, k));
    if (c == '\r' && k + 1 < cps.size() && cps[k + 1] == '\n') ++k;
    start = k + 1;
  }
  if (start < cps.size()) out.push_back(utf8_encode(cps, start, cps.size()));
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& with, int64_t count,
                       const RenderContext& ctx) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {  // Python inserts `with` around every code point
    const std::vector<uint32_t> cps = utf8_decode(s);
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      if (k < cps.size()) out += utf8_encode(cps, k, k + 1);
      ctx.check_size(out.size());
    }
    return out;
  }
  size_t pos = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += with;
    ctx.check_size(out.size());
    pos = at + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

int64_t py_count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

// Simple case pairs of Latin-1, Latin Extended-A, Greek and Cyrillic; other scripts unchanged.
static uint32_t cp_upper(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 0x20;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    const bool odd_pairs = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_pairs ? (c % 2 == 0) : (c % 2 == 1)) return c - 1;
    return c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 0x20;
  if (c >= 0x430 && c <= 0x44F) return c - 0x20;
  if (c >= 0x450 && c <= 0x45F) return c - 0x50;
  return c;
}
static uint32_t cp_lower(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 0x20;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    const bool odd_pairs = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_pairs ? (c % 2 == 1) : (c % 2 == 0)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
  if (c >= 0x410 && c <= 0x42F) return c + 0x20;
  if (c >= 0x400 && c <= 0x40F) return c + 0x50;
  return c;
}
static std::string map_case(const std::string& s, uint32_t (*fn)(uint32_t)) {
  bool ascii = true;
  for (char c : s) ascii = ascii && !(c & 0x80);
  if (ascii) {
    std::string out = s;
    for (char& c : out) c = static_cast<char>(fn(static_cast<unsigned char>(c)));
    return out;
  }
  std::vector<uint32_t> cps = utf8_decode(s);
  for (uint32_t& c : cps) c = fn(c);
  return utf8_encode(cps, 0, cps.size());
}

std::string ascii_upper(std::string s) { return map_case(s, cp_upper); }
std::string ascii_lower(std::string s) { return map_case(s, cp_lower); }

static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c & 0x80); }

std::string py_title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') { if (!prev_cased) c = static_cast<char>(c - 32); }
    else if (c >= 'A' && c <= 'Z') { if (prev_cased) c = static_cast<char>(c + 32); }
    prev_cased = is_alpha(c);
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 32);
  return out;
}

std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (char c : s) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || c == ' ' || c == '\t' || c == '\n' ||
                     c == '\r' || c == '\v' || c == '\f';
    if (sep) {
      out += c;
      word_start = true;
    } else {
      out += word_start ? ascii_upper(std::string(1, c)) : ascii_lower(std::string(1, c));
      word_start = false;
    }
  }
  return out;
}

bool py_is(const std::string& s, const std::string& which) {
  if (s.empty()) return false;
  if (which == "isspace") {
    for (uint32_t cp : utf8_decode(s)) if (!py_isspace(cp)) return false;
    return true;
  }
  bool any_cased = false;
  for (char c : s) {
    const bool lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z', digit = c >= '0' && c <= '9';
    if (which == "isdigit" && !digit) return false;
    if (which == "isalpha" && !(lower || upper)) return false;
    if (which == "isalnum" && !(lower || upper || digit)) return false;
    if (which == "isupper" && lower) return false;
    if (which == "islower" && upper) return false;
    any_cased = any_cased || lower || upper;
  }
  return (which == "isupper" || which == "islower") ? any_cased : true;
}

}  // namespace weft::jinja
