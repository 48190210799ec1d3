// Chat templates: finds a model's Jinja chat template (chat_template.jinja, tokenizer_config.json
// or GGUF metadata) and renders OpenAI-style messages through it exactly as transformers'
// apply_chat_template(tokenize=False) does, with weft's own Jinja interpreter (src/io/jinja).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace weft {

namespace jinja { class Template; }

// Inputs are ordered_json, not json: Python dicts keep insertion order and templates print tools
// and arguments with tojson, so key order must survive for a byte-identical rendering. Parse
// requests with nlohmann::ordered_json::parse to keep the client's order (a plain json converts
// too, with its keys sorted).
struct ChatTemplateInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // OpenAI-style messages (role, content, tool_calls, ...)
  nlohmann::ordered_json tools;                                       // OpenAI tools array, or null
  bool add_generation_prompt = true;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();   // more template variables, e.g. {"enable_thinking": false}
  std::optional<int64_t> now_unix;  // strftime_now's clock (reproducible tests); unset: the wall clock
};

class ChatTemplate {
 public:
  // Parses template text; errors name line:column. bos/eos are the special-token strings the
  // template sees as bos_token / eos_token ("" when the model has none).
  static Result<ChatTemplate> parse(std::string source, std::string bos_token = "",
                                    std::string eos_token = "");
  // The model's template: MODEL_DIR/chat_template.jinja (or chat_template.json), else tokenizer_config.json "chat_template"
  // (a string, or a list of {name, template}: the "default" one), else a GGUF file's
  // tokenizer.chat_template; bos/eos token strings from tokenizer_config.json / GGUF metadata.
  // No template: an error that says so and names --chat-template FILE.
  static Result<ChatTemplate> for_model(const std::string& model_path);
  // A template file given by the user (--chat-template FILE), with the model's bos/eos strings
  // when model_path is not empty.
  static Result<ChatTemplate> from_file(const std::string& template_path,
                                        const std::string& model_path = "");

  // As transformers' apply_chat_template(tokenize=False). Thread-safe (const, no shared state).
  Result<std::string> render(const ChatTemplateInput& in) const;
  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  std::string source_;
  std::string bos_token_, eos_token_;
  std::shared_ptr<const jinja::Template> template_;
};

}  // namespace weft
