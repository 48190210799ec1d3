// Request parsing and validation for the OpenAI-compatible endpoints: JSON bodies in, typed
// requests out, or an OpenAI-style error (status, message, the offending param). Strict about
// types (a string where a number belongs is a 400, never a guess) and about limits (body size is
// httplib's; messages, stop strings, max_tokens and logprobs here). Fields weft does not act on
// but clients send by default (user, presence_penalty, ...) are type-checked and ignored.
// Pure functions with no server state: the fuzz target (fuzz/server_request_fuzz.cpp) calls them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace weft::server {

struct RequestLimits {
  int64_t max_tokens = 4096;      // cap on max_tokens / max_completion_tokens
  size_t max_messages = 4096;
  size_t max_stop = 4;            // stop strings per request (OpenAI's limit)
  size_t max_stop_bytes = 256;    // bytes per stop string
  size_t max_tools = 128;
  int max_top_logprobs = 20;
};

struct RequestError {
  int status = 400;
  std::string message;
  std::string param;  // "" when not about one field
  std::string type = "invalid_request_error";
};

// Sampling fields as the client sent them; unset ones fall back to the model's defaults.
struct SamplingFields {
  std::optional<double> temperature, top_p, min_p;
  std::optional<int64_t> top_k;
  std::optional<uint64_t> seed;
  std::optional<int64_t> max_tokens;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int top_logprobs = -1;       // -1: no logprobs
  bool ignore_eos = false;     // extension (llama.cpp's name)
  bool cache_prompt = true;    // extension (llama.cpp's name): false = no prefix reuse (a cold run)
};

enum class ToolChoice { kAuto, kNone, kRequired, kFunction };

struct ChatRequest {
  std::string model;
  nlohmann::ordered_json messages;  // validated; content parts joined to strings, arguments as objects
  nlohmann::ordered_json tools;     // null when none
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;     // kFunction
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs
  SamplingFields sampling;
};

struct CompletionRequest {
  std::string model;
  std::optional<std::string> prompt;          // text
  std::optional<std::vector<int32_t>> prompt_ids;  // or token ids
  SamplingFields sampling;
};

// Both return the error, or nothing with *out filled. The body may be any bytes.
std::optional<RequestError> parse_chat_request(const std::string& body, const RequestLimits& limits, ChatRequest* out);
std::optional<RequestError> parse_completion_request(const std::string& body, const RequestLimits& limits,
                                                     CompletionRequest* out);

// {"error": {"message", "type", "param", "code"}} as OpenAI sends it.
std::string error_body(const RequestError& e);

}  // namespace weft::server
