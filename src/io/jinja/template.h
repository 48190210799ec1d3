// A parsed Jinja template and its renderer: weft's own interpreter for the subset of Jinja that
// chat templates use, configured as transformers' apply_chat_template configures jinja2
// (sandboxed, trim_blocks, lstrip_blocks, loop controls, its tojson/raise_exception/strftime_now).
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "io/jinja/ast.h"

namespace weft::jinja {

// Bounds that keep a hostile template from exhausting time, memory or stack.
struct RenderLimits {
  size_t max_output_bytes = 64u << 20;   // also caps any single string or list built
  int64_t max_steps = 5'000'000;         // statements executed + loop iterations + macro calls
  int max_call_depth = 64;               // nested macro calls (recursion)
  std::optional<std::time_t> now;        // strftime_now's clock; unset: the wall clock
};

class Template {
 public:
  // Syntax errors name line:column.
  static Result<std::shared_ptr<const Template>> parse(const std::string& source);
  // variables: a JSON object whose members become template variables (null -> None). Render
  // errors (raise_exception, undefined attribute, type errors, limits) name line:column.
  Result<std::string> render(const nlohmann::ordered_json& variables, const RenderLimits& limits = {}) const;

 private:
  Body body_;
};

}  // namespace weft::jinja
