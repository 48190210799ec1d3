// Filters and tests. tojson is transformers' override of jinja2's (json.dumps with
// ensure_ascii=False and the indent/separators/sort_keys options, no HTML escaping); the others
// follow jinja2 3.1's filters.py and tests.py.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>

#include "io/jinja/builtins.h"
#include "io/jinja/strings.h"

namespace weft::jinja {
namespace {

using FilterFn = std::function<Value(const RenderContext&, const Value&, const CallArgs&)>;
using TestFn = std::function<bool(const RenderContext&, const Value&, const CallArgs&)>;

const Value* opt(const CallArgs& a, size_t i, const char* name) {
  const Value* v = a.get(i, name);
  return v && !v->is_none() ? v : nullptr;
}
bool opt_bool(const CallArgs& a, size_t i, const char* name, bool def) {
  const Value* v = a.get(i, name);
  return v ? v->truthy() : def;
}
std::string text_of(const Value& v) { return v.to_str(); }

int64_t len_of(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(utf8_length(v.str()));
    case Value::Kind::kList: return static_cast<int64_t>(v.list->size());
    case Value::Kind::kDict: case Value::Kind::kNamespace: return static_cast<int64_t>(v.dict->items.size());
    default: throw Error(std::string("object of type '") + v.type_name() + "' has no len()");
  }
}

// Dotted attribute path ("a.b", or an integer index) as jinja2's make_attrgetter.
Value attr_path(const RenderContext& ctx, Value v, const Value& attribute) {
  if (attribute.kind == Value::Kind::kInt) return get_item(ctx, v, attribute);
  const std::string dot = ".";
  for (const std::string& part : py_split(attribute.to_str(), &dot, -1, false)) {
    int64_t index = 0;
    const auto r = std::from_chars(part.data(), part.data() + part.size(), index);
    const bool numeric = !part.empty() && r.ec == std::errc() && r.ptr == part.data() + part.size() && part[0] != '-';
    v = get_item(ctx, v, numeric ? Value::integer(index) : Value::string(part));
  }
  return v;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(ascii_lower(v.str()));
  return v;
}

double to_double(const Value& v) {
  return v.kind == Value::Kind::kFloat ? v.f : v.kind == Value::Kind::kInt ? static_cast<double>(v.i) : v.b;
}

// Python round(x, ndigits) on the exact binary value, ties to even.
double py_round(double x, int64_t digits) {
  if (!std::isfinite(x)) return x;
  if (digits == 0) return std::nearbyint(x);
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(digits, 0, 300)), x);
  return std::strtod(buf, nullptr);
}

