#include "server/request.h"

#include <cmath>

#include "io/tokenizer.h"

namespace weft::server {
namespace {

using ojson = nlohmann::ordered_json;

RequestError bad(std::string message, std::string param = "") {
  RequestError e;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

// The root object of a body, or the error that says why there is none.
std::optional<RequestError> parse_root(const std::string& body, ojson* root) {
  if (!is_valid_utf8(body)) return bad("the request body is not valid UTF-8");
  *root = ojson::parse(body, nullptr, /*allow_exceptions=*/false);
  if (root->is_discarded()) return bad("the request body is not valid JSON");
  if (!root->is_object()) return bad("the request body must be a JSON object");
  return std::nullopt;
}

bool present(const ojson& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

std::optional<RequestError> get_number(const ojson& j, const char* key, double lo, double hi, std::optional<double>* out) {
  if (!present(j, key)) return std::nullopt;
  if (!j[key].is_number()) return bad(std::string("'") + key + "' must be a number", key);
  const double v = j[key].get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    return bad(std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi), key);
  *out = v;
  return std::nullopt;
}

std::optional<RequestError> get_int(const ojson& j, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  if (!present(j, key)) return std::nullopt;
  if (!j[key].is_number_integer()) return bad(std::string("'") + key + "' must be an integer", key);
  int64_t v;
  if (j[key].is_number_unsigned()) {
    const uint64_t u = j[key].get<uint64_t>();
    if (u > uint64_t(INT64_MAX)) return bad(std::string("'") + key + "' is out of range", key);
    v = int64_t(u);
  } else {
    v = j[key].get<int64_t>();
  }
  if (v < lo || v > hi)
    return bad(std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi), key);
  *out = v;
  return std::nullopt;
}

std::optional<RequestError> get_bool(const ojson& j, const char* key, bool* out) {
  if (!present(j, key)) return std::nullopt;
  if (!j[key].is_boolean()) return bad(std::string("'") + key + "' must be true or false", key);
  *out = j[key].get<bool>();
  return std::nullopt;
}

std::optional<RequestError> get_string(const ojson& j, const char* key, std::string* out) {
  if (!present(j, key)) return std::nullopt;
  if (!j[key].is_string()) return bad(std::string("'") + key + "' must be a string", key);
  *out = j[key].get<std::string>();
  return std::nullopt;
}

#define WEFT_TRY(expr)                  \
  do {                                  \
    if (auto err_ = (expr)) return err_; \
  } while (0)

// The fields shared by both endpoints. chat: top_logprobs (0..20) with logprobs: true; else
// logprobs is an integer (0..5).
std::optional<RequestError> parse_sampling(const ojson& j, const RequestLimits& limits, bool chat, SamplingFields* s) {
  WEFT_TRY(get_number(j, "temperature", 0.0, 2.0, &s->temperature));
  WEFT_TRY(get_number(j, "top_p", 0.0, 1.0, &s->top_p));
  if (s->top_p && *s->top_p <= 0.0) return bad("'top_p' must be greater than 0", "top_p");
  WEFT_TRY(get_number(j, "min_p", 0.0, 1.0, &s->min_p));
  WEFT_TRY(get_int(j, "top_k", 0, 1 << 30, &s->top_k));
  std::optional<int64_t> seed;
  WEFT_TRY(get_int(j, "seed", INT64_MIN, INT64_MAX, &seed));
  if (seed) s->seed = uint64_t(*seed);
  std::optional<int64_t> n;
  WEFT_TRY(get_int(j, "n", 1, 1, &n));
  std::optional<int64_t> mt, mct;
  WEFT_TRY(get_int(j, "max_tokens", 1, limits.max_tokens, &mt));
  WEFT_TRY(get_int(j, "max_completion_tokens", 1, limits.max_tokens, &mct));
  s->max_tokens = mct ? mct : mt;
  for (const char* ignored : {"presence_penalty", "frequency_penalty"}) {
    std::optional<double> v;
    WEFT_TRY(get_number(j, ignored, -2.0, 2.0, &v));
  }
  std::string user;
  WEFT_TRY(get_string(j, "user", &user));
  WEFT_TRY(get_bool(j, "stream", &s->stream));
  WEFT_TRY(get_bool(j, "ignore_eos", &s->ignore_eos));
  WEFT_TRY(get_bool(j, "cache_prompt", &s->cache_prompt));
  if (present(j, "stream_options")) {
    const ojson& so = j["stream_options"];
    if (!so.is_object()) return bad("'stream_options' must be an object", "stream_options");
    WEFT_TRY(get_bool(so, "include_usage", &s->include_usage));
  }
  if (present(j, "stop")) {
    const ojson& st = j["stop"];
    if (st.is_string()) {
      s->stop.push_back(st.get<std::string>());
    } else if (st.is_array()) {
      if (st.size() > limits.max_stop) return bad("at most " + std::to_string(limits.max_stop) + " stop strings", "stop");
      for (const ojson& x : st) {
        if (!x.is_string()) return bad("'stop' must be a string or an array of strings", "stop");
        s->stop.push_back(x.get<std::string>());
      }
    } else {
      return bad("'stop' must be a string or an array of strings", "stop");
    }
    for (const std::string& x : s->stop) {
      if (x.empty()) return bad("stop strings must not be empty", "stop");
      if (x.size() > limits.max_stop_bytes)
        return bad("a stop string is longer than " + std::to_string(limits.max_stop_bytes) + " bytes", "stop");
    }
  }
  if (chat) {
    bool logprobs = false;
    WEFT_TRY(get_bool(j, "logprobs", &logprobs));
    std::optional<int64_t> top;
    WEFT_TRY(get_int(j, "top_logprobs", 0, limits.max_top_logprobs, &top));
    if (top && !logprobs) return bad("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (logprobs) s->top_logprobs = int(top.value_or(0));
  } else {
    std::optional<int64_t> lp;
    WEFT_TRY(get_int(j, "logprobs", 0, 5, &lp));
    if (lp) s->top_logprobs = int(*lp);
  }
  return std::nullopt;
}

// Message content: a string, null, or an array of {"type": "text", "text": ...} parts (joined).
std::optional<RequestError> normalize_content(ojson& m, const std::string& where, bool may_be_null) {
  if (!m.contains("content") || m["content"].is_null()) {
    if (!may_be_null) return bad(where + ".content is required", "messages");
    m["content"] = nullptr;
    return std::nullopt;
  }
  ojson& c = m["content"];
  if (c.is_string()) return std::nullopt;
  if (!c.is_array()) return bad(where + ".content must be a string or an array of text parts", "messages");
  std::string joined;
  for (const ojson& part : c) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string())
      return bad(where + ".content parts must be {\"type\": \"text\", \"text\": string} (weft serves text only)", "messages");
    joined += part["text"].get<std::string>();
  }
  c = joined;
  return std::nullopt;
}

std::optional<RequestError> normalize_tool_calls(ojson& m, const std::string& where) {
  if (!present(m, "tool_calls")) return std::nullopt;
  ojson& calls = m["tool_calls"];
  if (!calls.is_array()) return bad(where + ".tool_calls must be an array", "messages");
  for (size_t i = 0; i < calls.size(); ++i) {
    ojson& c = calls[i];
    const std::string w = where + ".tool_calls[" + std::to_string(i) + "]";
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
      return bad(w + " must be {\"type\": \"function\", \"function\": {...}}", "messages");
    ojson& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string()) return bad(w + ".function.name must be a string", "messages");
    if (present(c, "id") && !c["id"].is_string()) return bad(w + ".id must be a string", "messages");
    // Templates iterate over the arguments (Qwen3.5's XML form) or print them with tojson: give
    // them the object, as transformers users do. A string that is not a JSON object stays a string.
    if (present(f, "arguments")) {
      if (f["arguments"].is_string()) {
        ojson parsed = ojson::parse(f["arguments"].get<std::string>(), nullptr, false);
        if (!parsed.is_discarded() && parsed.is_object()) f["arguments"] = parsed;
      } else if (!f["arguments"].is_object()) {
        return bad(w + ".function.arguments must be a JSON string or an object", "messages");
      }
    } else {
      f["arguments"] = ojson::object();
    }
  }
  return std::nullopt;
}

