// Attribute and item access, iteration, slicing, membership, Python str/dict methods, and the
// template globals. Mutating methods (list.append, dict.update, ...) are refused, as jinja2's
// ImmutableSandboxedEnvironment does.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "io/jinja/builtins.h"
#include "io/jinja/strings.h"

namespace weft::jinja {

void RenderContext::check_size(size_t bytes) const {
  if (bytes > max_string_bytes) throw Error("output limit exceeded (" + std::to_string(max_string_bytes) + " bytes)");
}

void RenderContext::charge(int64_t units) const {
  if (!steps) return;
  *steps += units;
  if (*steps > max_steps) throw Error("template step limit exceeded (" + std::to_string(max_steps) + ")");
}

int64_t work_of(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kList: return static_cast<int64_t>(v.list->size());
    case Value::Kind::kDict: case Value::Kind::kNamespace: return static_cast<int64_t>(v.dict->items.size());
    case Value::Kind::kString: return static_cast<int64_t>(v.s->size() / 64);
    default: return 0;
  }
}

void raise_undefined(const Value& v) {
  throw Error(v.s && !v.s->empty() ? *v.s : "value is undefined");
}

static Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined("'" + std::string(obj.type_name()) + " object' has no attribute '" + name + "'");
}

// jinja2's hint for obj[key] that found nothing: a string key reads as a missing attribute.
static Value missing_item(const Value& obj, const Value& key) {
  if (key.is_string()) return missing_attribute(obj, key.str());
  return Value::undefined(std::string(obj.type_name()) + " object has no element " + key.repr());
}

static const Value& arg(const CallArgs& a, size_t i, const char* name, const char* method) {
  const Value* v = a.get(i, name);
  if (!v) throw Error(std::string(method) + "() missing argument '" + (name ? name : "?") + "'");
  return *v;
}
static const Value* opt(const CallArgs& a, size_t i, const char* name) {
  const Value* v = a.get(i, name);
  return v && !v->is_none() ? v : nullptr;
}
static const std::string& need_str(const Value& v, const char* what) {
  if (!v.is_string()) throw Error(std::string(what) + " must be str, not " + v.type_name());
  return v.str();
}

static bool starts_or_ends(const std::string& s, const Value& affix, bool at_start) {
  auto one = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return at_start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list() && affix.is_tuple) {
    for (const Value& v : *affix.list) if (one(need_str(v, "startswith/endswith argument"))) return true;
    return false;
  }
  return one(need_str(affix, "startswith/endswith argument"));
}

// str.format: {} / {0} / {name} fields, {{ and }}; format specs and conversions are refused.
static std::string str_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t k = 0; k < fmt.size(); ++k) {
    const char c = fmt[k];
    if (c == '{' && k + 1 < fmt.size() && fmt[k + 1] == '{') { out += '{'; ++k; continue; }
    if (c == '}' && k + 1 < fmt.size() && fmt[k + 1] == '}') { out += '}'; ++k; continue; }
    if (c == '}') throw Error("str.format: single '}' encountered in format string");
    if (c != '{') { out += c; continue; }
    const size_t close = fmt.find('}', k);
    if (close == std::string::npos) throw Error("str.format: single '{' encountered in format string");
    const std::string field = fmt.substr(k + 1, close - k - 1);
    if (field.find_first_of(":!.[") != std::string::npos) throw Error("str.format: format specs are not supported");
    const Value* v = nullptr;
    if (field.empty()) {
      v = a.get(auto_index++, nullptr);
    } else if (field.size() <= 6 && std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      v = a.get(static_cast<size_t>(std::atoi(field.c_str())), nullptr);
    } else {
      for (const auto& kv : a.keyword) if (kv.first == field) v = &kv.second;
    }
    if (!v) throw Error("str.format: no argument for field '{" + field + "}'");
    out += v->to_str();
    k = close;
  }
  return out;
}

