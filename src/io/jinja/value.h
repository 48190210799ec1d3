// Values of weft's Jinja interpreter: Python's object model cut down to what chat templates use
// (None, bool, int, float, str, list/tuple, dict with insertion order, namespace, callables and
// jinja2's Undefined), with Python's str()/repr() and json.dumps spellings.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace weft::jinja {

// Raised anywhere below Template::render and turned into a Status there; carries the template
// position (line:column, 1-based) when known.
struct Error : std::runtime_error {
  Error(const std::string& message, int line = 0, int column = 0)
      : std::runtime_error(message), line(line), column(column) {}
  int line, column;
};

struct Value;
using ValueList = std::vector<Value>;
// Python dicts keep insertion order; keys are strings (the JSON inputs and dict literals).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  Value* find(const std::string& key);
  void set(const std::string& key, Value v);
};
struct CallArgs {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The positional argument i or the keyword `name`, else nullptr.
  const Value* get(size_t i, const char* name) const;
};
using Function = std::function<Value(const CallArgs&)>;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const std::string> s;  // kString; kUndefined: the name that was looked up
  std::shared_ptr<ValueList> list;       // kList (is_tuple: printed with parentheses)
  std::shared_ptr<Dict> dict;            // kDict, kNamespace (the only mutable kind)
  std::shared_ptr<const Function> fn;    // kFunction
  bool is_tuple = false;
  // Nesting depth of a list/dict/namespace (0 for scalars). Building anything deeper than
  // kMaxValueDepth is an error, so printing, comparing and freeing values never recurse without
  // bound; namespaces (the only mutable values) may not hold namespaces, so no value is cyclic.
  uint32_t depth = 0;
  static constexpr uint32_t kMaxValueDepth = 512;
  bool is_safe = false;  // jinja2 Markup (from |safe / |escape); printing is the same here

  static Value undefined(std::string name = "");
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(ValueList v, bool tuple = false);
  static Value make_dict(Dict d);
  static Value make_namespace(Dict d);
  static Value function(Function fn);
  static Value from_json(const nlohmann::ordered_json& j, uint32_t depth = 0);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_mapping() const { return kind == Kind::kDict; }
  const std::string& str() const { return *s; }

  bool truthy() const;         // Python bool()
  std::string to_str() const;  // Python str(); Undefined prints as ""
  std::string repr() const;    // Python repr()
  const char* type_name() const;  // Python's type name, for error messages
};

// Whether v is or holds a namespace (namespace attributes may not: see Value::depth).
bool holds_namespace(const Value& v);

// Python ==, and a total order for sort/dictsort (numbers, then strings; errors across types).
bool values_equal(const Value& a, const Value& b);
int compare_values(const Value& a, const Value& b);  // <0, 0, >0; throws Error when unordered

// json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=...), as Python
// writes it (float repr, key order, escapes). indent < 0: None.
struct JsonDumpOptions {
  int indent = -1;
  std::string item_separator, key_separator;  // empty: json.dumps defaults for the indent
  bool sort_keys = false;
  bool ensure_ascii = false;
};
std::string json_dumps(const Value& v, const JsonDumpOptions& options);
std::string python_float_repr(double v);

// UTF-8 code points (Python indexes str by code point). Invalid bytes count as one each.
std::vector<uint32_t> utf8_decode(const std::string& s);
std::string utf8_encode(const std::vector<uint32_t>& cps, size_t begin, size_t end);
size_t utf8_length(const std::string& s);

}  // namespace weft::jinja
