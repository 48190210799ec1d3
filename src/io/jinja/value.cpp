// Python object semantics for the Jinja interpreter: truthiness, str()/repr(), equality and
// ordering, json.dumps, and code-point handling of UTF-8 strings.
#include "io/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace weft::jinja {

const Value* Dict::find(const std::string& key) const {
  for (const auto& kv : items) if (kv.first == key) return &kv.second;
  return nullptr;
}
Value* Dict::find(const std::string& key) {
  for (auto& kv : items) if (kv.first == key) return &kv.second;
  return nullptr;
}
void Dict::set(const std::string& key, Value v) {
  if (Value* slot = find(key)) { *slot = std::move(v); return; }
  items.emplace_back(key, std::move(v));
}

const Value* CallArgs::get(size_t i, const char* name) const {
  if (i < positional.size()) return &positional[i];
  if (name) for (const auto& kv : keyword) if (kv.first == name) return &kv.second;
  return nullptr;
}

Value Value::undefined(std::string name) {
  Value v; v.kind = Kind::kUndefined; v.s = std::make_shared<const std::string>(std::move(name)); return v;
}
Value Value::none() { Value v; v.kind = Kind::kNone; return v; }
Value Value::boolean(bool x) { Value v; v.kind = Kind::kBool; v.b = x; return v; }
Value Value::integer(int64_t x) { Value v; v.kind = Kind::kInt; v.i = x; return v; }
Value Value::number(double x) { Value v; v.kind = Kind::kFloat; v.f = x; return v; }
Value Value::string(std::string x) {
  Value v; v.kind = Kind::kString; v.s = std::make_shared<const std::string>(std::move(x)); return v;
}
static uint32_t depth_over(const ValueList& items) {
  uint32_t d = 0;
  for (const Value& v : items) d = std::max(d, v.depth);
  if (d + 1 > Value::kMaxValueDepth) throw Error("value nested too deeply (limit " + std::to_string(Value::kMaxValueDepth) + ")");
  return d + 1;
}
static uint32_t depth_over(const Dict& dict) {
  uint32_t d = 0;
  for (const auto& kv : dict.items) d = std::max(d, kv.second.depth);
  if (d + 1 > Value::kMaxValueDepth) throw Error("value nested too deeply (limit " + std::to_string(Value::kMaxValueDepth) + ")");
  return d + 1;
}
Value Value::make_list(ValueList x, bool tuple) {
  Value v; v.kind = Kind::kList; v.depth = depth_over(x); v.list = std::make_shared<ValueList>(std::move(x)); v.is_tuple = tuple; return v;
}
Value Value::make_dict(Dict d) {
  Value v; v.kind = Kind::kDict; v.depth = depth_over(d); v.dict = std::make_shared<Dict>(std::move(d)); return v;
}
Value Value::make_namespace(Dict d) {
  for (const auto& kv : d.items) {
    if (holds_namespace(kv.second)) throw Error("a namespace cannot hold another namespace");
  }
  Value v; v.kind = Kind::kNamespace; v.depth = depth_over(d); v.dict = std::make_shared<Dict>(std::move(d)); return v;
}

bool holds_namespace(const Value& v) {
  if (v.kind == Value::Kind::kNamespace) return true;
  if (v.kind == Value::Kind::kList) {
    for (const Value& e : *v.list) if (holds_namespace(e)) return true;
  } else if (v.kind == Value::Kind::kDict) {
    for (const auto& kv : v.dict->items) if (holds_namespace(kv.second)) return true;
  }
  return false;
}
Value Value::function(Function fn) {
  Value v; v.kind = Kind::kFunction; v.fn = std::make_shared<const Function>(std::move(fn)); return v;
}

Value Value::from_json(const nlohmann::ordered_json& j, uint32_t depth) {
  if (depth >= kMaxValueDepth) throw Error("input nested too deeply (limit " + std::to_string(kMaxValueDepth) + ")");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return integer(static_cast<int64_t>(u));
      return number(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList out;
      out.reserve(j.size());
      for (const auto& e : j) out.push_back(from_json(e, depth + 1));
      return make_list(std::move(out));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), from_json(it.value(), depth + 1));
      return make_dict(std::move(d));
    }
    default: return none();  // binary / discarded: not produced by JSON text
  }
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::kUndefined: case Kind::kNone: return false;
    case Kind::kBool: return b;
    case Kind::kInt: return i != 0;
    case Kind::kFloat: return f != 0;
    case Kind::kString: return !s->empty();
    case Kind::kList: return !list->empty();
    case Kind::kDict: return !dict->items.empty();
    default: return true;
  }
}