static Value string_method(const RenderContext& ctx, const std::string& s, const std::string& name) {
  auto bind = [](auto fn) { return Value::function(std::move(fn)); };
  const auto self = std::make_shared<const std::string>(s);
  if (name == "startswith" || name == "endswith") {
    const bool start = name == "startswith";
    return bind([self, start](const CallArgs& a) {
      return Value::boolean(starts_or_ends(*self, arg(a, 0, nullptr, start ? "startswith" : "endswith"), start));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return bind([self, left, right](const CallArgs& a) {
      const Value* chars = opt(a, 0, "chars");
      return Value::string(py_strip(*self, chars ? &need_str(*chars, "strip chars") : nullptr, left, right));
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool from_right = name == "rsplit";
    return bind([self, from_right](const CallArgs& a) {
      const Value* sep = opt(a, 0, "sep");
      const Value* maxsplit = opt(a, 1, "maxsplit");
      const int64_t limit = maxsplit && maxsplit->kind == Value::Kind::kInt ? maxsplit->i : -1;
      if (sep && need_str(*sep, "separator").empty()) throw Error("empty separator");
      ValueList parts;
      for (auto& p : py_split(*self, sep ? &sep->str() : nullptr, limit, from_right)) parts.push_back(Value::string(std::move(p)));
      return Value::make_list(std::move(parts));
    });
  }
  if (name == "splitlines") {
    return bind([self](const CallArgs&) {
      ValueList parts;
      for (auto& p : py_splitlines(*self)) parts.push_back(Value::string(std::move(p)));
      return Value::make_list(std::move(parts));
    });
  }
  if (name == "replace") {
    const RenderContext* c = &ctx;
    return bind([self, c](const CallArgs& a) {
      const Value* count = opt(a, 2, "count");
      return Value::string(py_replace(*self, need_str(arg(a, 0, "old", "replace"), "replace() argument 1"),
                                      need_str(arg(a, 1, "new", "replace"), "replace() argument 2"),
                                      count && count->kind == Value::Kind::kInt ? count->i : -1, *c));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase") {
    return bind([self, name](const CallArgs&) {
      if (name == "upper") return Value::string(ascii_upper(*self));
      if (name == "lower") return Value::string(ascii_lower(*self));
      if (name == "title") return Value::string(py_title(*self));
      if (name == "capitalize") return Value::string(py_capitalize(*self));
      std::string out = *self;
      for (char& c : out) c = (c >= 'a' && c <= 'z') ? c - 32 : (c >= 'A' && c <= 'Z') ? c + 32 : c;
      return Value::string(out);
    });
  }
  if (name == "format") {
    const RenderContext* c = &ctx;
    return bind([self, c](const CallArgs& a) {
      std::string out = str_format(*self, a);
      c->check_size(out.size());
      return Value::string(std::move(out));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return bind([self, name](const CallArgs& a) {
      const std::string& sub = need_str(arg(a, 0, "sub", name.c_str()), "substring");
      if (name == "count") return Value::integer(py_count(*self, sub));
      const bool rev = name[0] == 'r';
      const size_t at = rev ? self->rfind(sub) : self->find(sub);
      if (at == std::string::npos) {
        if (name == "index" || name == "rindex") throw Error("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(utf8_length(self->substr(0, at))));
    });
  }
  if (name == "join") {
    const RenderContext* c = &ctx;
    return bind([self, c](const CallArgs& a) {
      std::string out;
      bool first = true;
      for (const Value& v : iterate(arg(a, 0, "iterable", "join"))) {
        if (!first) out += *self;
        first = false;
        out += need_str(v, "join item");
        c->check_size(out.size());
      }
      return Value::string(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "isupper" ||
      name == "islower") {
    return bind([self, name](const CallArgs&) { return Value::boolean(py_is(*self, name)); });
  }
  if (name == "zfill") {
    return bind([self](const CallArgs& a) {
      const Value& w = arg(a, 0, "width", "zfill");
      const int64_t width = w.kind == Value::Kind::kInt ? std::min<int64_t>(w.i, 1 << 20) : 0;
      std::string out = *self;
      const int64_t len = static_cast<int64_t>(utf8_length(out));
      if (len < width) {
        const size_t sign = !out.empty() && (out[0] == '-' || out[0] == '+') ? 1 : 0;
        out.insert(sign, static_cast<size_t>(width - len), '0');
      }
      return Value::string(out);
    });
  }
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

static Value dict_method(const Value& obj, const std::string& name) {
  const auto d = obj.dict;
  if (name == "get") {
    return Value::function([d](const CallArgs& a) {
      const Value& key = arg(a, 0, "key", "get");
      if (key.is_string()) {
        if (const Value* v = d->find(key.str())) return *v;
      }
      const Value* def = a.get(1, "default");
      return def ? *def : Value::none();
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    return Value::function([d, name](const CallArgs&) {
      ValueList out;
      for (const auto& kv : d->items) {
        if (name == "items") out.push_back(Value::make_list({Value::string(kv.first), kv.second}, true));
        else if (name == "keys") out.push_back(Value::string(kv.first));
        else out.push_back(kv.second);
      }
      return Value::make_list(std::move(out));
    });
  }
  return Value();
}

static bool is_mutating_method(const Value& obj, const std::string& name) {
  static const char* const kList[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"};
  static const char* const kDict[] = {"pop", "popitem", "update", "setdefault", "clear"};
  if (obj.is_list() && !obj.is_tuple) for (const char* m : kList) if (name == m) return true;
  if (obj.is_mapping()) for (const char* m : kDict) if (name == m) return true;
  return false;
}

// The sandbox answers a mutating method with an Undefined that raises when called or used.
static Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.");
}

Value get_attribute(const RenderContext& ctx, const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Value::Kind::kUndefined: raise_undefined(obj);
    case Value::Kind::kDict: {
      Value m = dict_method(obj, name);
      if (m.kind == Value::Kind::kFunction) return m;
      if (is_mutating_method(obj, name)) return unsafe(obj, name);
      if (const Value* v = obj.dict->find(name)) return *v;
      return missing_attribute(obj, name);
    }
    case Value::Kind::kNamespace:
      if (const Value* v = obj.dict->find(name)) return *v;
      return missing_attribute(obj, name);
    case Value::Kind::kString:
      ctx.charge(work_of(obj));
      return string_method(ctx, obj.str(), name);
    case Value::Kind::kList:
      if (is_mutating_method(obj, name)) return unsafe(obj, name);
      return missing_attribute(obj, name);
    default: return missing_attribute(obj, name);
  }
}

static bool index_of(const Value& key, size_t size, size_t* out) {
  if (key.kind != Value::Kind::kInt && key.kind != Value::Kind::kBool) return false;
  int64_t i = key.kind == Value::Kind::kInt ? key.i : key.b;
  if (i < 0) i += static_cast<int64_t>(size);
  if (i < 0 || i >= static_cast<int64_t>(size)) return false;
  *out = static_cast<size_t>(i);
  return true;
}

Value get_item(const RenderContext& ctx, const Value& obj, const Value& key) {
  switch (obj.kind) {
    case Value::Kind::kUndefined: raise_undefined(obj);
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      if (key.is_string()) {
        if (const Value* v = obj.dict->find(key.str())) return *v;
        if (obj.kind == Value::Kind::kDict) {
          Value m = dict_method(obj, key.str());  // jinja2 falls back to getattr
          if (m.kind == Value::Kind::kFunction) return m;
        }
      }
      return missing_item(obj, key);
    case Value::Kind::kList: {
      size_t k;
      if (index_of(key, obj.list->size(), &k)) return (*obj.list)[k];
      if (key.is_string()) return get_attribute(ctx, obj, key.str());
      return missing_item(obj, key);
    }
    case Value::Kind::kString: {
      if (key.is_string()) return get_attribute(ctx, obj, key.str());
      const std::vector<uint32_t> cps = utf8_decode(obj.str());
      size_t k;
      if (index_of(key, cps.size(), &k)) return Value::string(utf8_encode(cps, k, k + 1));
      return missing_item(obj, key);
    }
    default:
      return missing_item(obj, key);
  }
}

// Python slice indices (negative counts from the end; clamp; step may be negative).
Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  auto as_int = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (v.kind == Value::Kind::kInt) return v.i;
    if (v.kind == Value::Kind::kBool) return static_cast<int64_t>(v.b);
    throw Error(std::string("slice ") + what + " must be an integer or None");
  };
  if (obj.is_undefined()) raise_undefined(obj);
  if (!obj.is_list() && !obj.is_string()) throw Error(std::string("'") + obj.type_name() + "' object is not subscriptable");
  std::vector<uint32_t> cps;
  const int64_t n = obj.is_list() ? static_cast<int64_t>(obj.list->size())
                                   : static_cast<int64_t>((cps = utf8_decode(obj.str())).size());
  const int64_t step = as_int(step_v, "step").value_or(1);
  if (step == 0) throw Error("slice step cannot be zero");
  auto fix = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t start = fix(as_int(start_v, "start"), step > 0 ? 0 : n - 1);
  const int64_t stop = fix(as_int(stop_v, "stop"), step > 0 ? n : -1);
  std::vector<size_t> picks;
  for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) picks.push_back(static_cast<size_t>(k));
  if (obj.is_list()) {
    ValueList out;
    for (size_t k : picks) out.push_back((*obj.list)[k]);
    return Value::make_list(std::move(out), obj.is_tuple);
  }
  std::vector<uint32_t> out;
  for (size_t k : picks) out.push_back(cps[k]);
  return Value::string(utf8_encode(out, 0, out.size()));
}

ValueList iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return *v.list;
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& kv : v.dict->items) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Value::Kind::kString: {
      const std::vector<uint32_t> cps = utf8_decode(v.str());
      ValueList chars;
      for (size_t k = 0; k < cps.size(); ++k) chars.push_back(Value::string(utf8_encode(cps, k, k + 1)));
      return chars;
    }
    default: throw Error(std::string("'") + v.type_name() + "' object is not iterable");
  }
}

bool contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!needle.is_string()) {
        throw Error(std::string("'in <string>' requires string as left operand, not ") + needle.type_name());
      }
      return haystack.str().find(needle.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : *haystack.list) if (values_equal(v, needle)) return true;
      return false;
    case Value::Kind::kDict:
      return needle.is_string() && haystack.dict->find(needle.str()) != nullptr;
    default: throw Error(std::string("argument of type '") + haystack.type_name() + "' is not iterable");
  }
}

Dict make_globals(const RenderContext* ctx) {
  Dict g;
  g.set("range", Value::function([ctx](const CallArgs& a) {
    int64_t start = 0, stop = 0, step = 1;
    auto num = [](const Value& v) {
      if (v.kind == Value::Kind::kInt) return v.i;
      if (v.kind == Value::Kind::kBool) return static_cast<int64_t>(v.b);
      throw Error(std::string("'") + v.type_name() + "' object cannot be interpreted as an integer");
    };
    if (a.positional.size() == 1) {
      stop = num(a.positional[0]);
    } else if (a.positional.size() == 2 || a.positional.size() == 3) {
      start = num(a.positional[0]);
      stop = num(a.positional[1]);
      if (a.positional.size() == 3) step = num(a.positional[2]);
    } else {
      throw Error("range expected 1 to 3 arguments");
    }
    if (step == 0) throw Error("range() arg 3 must not be zero");
    const double count = std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step)));
    // jinja2's sandbox caps range() at 100000 items (MAX_RANGE).
    if (count > 100000) throw Error("range too big, maximum size for range is 100000");
    ctx->check_size(static_cast<size_t>(count));
    ValueList out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) out.push_back(Value::integer(k));
    return Value::make_list(std::move(out));
  }));
  auto from_kwargs = [](const CallArgs& a, const char* what) {
    Dict d;
    for (const Value& p : a.positional) {
      if (!p.is_mapping() && p.kind != Value::Kind::kNamespace) throw Error(std::string(what) + "() takes keyword arguments or a mapping");
      for (const auto& kv : p.dict->items) d.set(kv.first, kv.second);
    }
    for (const auto& kv : a.keyword) d.set(kv.first, kv.second);
    return d;
  };
  g.set("namespace", Value::function([from_kwargs](const CallArgs& a) { return Value::make_namespace(from_kwargs(a, "namespace")); }));
  g.set("dict", Value::function([from_kwargs](const CallArgs& a) { return Value::make_dict(from_kwargs(a, "dict")); }));
  g.set("raise_exception", Value::function([](const CallArgs& a) -> Value {
    const Value* m = a.get(0, "message");
    throw Error("raise_exception: " + (m ? m->to_str() : std::string()));
  }));
  g.set("strftime_now", Value::function([ctx](const CallArgs& a) {
    const Value* f = a.get(0, "format");
    if (!f || !f->is_string()) throw Error("strftime_now() needs a format string");
    std::tm tm{};
    const std::time_t now = ctx->now;
    localtime_r(&now, &tm);
    char buf[512];
    const size_t n = f->str().size() < 200 ? std::strftime(buf, sizeof(buf), f->str().c_str(), &tm) : 0;
    return Value::string(std::string(buf, n));
  }));
  return g;
}

}  // namespace weft::jinja