std::optional<RequestError> parse_messages(ojson& messages, const RequestLimits& limits) {
  if (!messages.is_array()) return bad("'messages' must be an array", "messages");
  if (messages.empty()) return bad("'messages' must not be empty", "messages");
  if (messages.size() > limits.max_messages)
    return bad("at most " + std::to_string(limits.max_messages) + " messages", "messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    ojson& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad(where + " must be an object", "messages");
    if (!m.contains("role") || !m["role"].is_string()) return bad(where + ".role must be a string", "messages");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
      return bad(where + ".role '" + role + "' is not one of system, developer, user, assistant, tool", "messages");
    WEFT_TRY(normalize_content(m, where, role == "assistant"));
    if (role == "assistant") WEFT_TRY(normalize_tool_calls(m, where));
    if (present(m, "name") && !m["name"].is_string()) return bad(where + ".name must be a string", "messages");
    if (present(m, "tool_call_id") && !m["tool_call_id"].is_string())
      return bad(where + ".tool_call_id must be a string", "messages");
    if (present(m, "reasoning_content") && !m["reasoning_content"].is_string())
      return bad(where + ".reasoning_content must be a string", "messages");
  }
  return std::nullopt;
}

std::optional<RequestError> parse_tools(const ojson& j, const RequestLimits& limits, ChatRequest* out) {
  if (present(j, "tools")) {
    const ojson& tools = j["tools"];
    if (!tools.is_array()) return bad("'tools' must be an array", "tools");
    if (tools.size() > limits.max_tools) return bad("at most " + std::to_string(limits.max_tools) + " tools", "tools");
    for (size_t i = 0; i < tools.size(); ++i) {
      const ojson& t = tools[i];
      const std::string w = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("type") || t["type"] != "function" || !t.contains("function") ||
          !t["function"].is_object())
        return bad(w + " must be {\"type\": \"function\", \"function\": {...}}", "tools");
      const ojson& f = t["function"];
      if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
        return bad(w + ".function.name must be a non-empty string", "tools");
      if (present(f, "description") && !f["description"].is_string())
        return bad(w + ".function.description must be a string", "tools");
      if (present(f, "parameters") && !f["parameters"].is_object())
        return bad(w + ".function.parameters must be an object (a JSON Schema)", "tools");
    }
    if (!tools.empty()) out->tools = tools;
  }
  if (present(j, "tool_choice")) {
    const ojson& tc = j["tool_choice"];
    if (tc.is_string()) {
      const std::string s = tc.get<std::string>();
      if (s == "auto") out->tool_choice = ToolChoice::kAuto;
      else if (s == "none") out->tool_choice = ToolChoice::kNone;
      else if (s == "required") out->tool_choice = ToolChoice::kRequired;
      else return bad("'tool_choice' must be \"auto\", \"none\", \"required\" or a function", "tool_choice");
    } else if (tc.is_object() && tc.contains("function") && tc["function"].is_object() &&
               tc["function"].contains("name") && tc["function"]["name"].is_string()) {
      out->tool_choice = ToolChoice::kFunction;
      out->tool_choice_name = tc["function"]["name"].get<std::string>();
    } else {
      return bad("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", ...}", "tool_choice");
    }
    if (out->tool_choice != ToolChoice::kNone && out->tool_choice != ToolChoice::kAuto && out->tools.is_null())
      return bad("'tool_choice' names tools but 'tools' is empty", "tool_choice");
  }
  return std::nullopt;
}

}  // namespace