const char* Value::type_name() const {
  switch (kind) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return is_tuple ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    default: return "function";
  }
}

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: fixed for 1e-4 <= |v| < 1e16, else
  // scientific with a signed, at least two-digit exponent.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exp10 = std::stoi(sci.substr(e_pos + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) if (c != '.') digits += c;
  std::string out;
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp10 - 1), '0') + digits;
    } else if (static_cast<size_t>(exp10) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp10) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp10) + 1) + "." + digits.substr(static_cast<size_t>(exp10) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof(e), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += e;
  }
  return negative ? "-" + out : out;
}

static std::string string_repr(const std::string& s) {
  const bool use_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = use_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) { out += '\\'; out += q; }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

std::string Value::repr() const {
  switch (kind) {
    case Kind::kString: return string_repr(*s);
    case Kind::kList: {
      std::string out = is_tuple ? "(" : "[";
      for (size_t k = 0; k < list->size(); ++k) {
        if (k) out += ", ";
        out += (*list)[k].repr();
      }
      if (is_tuple && list->size() == 1) out += ",";
      return out + (is_tuple ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& kv : dict->items) {
        if (!first) out += ", ";
        first = false;
        out += string_repr(kv.first) + ": " + kv.second.repr();
      }
      return out + "}";
    }
    case Kind::kNamespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& kv : dict->items) {
        if (!first) out += ", ";
        first = false;
        out += string_repr(kv.first) + ": " + kv.second.repr();
      }
      return out + "}>";
    }
    default: return to_str();
  }
}

std::string Value::to_str() const {
  switch (kind) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return b ? "True" : "False";
    case Kind::kInt: return std::to_string(i);
    case Kind::kFloat: return python_float_repr(f);
    case Kind::kString: return *s;
    case Kind::kFunction: return "<function>";
    default: return repr();
  }
}

static double as_double(const Value& v) {
  return v.kind == Value::Kind::kFloat ? v.f : v.kind == Value::Kind::kInt ? static_cast<double>(v.i) : (v.b ? 1.0 : 0.0);
}

bool values_equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind != K::kFloat && b.kind != K::kFloat) {
      const int64_t x = a.kind == K::kInt ? a.i : a.b, y = b.kind == K::kInt ? b.i : b.b;
      return x == y;
    }
    return as_double(a) == as_double(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::kUndefined: case K::kNone: return true;
    case K::kString: return *a.s == *b.s;
    case K::kList: {
      if (a.is_tuple != b.is_tuple || a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k) if (!values_equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    }
    case K::kDict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& kv : a.dict->items) {
        const Value* other = b.dict->find(kv.first);
        if (!other || !values_equal(kv.second, *other)) return false;
      }
      return true;
    }
    case K::kNamespace: return a.dict == b.dict;
    default: return a.fn == b.fn;
  }
}

int compare_values(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat) {
      const int64_t x = a.kind == Value::Kind::kInt ? a.i : a.b, y = b.kind == Value::Kind::kInt ? b.i : b.b;
      return x < y ? -1 : x > y ? 1 : 0;
    }
    const double x = as_double(a), y = as_double(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.s->compare(*b.s);  // byte order of UTF-8 = code point order, as Python
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    const size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n; ++k) {
      if (values_equal((*a.list)[k], (*b.list)[k])) continue;
      return compare_values((*a.list)[k], (*b.list)[k]);
    }
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
  }
  throw Error(std::string("'<' not supported between instances of '") + a.type_name() + "' and '" +
              b.type_name() + "'");
}

