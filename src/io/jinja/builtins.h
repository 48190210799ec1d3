// The library a template sees: filters, tests, attribute/item access with jinja2's rules (bound
// str/dict methods included), iteration, and the globals transformers adds (raise_exception,
// strftime_now) beside jinja2's (range, namespace, dict).
#pragma once

#include <ctime>
#include <string>
#include <vector>

#include "io/jinja/value.h"

namespace weft::jinja {

// What builtins need from the running render: size limits and the clock.
struct RenderContext {
  size_t max_string_bytes = 0;
  std::time_t now = 0;
  int64_t* steps = nullptr;  // the render's step counter, shared with the interpreter
  int64_t max_steps = 0;
  // Throws when a value being built would pass the output limit (hostile templates).
  void check_size(size_t bytes) const;
  // Counts work against the step limit: builtins that walk a list or a string charge its size,
  // so a loop of filters over a large list cannot run for hours inside the step budget.
  void charge(int64_t units) const;
};
// The work a builtin does on v, in steps: list/dict elements, string bytes / 64.
int64_t work_of(const Value& v);

Value call_filter(const RenderContext& ctx, const std::string& name, const Value& value, const CallArgs& args);
bool call_test(const RenderContext& ctx, const std::string& name, const Value& value, const CallArgs& args);
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

// obj.name and obj[key] as jinja2's sandboxed getattr/getitem: dict keys, list/str indexes, and
// bound methods; a miss gives Undefined (which errors when used), never an exception, except on
// Undefined itself (jinja2 raises UndefinedError there).
Value get_attribute(const RenderContext& ctx, const Value& obj, const std::string& name);
Value get_item(const RenderContext& ctx, const Value& obj, const Value& key);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The items a for loop visits: list elements, dict keys, string code points; Undefined is empty.
ValueList iterate(const Value& v);
// `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);
// Throws the UndefinedError an Undefined value carries.
[[noreturn]] void raise_undefined(const Value& v);

// Globals: range, namespace, dict, raise_exception, strftime_now.
Dict make_globals(const RenderContext* ctx);

}  // namespace weft::jinja
