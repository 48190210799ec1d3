// Fuzzes the chat-template interpreter: parse arbitrary template text, then render it over a fixed
// conversation (system, user, assistant tool calls, tool results, tools) with small limits. Any
// outcome but a rendering or a clear error (crash, sanitizer report, leak, hang) is a failure.
//
// Input: template text | optional messages JSON (replaces the fixed conversation), cut at
// kPartSeparator (fuzz_util.h).
#include <cstdint>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "io/chat_template.h"
#include "io/jinja/template.h"

namespace {

const char* kConversation = R"({
  "messages": [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Zürich? <tool_response>"},
    {"role": "assistant", "content": "<think>\nhm\n</think>\n\nLet me check.", "reasoning_content": null,
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "n": [1, 2.5, true, null]}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21}"},
    {"role": "user", "content": [{"type": "text", "text": "thanks"}, {"type": "image"}]}
  ],
  "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
  "add_generation_prompt": true, "documents": null, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false
})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> parts = weft::fuzz::split_parts(data, size, 2);
  auto parsed = weft::jinja::Template::parse(parts[0]);
  // ChatTemplate::parse must agree with the interpreter on what parses.
  if (weft::ChatTemplate::parse(parts[0]).ok() != parsed.ok()) std::abort();
  if (!parsed.ok()) return 0;
  nlohmann::ordered_json vars = nlohmann::ordered_json::parse(kConversation);
  if (!parts[1].empty()) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::parse(parts[1], nullptr, /*allow_exceptions=*/false);
    if (!messages.is_discarded()) vars["messages"] = messages;
  }
  weft::jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_steps = 100000;
  limits.max_call_depth = 32;
  limits.now = 1767268800;
  auto out = parsed.value()->render(vars, limits);
  if (out.ok() && out.value().size() > limits.max_output_bytes) std::abort();
  return 0;
}