ValueList select_items(const RenderContext& ctx, const Value& seq, const CallArgs& a, bool by_attribute, bool keep) {
  ValueList out;
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    const Value* at = a.get(next++, "attribute");
    if (!at) throw Error("selectattr/rejectattr need an attribute");
    attribute = *at;
  }
  const Value* test = a.get(next++, nullptr);
  CallArgs test_args;
  for (size_t k = next; k < a.positional.size(); ++k) test_args.positional.push_back(a.positional[k]);
  for (const Value& item : iterate(seq)) {
    const Value v = by_attribute ? attr_path(ctx, item, attribute) : item;
    const bool pass = test ? call_test(ctx, test->to_str(), v, test_args) : v.truthy();
    if (pass == keep) out.push_back(item);
  }
  return out;
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = [] {
    std::map<std::string, FilterFn> f;
    f["trim"] = [](const RenderContext&, const Value& v, const CallArgs& a) {
      const Value* chars = opt(a, 0, "chars");
      std::string c = chars ? chars->to_str() : std::string();
      return Value::string(py_strip(text_of(v), chars ? &c : nullptr, true, true));
    };
    f["length"] = [](const RenderContext&, const Value& v, const CallArgs&) { return Value::integer(len_of(v)); };
    f["count"] = f["length"];
    f["tojson"] = [](const RenderContext& ctx, const Value& v, const CallArgs& a) {
      JsonDumpOptions o;
      o.ensure_ascii = opt_bool(a, 0, "ensure_ascii", false);
      if (const Value* indent = opt(a, 1, "indent")) {
        if (indent->kind != Value::Kind::kInt) throw Error("tojson: indent must be an integer");
        o.indent = static_cast<int>(std::clamp<int64_t>(indent->i, 0, 64));
      }
      if (const Value* sep = opt(a, 2, "separators")) {
        if (!sep->is_list() || sep->list->size() != 2) throw Error("tojson: separators must be a pair of strings");
        o.item_separator = (*sep->list)[0].to_str();
        o.key_separator = (*sep->list)[1].to_str();
        if (o.item_separator.empty() && o.key_separator.empty()) o.key_separator = std::string();
      }
      o.sort_keys = opt_bool(a, 3, "sort_keys", false);
      std::string out = json_dumps(v, o);
      ctx.check_size(out.size());
      return Value::string(std::move(out));
    };
    f["items"] = [](const RenderContext&, const Value& v, const CallArgs&) {
      if (v.is_undefined()) return Value::make_list({});
      if (!v.is_mapping()) throw Error("Can only get item pairs from a mapping.");
      ValueList out;
      for (const auto& kv : v.dict->items) out.push_back(Value::make_list({Value::string(kv.first), kv.second}, true));
      return Value::make_list(std::move(out));
    };
    f["safe"] = [](const RenderContext&, const Value& v, const CallArgs&) {
      Value out = v.is_string() ? v : Value::string(v.to_str());
      out.is_safe = true;
      return out;
    };
    f["string"] = [](const RenderContext&, const Value& v, const CallArgs&) {
      return v.is_string() ? v : Value::string(v.to_str());
    };
    f["lower"] = [](const RenderContext&, const Value& v, const CallArgs&) { return Value::string(ascii_lower(text_of(v))); };
    f["upper"] = [](const RenderContext&, const Value& v, const CallArgs&) { return Value::string(ascii_upper(text_of(v))); };
    f["capitalize"] = [](const RenderContext&, const Value& v, const CallArgs&) { return Value::string(py_capitalize(text_of(v))); };
    f["title"] = [](const RenderContext&, const Value& v, const CallArgs&) { return Value::string(jinja_title(text_of(v))); };
    f["replace"] = [](const RenderContext& ctx, const Value& v, const CallArgs& a) {
      const Value* old = a.get(0, "old");
      const Value* with = a.get(1, "new");
      if (!old || !with) throw Error("replace filter needs old and new");
      const Value* count = opt(a, 2, "count");
      return Value::string(py_replace(text_of(v), old->to_str(), with->to_str(),
                                      count && count->kind == Value::Kind::kInt ? count->i : -1, ctx));
    };
    f["join"] = [](const RenderContext& ctx, const Value& v, const CallArgs& a) {
      const Value* sep = a.get(0, "d");
      const Value* attribute = opt(a, 1, "attribute");
      std::string out;
      bool first = true;
      for (const Value& item : iterate(v)) {
        if (!first && sep) out += sep->to_str();
        first = false;
        out += (attribute ? attr_path(ctx, item, *attribute) : item).to_str();
        ctx.check_size(out.size());
      }
      return Value::string(std::move(out));
    };
    f["first"] = [](const RenderContext&, const Value& v, const CallArgs&) {
      ValueList items = iterate(v);
      return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
    };
    f["last"] = [](const RenderContext&, const Value& v, const CallArgs&) {
      if (v.is_mapping()) throw Error("'dict' object is not reversible");
      ValueList items = iterate(v);
      return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
    };
    f["list"] = [](const RenderContext&, const Value& v, const CallArgs&) { return Value::make_list(iterate(v)); };
    f["reverse"] = [](const RenderContext&, const Value& v, const CallArgs&) {
      if (v.is_string()) {
        std::vector<uint32_t> cps = utf8_decode(v.str());
        std::reverse(cps.begin(), cps.end());
        return Value::string(utf8_encode(cps, 0, cps.size()));
      }
      ValueList items = iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::make_list(std::move(items));
    };
    f["default"] = [](const RenderContext&, const Value& v, const CallArgs& a) {
      const Value* def = a.get(0, "default_value");
      const bool boolean = opt_bool(a, 1, "boolean", false);
      if (v.is_undefined() || (boolean && !v.truthy())) return def ? *def : Value::string("");
      return v;
    };
    f["d"] = f["default"];
    f["int"] = [](const RenderContext&, const Value& v, const CallArgs& a) {
      const Value* def = a.get(0, "default");
      const Value fallback = def ? *def : Value::integer(0);
      switch (v.kind) {
        case Value::Kind::kInt: return v;
        case Value::Kind::kBool: return Value::integer(v.b);
        case Value::Kind::kFloat:
          return std::isfinite(v.f) && std::fabs(v.f) < 9.2e18 ? Value::integer(static_cast<int64_t>(v.f)) : fallback;
        case Value::Kind::kString: {
          std::string s = py_strip(v.str(), nullptr, true, true);
          s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
          if (s.empty()) return fallback;
          char* end = nullptr;
          errno = 0;
          const long long x = std::strtoll(s.c_str(), &end, 10);
          if (end && *end == 0 && errno == 0) return Value::integer(x);
          const double d = std::strtod(s.c_str(), &end);  // jinja2 retries as float
          if (end && *end == 0 && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::integer(static_cast<int64_t>(d));
          return fallback;
        }
        default: return fallback;
      }
    };
    f["float"] = [](const RenderContext&, const Value& v, const CallArgs& a) {
      const Value* def = a.get(0, "default");
      const Value fallback = def ? *def : Value::number(0.0);
      if (v.is_number()) return Value::number(to_double(v));
      if (v.is_string()) {
        const std::string s = py_strip(v.str(), nullptr, true, true);
        char* end = nullptr;
        const double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && end && *end == 0) return Value::number(d);
      }
      return fallback;
    };
    f["abs"] = [](const RenderContext&, const Value& v, const CallArgs&) {
      if (v.kind == Value::Kind::kInt) {
        if (v.i == INT64_MIN) throw Error("integer overflow");
        return Value::integer(v.i < 0 ? -v.i : v.i);
      }
      if (v.kind == Value::Kind::kBool) return Value::integer(v.b);
      if (v.kind == Value::Kind::kFloat) return Value::number(std::fabs(v.f));
      throw Error(std::string("bad operand type for abs(): '") + v.type_name() + "'");
    };
    f["round"] = [](const RenderContext&, const Value& v, const CallArgs& a) {
      if (!v.is_number()) throw Error("round filter needs a number");
      const Value* p = a.get(0, "precision");
      const int64_t precision = p && p->kind == Value::Kind::kInt ? p->i : 0;
      const Value* m = a.get(1, "method");
      const std::string method = m ? m->to_str() : "common";
      const double x = to_double(v);
      if (method == "common") {
        if (v.kind == Value::Kind::kInt && precision >= 0) return v;  // Python's round(int, n) is the int
        return Value::number(py_round(x, precision));
      }
      const double scale = std::pow(10.0, static_cast<double>(precision));
      if (method == "floor") return Value::number(std::floor(x * scale) / scale);
      if (method == "ceil") return Value::number(std::ceil(x * scale) / scale);
      throw Error("method must be common, ceil or floor");
    };
    f["escape"] = [](const RenderContext&, const Value& v, const CallArgs&) {
      if (v.is_safe) return v;
      Value out = Value::string(html_escape(v.to_str()));
      out.is_safe = true;
      return out;
    };
    f["e"] = f["escape"];
    f["indent"] = [](const RenderContext& ctx, const Value& v, const CallArgs& a) {
      const Value* w = a.get(0, "width");
      std::string indention = w ? (w->is_string() ? w->str() : std::string(static_cast<size_t>(std::clamp<int64_t>(w->i, 0, 256)), ' ')) : "    ";
      const bool first = opt_bool(a, 1, "first", false), blank = opt_bool(a, 2, "blank", false);
      std::vector<std::string> lines = py_splitlines(text_of(v) + "\n");
      std::string out;
      for (size_t k = 0; k < lines.size(); ++k) {
        if (k) out += "\n";
        if (k && (blank || !lines[k].empty())) out += indention;
        out += lines[k];
        ctx.check_size(out.size());
      }
      if (first) out = indention + out;
      return Value::string(out);
    };
    f["map"] = [](const RenderContext& ctx, const Value& v, const CallArgs& a) {
      ValueList out;
      if (const Value* attribute = a.get(99, "attribute")) {
        const Value* def = a.get(99, "default");
        for (const Value& item : iterate(v)) {
          Value x = attr_path(ctx, item, *attribute);
          out.push_back(x.is_undefined() && def ? *def : x);
        }
      } else {
        const Value* name = a.get(0, nullptr);
        if (!name) throw Error("map needs a filter name or attribute=");
        CallArgs rest;
        for (size_t k = 1; k < a.positional.size(); ++k) rest.positional.push_back(a.positional[k]);
        rest.keyword = a.keyword;
        for (const Value& item : iterate(v)) out.push_back(call_filter(ctx, name->to_str(), item, rest));
      }
      return Value::make_list(std::move(out));
    };
    f["select"] = [](const RenderContext& ctx, const Value& v, const CallArgs& a) { return Value::make_list(select_items(ctx, v, a, false, true)); };
    f["reject"] = [](const RenderContext& ctx, const Value& v, const CallArgs& a) { return Value::make_list(select_items(ctx, v, a, false, false)); };
    f["selectattr"] = [](const RenderContext& ctx, const Value& v, const CallArgs& a) { return Value::make_list(select_items(ctx, v, a, true, true)); };
    f["rejectattr"] = [](const RenderContext& ctx, const Value& v, const CallArgs& a) { return Value::make_list(select_items(ctx, v, a, true, false)); };
    f["unique"] = [](const RenderContext& ctx, const Value& v, const CallArgs& a) {
      const bool case_sensitive = opt_bool(a, 0, "case_sensitive", false);
      const Value* attribute = opt(a, 1, "attribute");
      ValueList out, seen;
      for (const Value& item : iterate(v)) {
        const Value key = sort_key(attribute ? attr_path(ctx, item, *attribute) : item, case_sensitive);
        if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); })) continue;
        seen.push_back(key);
        out.push_back(item);
      }
      return Value::make_list(std::move(out));
    };
    f["dictsort"] = [](const RenderContext&, const Value& v, const CallArgs& a) {
      if (!v.is_mapping()) throw Error("dictsort needs a mapping");
      const bool case_sensitive = opt_bool(a, 0, "case_sensitive", false);
      const Value* by = a.get(1, "by");
      const bool by_value = by && by->to_str() == "value";
      if (by && !by_value && by->to_str() != "key") throw Error("You can only sort by either 'key' or 'value'");
      const bool reverse = opt_bool(a, 2, "reverse", false);
      ValueList out;
      for (const auto& kv : v.dict->items) out.push_back(Value::make_list({Value::string(kv.first), kv.second}, true));
      std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
        const int c = compare_values(sort_key((*x.list)[by_value], case_sensitive), sort_key((*y.list)[by_value], case_sensitive));
        return reverse ? c > 0 : c < 0;
      });
      return Value::make_list(std::move(out));
    };
    f["sort"] = [](const RenderContext& ctx, const Value& v, const CallArgs& a) {
      const bool reverse = opt_bool(a, 0, "reverse", false), case_sensitive = opt_bool(a, 1, "case_sensitive", false);
      const Value* attribute = opt(a, 2, "attribute");
      ValueList items = iterate(v);
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        const Value kx = sort_key(attribute ? attr_path(ctx, x, *attribute) : x, case_sensitive);
        const Value ky = sort_key(attribute ? attr_path(ctx, y, *attribute) : y, case_sensitive);
        const int c = compare_values(kx, ky);
        return reverse ? c > 0 : c < 0;
      });
      return Value::make_list(std::move(items));
    };
    f["sum"] = [](const RenderContext& ctx, const Value& v, const CallArgs& a) {
      const Value* attribute = opt(a, 0, "attribute");
      const Value* start = a.get(1, "start");
      bool is_float = start && start->kind == Value::Kind::kFloat;
      int64_t i = start && start->kind == Value::Kind::kInt ? start->i : 0;
      double d = start ? to_double(*start) : 0;
      for (const Value& item : iterate(v)) {
        const Value x = attribute ? attr_path(ctx, item, *attribute) : item;
        if (!x.is_number()) throw Error(std::string("unsupported operand type(s) for +: 'int' and '") + x.type_name() + "'");
        if (x.kind == Value::Kind::kFloat) is_float = true;
        if (!is_float && __builtin_add_overflow(i, x.kind == Value::Kind::kInt ? x.i : x.b, &i)) throw Error("integer overflow");
        d += to_double(x);
      }
      return is_float ? Value::number(d) : Value::integer(i);
    };
    auto minmax = [](bool want_max) {
      return [want_max](const RenderContext& ctx, const Value& v, const CallArgs& a) {
        const bool case_sensitive = opt_bool(a, 0, "case_sensitive", false);
        const Value* attribute = opt(a, 1, "attribute");
        ValueList items = iterate(v);
        if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
        size_t best = 0;
        for (size_t k = 1; k < items.size(); ++k) {
          const Value kx = sort_key(attribute ? attr_path(ctx, items[k], *attribute) : items[k], case_sensitive);
          const Value kb = sort_key(attribute ? attr_path(ctx, items[best], *attribute) : items[best], case_sensitive);
          const int c = compare_values(kx, kb);
          if (want_max ? c > 0 : c < 0) best = k;
        }
        return items[best];
      };
    };
    f["max"] = minmax(true);
    f["min"] = minmax(false);
    f["wordcount"] = [](const RenderContext&, const Value& v, const CallArgs&) {
      return Value::integer(static_cast<int64_t>(py_split(text_of(v), nullptr, -1, false).size()));
    };
    f["center"] = [](const RenderContext& ctx, const Value& v, const CallArgs& a) {
      const Value* w = a.get(0, "width");
      const int64_t width = w && w->kind == Value::Kind::kInt ? std::min<int64_t>(w->i, 1 << 20) : 80;
      const std::string s = text_of(v);
      const int64_t len = static_cast<int64_t>(utf8_length(s));
      if (len >= width) return Value::string(s);
      const int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
      ctx.check_size(static_cast<size_t>(width));
      return Value::string(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(pad - left), ' '));
    };
    return f;
  }();
  return table;
}


