// ReplyBuilder: turns a request's GenerationEvents into OpenAI response objects — one
// chat.completion / text_completion body, or its stream of SSE chunks. Text goes through the
// OutputParser (chat only), logprobs are spelled with the tokenizer, usage carries
// prompt_tokens_details.cached_tokens (the prompt rows reused from the prefix cache).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/scheduler.h"
#include "io/tokenizer.h"
#include "server/output_parser.h"
#include "server/sse.h"

namespace weft::server {

struct ReplyOptions {
  bool chat = true;           // chat.completion(.chunk) vs text_completion
  std::string id;             // "chatcmpl-..." / "cmpl-..."
  std::string model;
  int64_t created = 0;
  bool include_usage = false;  // streaming: a last chunk with usage
  int top_logprobs = -1;       // -1: logprobs null
  OutputParserOptions parser;
};

class ReplyBuilder {
 public:
  ReplyBuilder(const Tokenizer* tokenizer, ReplyOptions options);
  // Streaming: the SSE text for this event (possibly ""), ending with [DONE] after the final one.
  std::string stream(const GenerationEvent& e);
  // Non-streaming: collect, then body() once the final event was added.
  void add(const GenerationEvent& e);
  nlohmann::ordered_json body();
  bool done() const { return done_; }
  const std::string& error() const { return error_; }

 private:
  nlohmann::ordered_json chunk(nlohmann::ordered_json choice) const;
  nlohmann::ordered_json usage() const;
  nlohmann::ordered_json chat_logprobs(const std::vector<TokenLogprob>& lps) const;
  nlohmann::ordered_json completion_logprobs(const std::vector<TokenLogprob>& lps, size_t* offset) const;
  nlohmann::ordered_json tool_call_json(const ToolCall& c, size_t index, bool with_index) const;
  std::string finish_reason() const;

  const Tokenizer* tokenizer_;
  ReplyOptions options_;
  OutputParser parser_;
  OutputDelta all_;
  std::string text_;                 // completions: the raw text
  std::vector<TokenLogprob> logprobs_;
  size_t tool_calls_sent_ = 0, text_offset_ = 0;
  bool sent_role_ = false, done_ = false;
  std::string reason_, error_;
  int64_t prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0;
};

}  // namespace weft::server
