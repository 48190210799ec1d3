// Finding a model's chat template and rendering it with the variables transformers'
// apply_chat_template passes: messages, tools (None when absent), documents (None),
// add_generation_prompt, the special-token strings that are set, then the caller's extras.
#include "io/chat_template.h"

#include <filesystem>

#include "core/mapped_file.h"
#include "io/gguf.h"
#include "io/jinja/template.h"

namespace weft {
namespace {

using ojson = nlohmann::ordered_json;

// tokenizer_config.json spells a special token as "text" or {"content": "text", ...}.
std::string token_text(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

const char* kNoTemplateHint =
    "; give one with --chat-template FILE (a Jinja file, e.g. the model's chat_template.jinja)";

struct Found {
  std::string source, bos, eos;
  bool has_template = false;
};

Result<Found> from_dir(const std::string& dir) {
  Found f;
  const std::string config_path = dir + "/tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    Result<std::string> text = read_text_file(config_path);
    if (!text.ok()) return text.status();
    const ojson config = ojson::parse(text.value(), nullptr, false);
    if (config.is_discarded() || !config.is_object()) return Status::error(config_path + " is not a JSON object");
    if (config.contains("bos_token")) f.bos = token_text(config["bos_token"]);
    if (config.contains("eos_token")) f.eos = token_text(config["eos_token"]);
    if (config.contains("chat_template")) {
      const ojson& t = config["chat_template"];
      if (t.is_string()) {
        f.source = t.get<std::string>();
        f.has_template = true;
      } else if (t.is_array()) {  // [{name, template}, ...]: the one named "default"
        for (const ojson& entry : t) {
          if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
              entry["template"].is_string()) {
            f.source = entry["template"].get<std::string>();
            f.has_template = true;
          }
        }
        if (!f.has_template) return Status::error(config_path + ": chat_template is a list without a \"default\" entry");
      } else if (!t.is_null()) {
        return Status::error(config_path + ": chat_template is neither a string nor a list");
      }
    }
  }
  // A standalone template file wins over the config's copy, as in transformers.
  for (const char* name : {"/chat_template.jinja", "/chat_template.json"}) {
    const std::string path = dir + name;
    if (!std::filesystem::exists(path)) continue;
    Result<std::string> text = read_text_file(path);
    if (!text.ok()) return text.status();
    if (std::string(name).ends_with(".json")) {
      const ojson j = ojson::parse(text.value(), nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("chat_template") || !j["chat_template"].is_string()) {
        return Status::error(path + ": expected {\"chat_template\": \"...\"}");
      }
      f.source = j["chat_template"].get<std::string>();
    } else {
      f.source = text.value();
    }
    f.has_template = true;
    break;
  }
  return f;
}

Result<Found> from_gguf(const std::string& path) {
  Result<GgufFile> file = GgufFile::open(path);
  if (!file.ok()) return file.status();
  Found f;
  if (file->find("tokenizer.chat_template")) {
    Result<std::string> t = file->get_string("tokenizer.chat_template");
    if (!t.ok()) return t.status().with_context(path);
    f.source = t.value();
    f.has_template = true;
  }
  if (file->find("tokenizer.ggml.tokens")) {
    Result<std::vector<std::string>> tokens = file->get_string_array("tokenizer.ggml.tokens");
    if (tokens.ok()) {
      auto token = [&](const char* key) -> std::string {
        if (!file->find(key)) return "";
        Result<uint64_t> id = file->get_uint(key);
        return id.ok() && id.value() < tokens->size() ? (*tokens)[id.value()] : "";
      };
      f.bos = token("tokenizer.ggml.bos_token_id");
      f.eos = token("tokenizer.ggml.eos_token_id");
    }
  }
  return f;
}

Result<Found> find_for_model(const std::string& model_path) {
  if (std::filesystem::is_directory(model_path)) return from_dir(model_path);
  if (std::filesystem::is_regular_file(model_path)) return from_gguf(model_path);
  return Status::error(model_path + ": no such model directory or GGUF file");
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string source, std::string bos_token, std::string eos_token) {
  auto parsed = jinja::Template::parse(source);
  if (!parsed.ok()) return parsed.status();
  ChatTemplate t;
  t.source_ = std::move(source);
  t.bos_token_ = std::move(bos_token);
  t.eos_token_ = std::move(eos_token);
  t.template_ = std::move(parsed.value());
  return t;
}

Result<ChatTemplate> ChatTemplate::for_model(const std::string& model_path) {
  Result<Found> found = find_for_model(model_path);
  if (!found.ok()) return found.status();
  if (!found->has_template) {
    return Status::error(model_path + " has no chat template (looked for chat_template.jinja, tokenizer_config.json "
                         "chat_template, GGUF tokenizer.chat_template)" + kNoTemplateHint);
  }
  Result<ChatTemplate> t = parse(found->source, found->bos, found->eos);
  if (!t.ok()) return t.status().with_context(model_path + " chat template");
  return t;
}

Result<ChatTemplate> ChatTemplate::from_file(const std::string& template_path, const std::string& model_path) {
  Result<std::string> text = read_text_file(template_path);
  if (!text.ok()) return text.status();
  Found tokens;
  if (!model_path.empty()) {
    Result<Found> found = find_for_model(model_path);
    if (!found.ok()) return found.status();
    tokens = found.value();
  }
  Result<ChatTemplate> t = parse(text.value(), tokens.bos, tokens.eos);
  if (!t.ok()) return t.status().with_context(template_path);
  return t;
}

Result<std::string> ChatTemplate::render(const ChatTemplateInput& in) const {
  if (!in.messages.is_array()) return Status::error("chat template input: messages must be an array");
  if (!in.tools.is_null() && !in.tools.is_array()) return Status::error("chat template input: tools must be an array or null");
  if (!in.extra.is_object()) return Status::error("chat template input: extra must be an object");
  ojson vars = ojson::object();
  // Special tokens first, so that extras may override them (as transformers' **kwargs do).
  if (!bos_token_.empty()) vars["bos_token"] = bos_token_;
  if (!eos_token_.empty()) vars["eos_token"] = eos_token_;
  for (auto it = in.extra.begin(); it != in.extra.end(); ++it) {
    if (it.key() == "messages" || it.key() == "tools" || it.key() == "documents" || it.key() == "add_generation_prompt") {
      return Status::error("chat template input: extra may not set '" + it.key() + "'");
    }
    vars[it.key()] = it.value();
  }
  vars["messages"] = in.messages;
  vars["tools"] = in.tools;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = in.add_generation_prompt;
  jinja::RenderLimits limits;
  if (in.now_unix) limits.now = static_cast<std::time_t>(*in.now_unix);
  return template_->render(vars, limits);
}

}  // namespace weft
