// OutputParser: splits generated text, as it streams, into what OpenAI clients expect apart:
// `content`, `reasoning_content` (inside <think>...</think>) and `tool_calls` (Qwen's
// <tool_call>...</tool_call> blocks, in either form:
//   JSON (Qwen3):                 <tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>
//   XML (Qwen3.5 / Qwen3-Coder):  <tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>
// Text that may be the start of a marker is held back until the next piece decides it, so a
// stream never shows half a tag. A block that does not parse is returned as content, verbatim.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace weft::server {

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI sends arguments as a string)
};

struct OutputDelta {
  std::string content, reasoning;
  std::vector<ToolCall> tool_calls;
  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
  void append(OutputDelta&& d);
};

struct OutputParserOptions {
  bool reasoning = true;            // <think> blocks -> reasoning
  bool starts_in_reasoning = false;  // the prompt opened a <think> block the reply continues
  bool tools = false;               // <tool_call> blocks -> tool_calls
  nlohmann::ordered_json tools_schema;  // the request's tools (parameter types for the XML form)
};

class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions options);
  OutputDelta push(std::string_view text);
  OutputDelta finish();  // the end of the reply: held-back text is released

 private:
  enum class State { kContent, kReasoning, kToolCall };
  OutputDelta drain(bool final);
  void emit(std::string& sink, std::string_view text);
  OutputParserOptions options_;
  State state_;
  std::string buf_;
  bool strip_newlines_ = true;  // newlines right after a tag belong to the markup, not the text
};

// One <tool_call> block's inside (either form); false when it is neither.
bool parse_tool_call_block(std::string_view body, const nlohmann::ordered_json& tools_schema, ToolCall* out);

// Whether a rendered prompt leaves a <think> block open (the reply starts inside reasoning).
bool prompt_opens_reasoning(std::string_view prompt);

}  // namespace weft::server
