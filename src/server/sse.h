// Server-sent events as OpenAI streams them: one "data: <json>\n\n" per chunk, then
// "data: [DONE]\n\n".
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace weft::server {

inline std::string sse_event(const nlohmann::ordered_json& chunk) {
  // Generated text may hold invalid UTF-8 only in logprob token pieces: replaced, never thrown.
  return "data: " + chunk.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n\n";
}
inline std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace weft::server
