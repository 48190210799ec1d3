// Fuzzes the server's request parsers (parse_chat_request, parse_completion_request: any bytes a
// client may POST) and the output parser on the same bytes (any text a model may generate, fed
// in two pieces cut at an input-chosen point). Promises checked: an error is a 4xx with a message
// and a JSON error body; an accepted chat request has a non-empty message array whose contents
// are strings or null; the output parser's tool calls carry a name and an arguments object.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "server/output_parser.h"
#include "server/request.h"

namespace {

void check_error(const weft::server::RequestError& e) {
  if (e.status < 400 || e.status >= 500 || e.message.empty()) std::abort();
  auto j = nlohmann::json::parse(weft::server::error_body(e), nullptr, false);
  if (j.is_discarded() || !j["error"]["message"].is_string()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  weft::server::RequestLimits limits;
  weft::server::ChatRequest chat;
  if (auto e = weft::server::parse_chat_request(body, limits, &chat)) {
    check_error(*e);
  } else {
    if (!chat.messages.is_array() || chat.messages.empty()) std::abort();
    for (const auto& m : chat.messages)
      if (!m["content"].is_string() && !m["content"].is_null()) std::abort();
    if (chat.sampling.stop.size() > limits.max_stop) std::abort();
  }
  weft::server::CompletionRequest completion;
  if (auto e = weft::server::parse_completion_request(body, limits, &completion)) check_error(*e);
  else if (!completion.prompt && !completion.prompt_ids) std::abort();

  weft::server::OutputParserOptions o;
  o.tools = size > 0 && (data[0] & 1);
  o.starts_in_reasoning = size > 0 && (data[0] & 2);
  weft::server::OutputParser parser(o);
  const size_t cut = size > 0 ? data[0] % (size + 1) : 0;
  weft::server::OutputDelta d = parser.push(std::string_view(body).substr(0, cut));
  d.append(parser.push(std::string_view(body).substr(cut)));
  d.append(parser.finish());
  for (const auto& c : d.tool_calls) {
    if (c.name.empty()) std::abort();
    auto args = nlohmann::json::parse(c.arguments, nullptr, false);
    if (args.is_discarded() || !args.is_object()) std::abort();
  }
  return 0;
}