const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = [] {
    std::map<std::string, TestFn> t;
    auto unary = [](std::function<bool(const Value&)> fn) {
      return [fn](const RenderContext&, const Value& v, const CallArgs&) { return fn(v); };
    };
    auto other = [](const CallArgs& a) -> const Value& {
      const Value* o = a.get(0, nullptr);
      if (!o) throw Error("test needs an argument");
      return *o;
    };
    t["defined"] = unary([](const Value& v) { return !v.is_undefined(); });
    t["undefined"] = unary([](const Value& v) { return v.is_undefined(); });
    t["none"] = unary([](const Value& v) { return v.is_none(); });
    t["string"] = unary([](const Value& v) { return v.is_string(); });
    t["mapping"] = unary([](const Value& v) { return v.is_mapping(); });
    t["iterable"] = unary([](const Value& v) {
      return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping();
    });
    t["sequence"] = unary([](const Value& v) {
      return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping();
    });
    t["number"] = unary([](const Value& v) { return v.is_number(); });
    t["integer"] = unary([](const Value& v) { return v.kind == Value::Kind::kInt; });
    t["float"] = unary([](const Value& v) { return v.kind == Value::Kind::kFloat; });
    t["boolean"] = unary([](const Value& v) { return v.kind == Value::Kind::kBool; });
    t["true"] = unary([](const Value& v) { return v.kind == Value::Kind::kBool && v.b; });
    t["false"] = unary([](const Value& v) { return v.kind == Value::Kind::kBool && !v.b; });
    t["callable"] = unary([](const Value& v) { return v.kind == Value::Kind::kFunction; });
    t["lower"] = unary([](const Value& v) { return v.is_string() && py_is(v.str(), "islower"); });
    t["upper"] = unary([](const Value& v) { return v.is_string() && py_is(v.str(), "isupper"); });
    t["escaped"] = unary([](const Value& v) { return v.is_safe; });
    auto parity = [](bool odd) {
      return [odd](const RenderContext&, const Value& v, const CallArgs&) {
        if (v.kind != Value::Kind::kInt && v.kind != Value::Kind::kBool) throw Error("odd/even test needs an integer");
        const int64_t x = v.kind == Value::Kind::kInt ? v.i : v.b;
        return ((x % 2) != 0) == odd;
      };
    };
    t["odd"] = parity(true);
    t["even"] = parity(false);
    t["divisibleby"] = [other](const RenderContext&, const Value& v, const CallArgs& a) {
      const Value& d = other(a);
      if (v.kind != Value::Kind::kInt || d.kind != Value::Kind::kInt) throw Error("divisibleby needs integers");
      if (d.i == 0) throw Error("integer division or modulo by zero");
      return d.i == -1 || v.i % d.i == 0;
    };
    t["eq"] = [other](const RenderContext&, const Value& v, const CallArgs& a) { return values_equal(v, other(a)); };
    t["equalto"] = t["eq"];
    t["=="] = t["eq"];
    t["ne"] = [other](const RenderContext&, const Value& v, const CallArgs& a) { return !values_equal(v, other(a)); };
    t["!="] = t["ne"];
    t["lt"] = [other](const RenderContext&, const Value& v, const CallArgs& a) { return compare_values(v, other(a)) < 0; };
    t["<"] = t["lt"];
    t["lessthan"] = t["lt"];
    t["le"] = [other](const RenderContext&, const Value& v, const CallArgs& a) { return compare_values(v, other(a)) <= 0; };
    t["<="] = t["le"];
    t["gt"] = [other](const RenderContext&, const Value& v, const CallArgs& a) { return compare_values(v, other(a)) > 0; };
    t[">"] = t["gt"];
    t["greaterthan"] = t["gt"];
    t["ge"] = [other](const RenderContext&, const Value& v, const CallArgs& a) { return compare_values(v, other(a)) >= 0; };
    t[">="] = t["ge"];
    t["in"] = [other](const RenderContext&, const Value& v, const CallArgs& a) { return contains(other(a), v); };
    t["sameas"] = [other](const RenderContext&, const Value& v, const CallArgs& a) {
      const Value& o = other(a);
      if (v.kind != o.kind) return false;
      switch (v.kind) {
        case Value::Kind::kNone: case Value::Kind::kUndefined: return true;
        case Value::Kind::kBool: return v.b == o.b;
        case Value::Kind::kList: return v.list == o.list;
        case Value::Kind::kDict: case Value::Kind::kNamespace: return v.dict == o.dict;
        case Value::Kind::kString: return v.s == o.s;
        default: return values_equal(v, o);
      }
    };
    return t;
  }();
  return table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) != 0; }
bool has_test(const std::string& name) { return tests().count(name) != 0; }

Value call_filter(const RenderContext& ctx, const std::string& name, const Value& value, const CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) throw Error("no filter named '" + name + "'");
  return it->second(ctx, value, args);
}

bool call_test(const RenderContext& ctx, const std::string& name, const Value& value, const CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw Error("no test named '" + name + "'");
  return it->second(ctx, value, args);
}

}  // namespace weft::jinja