std::optional<RequestError> parse_chat_request(const std::string& body, const RequestLimits& limits, ChatRequest* out) {
  ojson j;
  WEFT_TRY(parse_root(body, &j));
  WEFT_TRY(get_string(j, "model", &out->model));
  if (!j.contains("messages")) return bad("'messages' is required", "messages");
  out->messages = j["messages"];
  WEFT_TRY(parse_messages(out->messages, limits));
  WEFT_TRY(parse_tools(j, limits, out));
  if (present(j, "chat_template_kwargs")) {
    if (!j["chat_template_kwargs"].is_object()) return bad("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    out->template_kwargs = j["chat_template_kwargs"];
  }
  if (present(j, "response_format")) {
    const ojson& rf = j["response_format"];
    if (!rf.is_object() || !rf.contains("type") || rf["type"] != "text")
      return bad("only 'response_format': {\"type\": \"text\"} is supported", "response_format");
  }
  return parse_sampling(j, limits, /*chat=*/true, &out->sampling);
}

std::optional<RequestError> parse_completion_request(const std::string& body, const RequestLimits& limits,
                                                     CompletionRequest* out) {
  ojson j;
  WEFT_TRY(parse_root(body, &j));
  WEFT_TRY(get_string(j, "model", &out->model));
  if (!present(j, "prompt")) return bad("'prompt' is required", "prompt");
  const ojson& p = j["prompt"];
  if (p.is_string()) {
    out->prompt = p.get<std::string>();
  } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
    out->prompt = p[0].get<std::string>();
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    std::vector<int32_t> ids;
    for (const ojson& x : p) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
        return bad("'prompt' token ids must be non-negative integers", "prompt");
      ids.push_back(int32_t(x.get<int64_t>()));
    }
    out->prompt_ids = std::move(ids);
  } else {
    return bad("'prompt' must be a string, one string in an array, or an array of token ids (one prompt per request)",
               "prompt");
  }
  bool echo = false;
  WEFT_TRY(get_bool(j, "echo", &echo));
  if (echo) return bad("'echo' is not supported", "echo");
  if (present(j, "suffix")) return bad("'suffix' is not supported", "suffix");
  std::optional<int64_t> best_of;
  WEFT_TRY(get_int(j, "best_of", 1, 1, &best_of));
  WEFT_TRY(parse_sampling(j, limits, /*chat=*/false, &out->sampling));
  if (!out->sampling.max_tokens) out->sampling.max_tokens = std::min<int64_t>(16, limits.max_tokens);  // OpenAI's default
  return std::nullopt;
}

std::string error_body(const RequestError& e) {
  nlohmann::json j;
  j["error"]["message"] = e.message;
  j["error"]["type"] = e.type;
  j["error"]["param"] = e.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.param);
  j["error"]["code"] = nullptr;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace weft::server
