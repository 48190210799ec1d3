#include "server/reply.h"

namespace weft::server {

using ojson = nlohmann::ordered_json;

namespace {

std::string trim(const std::string& s) {
  const auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  size_t a = 0, b = s.size();
  while (a < b && ws(s[a])) ++a;
  while (b > a && ws(s[b - 1])) --b;
  return s.substr(a, b - a);
}

}  // namespace

ReplyBuilder::ReplyBuilder(const Tokenizer* tokenizer, ReplyOptions options)
    : tokenizer_(tokenizer), options_(std::move(options)), parser_(options_.parser) {}

std::string ReplyBuilder::finish_reason() const {
  if (!all_.tool_calls.empty() && reason_ == "stop") return "tool_calls";
  return reason_ == "length" ? "length" : "stop";
}

ojson ReplyBuilder::usage() const {
  ojson u;
  u["prompt_tokens"] = prompt_tokens_;
  u["completion_tokens"] = completion_tokens_;
  u["total_tokens"] = prompt_tokens_ + completion_tokens_;
  u["prompt_tokens_details"] = {{"cached_tokens", cached_tokens_}};
  return u;
}

ojson ReplyBuilder::chunk(ojson choice) const {
  ojson c;
  c["id"] = options_.id;
  c["object"] = options_.chat ? "chat.completion.chunk" : "text_completion";
  c["created"] = options_.created;
  c["model"] = options_.model;
  c["system_fingerprint"] = "weft";
  c["choices"] = ojson::array({std::move(choice)});
  if (options_.include_usage) c["usage"] = nullptr;
  return c;
}

ojson ReplyBuilder::chat_logprobs(const std::vector<TokenLogprob>& lps) const {
  auto entry = [&](int32_t id, float lp) {
    const std::string bytes = tokenizer_ ? tokenizer_->token_bytes(id) : std::to_string(id);
    ojson e;
    e["token"] = bytes;
    e["logprob"] = lp;
    ojson b = ojson::array();
    for (unsigned char ch : bytes) b.push_back(int(ch));
    e["bytes"] = b;
    return e;
  };
  ojson content = ojson::array();
  for (const TokenLogprob& t : lps) {
    ojson e = entry(t.id, t.logprob);
    ojson top = ojson::array();
    for (const auto& [id, lp] : t.top) top.push_back(entry(id, lp));
    e["top_logprobs"] = top;
    content.push_back(e);
  }
  return {{"content", content}};
}

ojson ReplyBuilder::completion_logprobs(const std::vector<TokenLogprob>& lps, size_t* offset) const {
  ojson tokens = ojson::array(), token_lps = ojson::array(), tops = ojson::array(), offsets = ojson::array();
  for (const TokenLogprob& t : lps) {
    const std::string s = tokenizer_ ? tokenizer_->token_bytes(t.id) : std::to_string(t.id);
    tokens.push_back(s);
    token_lps.push_back(t.logprob);
    ojson top = ojson::object();
    for (const auto& [id, lp] : t.top) top[tokenizer_ ? tokenizer_->token_bytes(id) : std::to_string(id)] = lp;
    tops.push_back(top);
    offsets.push_back(*offset);
    *offset += s.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

ojson ReplyBuilder::tool_call_json(const ToolCall& c, size_t index, bool with_index) const {
  ojson j;
  if (with_index) j["index"] = index;
  j["id"] = "call_" + options_.id.substr(options_.id.find('-') + 1) + "_" + std::to_string(index);
  j["type"] = "function";
  j["function"] = {{"name", c.name}, {"arguments", c.arguments}};
  return j;
}

std::string ReplyBuilder::stream(const GenerationEvent& e) {
  std::string out;
  if (e.done) {
    done_ = true;
    reason_ = e.finish_reason;
    error_ = e.error;
    prompt_tokens_ = e.prompt_tokens;
    cached_tokens_ = e.cached_tokens;
    completion_tokens_ = e.completion_tokens;
  }
  if (!options_.chat) {
    if (!e.text.empty() || !e.logprobs.empty() || e.done) {
      ojson choice;
      choice["index"] = 0;
      choice["text"] = e.text;
      choice["logprobs"] = options_.top_logprobs >= 0 ? completion_logprobs(e.logprobs, &text_offset_) : ojson(nullptr);
      choice["finish_reason"] = e.done ? ojson(finish_reason()) : ojson(nullptr);
      out += sse_event(chunk(choice));
    }
  } else {
    if (!sent_role_) {
      sent_role_ = true;
      ojson choice;
      choice["index"] = 0;
      choice["delta"] = {{"role", "assistant"}, {"content", ""}};
      choice["logprobs"] = nullptr;
      choice["finish_reason"] = nullptr;
      out += sse_event(chunk(choice));
    }
    OutputDelta d = parser_.push(e.text);
    if (e.done) d.append(parser_.finish());
    const bool has_lp = options_.top_logprobs >= 0 && !e.logprobs.empty();
    if (!d.empty() || has_lp) {
      ojson delta = ojson::object();
      if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
      if (!d.content.empty()) delta["content"] = d.content;
      if (!d.tool_calls.empty()) {
        ojson calls = ojson::array();
        for (const ToolCall& c : d.tool_calls) calls.push_back(tool_call_json(c, tool_calls_sent_++, true));
        delta["tool_calls"] = calls;
      }
      ojson choice;
      choice["index"] = 0;
      choice["delta"] = delta;
      choice["logprobs"] = has_lp ? chat_logprobs(e.logprobs) : ojson(nullptr);
      choice["finish_reason"] = nullptr;
      out += sse_event(chunk(choice));
    }
    all_.append(std::move(d));
    if (e.done) {
      ojson choice;
      choice["index"] = 0;
      choice["delta"] = ojson::object();
      choice["logprobs"] = nullptr;
      choice["finish_reason"] = finish_reason();
      out += sse_event(chunk(choice));
    }
  }
  if (e.done) {
    if (options_.include_usage) {
      ojson u = chunk(ojson());
      u["choices"] = ojson::array();
      u["usage"] = usage();
      out += sse_event(u);
    }
    out += sse_done();
  }
  return out;
}

void ReplyBuilder::add(const GenerationEvent& e) {
  if (options_.chat) all_.append(parser_.push(e.text));
  else text_ += e.text;
  logprobs_.insert(logprobs_.end(), e.logprobs.begin(), e.logprobs.end());
  if (e.done) {
    if (options_.chat) all_.append(parser_.finish());
    done_ = true;
    reason_ = e.finish_reason;
    error_ = e.error;
    prompt_tokens_ = e.prompt_tokens;
    cached_tokens_ = e.cached_tokens;
    completion_tokens_ = e.completion_tokens;
  }
}

ojson ReplyBuilder::body() {
  ojson b;
  b["id"] = options_.id;
  b["object"] = options_.chat ? "chat.completion" : "text_completion";
  b["created"] = options_.created;
  b["model"] = options_.model;
  b["system_fingerprint"] = "weft";
  ojson choice;
  choice["index"] = 0;
  if (options_.chat) {
    ojson msg;
    msg["role"] = "assistant";
    const std::string content = trim(all_.content);
    msg["content"] = content.empty() && !all_.tool_calls.empty() ? ojson(nullptr) : ojson(content);
    if (!all_.reasoning.empty()) msg["reasoning_content"] = trim(all_.reasoning);
    if (!all_.tool_calls.empty()) {
      ojson calls = ojson::array();
      for (size_t i = 0; i < all_.tool_calls.size(); ++i) calls.push_back(tool_call_json(all_.tool_calls[i], i, false));
      msg["tool_calls"] = calls;
    }
    choice["message"] = msg;
    choice["logprobs"] = options_.top_logprobs >= 0 ? chat_logprobs(logprobs_) : ojson(nullptr);
  } else {
    choice["text"] = text_;
    size_t offset = 0;
    choice["logprobs"] = options_.top_logprobs >= 0 ? completion_logprobs(logprobs_, &offset) : ojson(nullptr);
  }
  choice["finish_reason"] = finish_reason();
  b["choices"] = ojson::array({choice});
  b["usage"] = usage();
  return b;
}

}  // namespace weft::server