static void json_string(const std::string& s, bool ensure_ascii, std::string* out) {
  *out += '"';
  if (!ensure_ascii) {
    for (unsigned char c : s) {
      switch (c) {
        case '"': *out += "\\\""; break;
        case '\\': *out += "\\\\"; break;
        case '\n': *out += "\\n"; break;
        case '\r': *out += "\\r"; break;
        case '\t': *out += "\\t"; break;
        case '\b': *out += "\\b"; break;
        case '\f': *out += "\\f"; break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            *out += buf;
          } else {
            *out += static_cast<char>(c);
          }
      }
    }
  } else {
    for (uint32_t cp : utf8_decode(s)) {
      switch (cp) {
        case '"': *out += "\\\""; continue;
        case '\\': *out += "\\\\"; continue;
        case '\n': *out += "\\n"; continue;
        case '\r': *out += "\\r"; continue;
        case '\t': *out += "\\t"; continue;
        case '\b': *out += "\\b"; continue;
        case '\f': *out += "\\f"; continue;
        default: break;
      }
      char buf[16];
      if (cp >= 0x20 && cp < 0x7f) {
        *out += static_cast<char>(cp);
      } else if (cp < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
        *out += buf;
      } else {
        const uint32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
        *out += buf;
      }
    }
  }
  *out += '"';
}

static void json_value(const Value& v, const JsonDumpOptions& o, const std::string& item_sep,
                       const std::string& key_sep, int level, std::string* out) {
  if (level > 512) throw Error("tojson: nesting too deep");
  auto newline = [&](int lvl) {
    if (o.indent < 0) return;
    *out += '\n';
    out->append(static_cast<size_t>(o.indent) * static_cast<size_t>(lvl), ' ');
  };
  switch (v.kind) {
    case Value::Kind::kNone: *out += "null"; return;
    case Value::Kind::kBool: *out += v.b ? "true" : "false"; return;
    case Value::Kind::kInt: *out += std::to_string(v.i); return;
    case Value::Kind::kFloat:
      if (std::isnan(v.f)) *out += "NaN";
      else if (std::isinf(v.f)) *out += v.f > 0 ? "Infinity" : "-Infinity";
      else *out += python_float_repr(v.f);
      return;
    case Value::Kind::kString: json_string(*v.s, o.ensure_ascii, out); return;
    case Value::Kind::kList: {
      if (v.list->empty()) { *out += "[]"; return; }
      *out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) *out += item_sep;
        newline(level + 1);
        json_value((*v.list)[k], o, item_sep, key_sep, level + 1, out);
      }
      newline(level);
      *out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.dict->items.empty()) { *out += "{}"; return; }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      *out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) *out += item_sep;
        newline(level + 1);
        json_string(items[k]->first, o.ensure_ascii, out);
        *out += key_sep;
        json_value(items[k]->second, o, item_sep, key_sep, level + 1, out);
      }
      newline(level);
      *out += '}';
      return;
    }
    default:
      throw Error(std::string("Object of type ") + v.type_name() + " is not JSON serializable");
  }
}

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  std::string item_sep = options.item_separator, key_sep = options.key_separator;
  if (item_sep.empty() && key_sep.empty()) {
    item_sep = options.indent < 0 ? ", " : ",";
    key_sep = ": ";
  }
  std::string out;
  json_value(v, options, item_sep, key_sep, 0, &out);
  return out;
}

std::vector<uint32_t> utf8_decode(const std::string& s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t k = 0;
  while (k < n) {
    const unsigned char c = p[k];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = len > 0 && k + static_cast<size_t>(len) <= n;
    for (int t = 1; ok && t < len; ++t) {
      if ((p[k + static_cast<size_t>(t)] & 0xC0) != 0x80) ok = false;
      else cp = (cp << 6) | (p[k + static_cast<size_t>(t)] & 0x3F);
    }
    if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
               (cp >= 0xD800 && cp <= 0xDFFF))) {
      ok = false;
    }
    if (!ok) {
      out.push_back(0xDC00 + c);  // Python's surrogateescape: the raw byte survives a round trip
      ++k;
    } else {
      out.push_back(cp);
      k += static_cast<size_t>(len);
    }
  }
  return out;
}

std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t k = begin; k < end; ++k) {
    const uint32_t cp = cps[k];
    if (cp >= 0xDC80 && cp <= 0xDCFF) out += static_cast<char>(cp - 0xDC00);
    else if (cp < 0x80) out += static_cast<char>(cp);
    else if (cp < 0x800) { out += static_cast<char>(0xC0 | (cp >> 6)); out += static_cast<char>(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

size_t utf8_length(const std::string& s) {
  for (unsigned char c : s) if (c >= 0x80) return utf8_decode(s).size();
  return s.size();
}

}  // namespace weft::jinja
