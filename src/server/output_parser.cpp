#include "server/output_parser.h"

#include <algorithm>

namespace weft::server {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kToolOpen = "<tool_call>", kToolClose = "</tool_call>";

std::string_view trim(std::string_view s) {
  const auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

// Length of the longest suffix of s that is a proper prefix of marker.
size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

// The JSON Schema type the tool gives parameter `param` of function `fn` ("" when unknown).
std::string param_type(const ojson& tools, const std::string& fn, const std::string& param) {
  if (!tools.is_array()) return "";
  for (const ojson& t : tools) {
    if (!t.is_object() || !t.contains("function")) continue;
    const ojson& f = t["function"];
    if (!f.is_object() || !f.contains("name") || f["name"] != fn) continue;
    if (!f.contains("parameters") || !f["parameters"].is_object()) return "";
    const ojson& props = f["parameters"].contains("properties") ? f["parameters"]["properties"] : ojson();
    if (!props.is_object() || !props.contains(param) || !props[param].is_object()) return "";
    const ojson& ty = props[param].contains("type") ? props[param]["type"] : ojson();
    return ty.is_string() ? ty.get<std::string>() : "";
  }
  return "";
}

bool parse_json_form(std::string_view body, ToolCall* out) {
  ojson j = ojson::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  out->name = j["name"].get<std::string>();
  if (trim(out->name).empty()) return false;  // a call to nothing is text, as in the XML form
  ojson args = j.contains("arguments") ? j["arguments"] : (j.contains("parameters") ? j["parameters"] : ojson::object());
  if (args.is_string()) {  // some models double-encode
    ojson inner = ojson::parse(args.get<std::string>(), nullptr, false);
    if (!inner.is_discarded() && inner.is_object()) args = inner;
  }
  if (!args.is_object()) return false;
  out->arguments = args.dump(-1, ' ', false, ojson::error_handler_t::replace);
  return true;
}

bool parse_xml_form(std::string_view body, const ojson& tools, ToolCall* out) {
  constexpr std::string_view kFn = "<function=", kFnEnd = "</function>", kParam = "<parameter=", kParamEnd = "</parameter>";
  if (body.substr(0, kFn.size()) != kFn) return false;
  const size_t name_end = body.find('>');
  if (name_end == std::string_view::npos) return false;
  out->name = std::string(trim(body.substr(kFn.size(), name_end - kFn.size())));
  if (out->name.empty()) return false;
  std::string_view rest = body.substr(name_end + 1);
  const size_t fn_end = rest.rfind(kFnEnd);
  if (fn_end == std::string_view::npos || !trim(rest.substr(fn_end + kFnEnd.size())).empty()) return false;
  rest = rest.substr(0, fn_end);
  ojson args = ojson::object();
  for (;;) {
    rest = trim(rest);
    if (rest.empty()) break;
    if (rest.substr(0, kParam.size()) != kParam) return false;
    const size_t pn_end = rest.find('>');
    if (pn_end == std::string_view::npos) return false;
    const std::string pname(trim(rest.substr(kParam.size(), pn_end - kParam.size())));
    if (pname.empty()) return false;
    const size_t v_end = rest.find(kParamEnd, pn_end + 1);
    if (v_end == std::string_view::npos) return false;
    std::string_view v = rest.substr(pn_end + 1, v_end - pn_end - 1);
    // The template writes "\n" + value + "\n": strip exactly that.
    if (!v.empty() && v.front() == '\n') v.remove_prefix(1);
    if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
    const std::string type = param_type(tools, out->name, pname);
    ojson value = std::string(v);
    if (type != "string") {
      ojson parsed = ojson::parse(v, nullptr, false);
      if (!parsed.is_discarded()) value = parsed;
    }
    args[pname] = value;
    rest = rest.substr(v_end + kParamEnd.size());
  }
  out->arguments = args.dump(-1, ' ', false, ojson::error_handler_t::replace);
  return true;
}

}  // namespace

void OutputDelta::append(OutputDelta&& d) {
  content += d.content;
  reasoning += d.reasoning;
  for (auto& c : d.tool_calls) tool_calls.push_back(std::move(c));
}

bool parse_tool_call_block(std::string_view body, const nlohmann::ordered_json& tools_schema, ToolCall* out) {
  body = trim(body);
  if (body.empty()) return false;
  if (body.front() == '{') return parse_json_form(body, out);
  return parse_xml_form(body, tools_schema, out);
}

bool prompt_opens_reasoning(std::string_view prompt) {
  const size_t open = prompt.rfind(kThinkOpen);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(kThinkClose);
  return close == std::string_view::npos || close < open;
}

OutputParser::OutputParser(OutputParserOptions options)
    : options_(std::move(options)),
      state_(options_.reasoning && options_.starts_in_reasoning ? State::kReasoning : State::kContent) {}

OutputDelta OutputParser::push(std::string_view text) {
  buf_ += text;
  return drain(false);
}

OutputDelta OutputParser::finish() { return drain(true); }

void OutputParser::emit(std::string& sink, std::string_view text) {
  if (strip_newlines_) {
    while (!text.empty() && (text.front() == '\n' || text.front() == '\r')) text.remove_prefix(1);
    if (!text.empty()) strip_newlines_ = false;
  }
  sink += text;
}

OutputDelta OutputParser::drain(bool final) {
  OutputDelta d;
  for (;;) {
    if (state_ == State::kToolCall) {
      const size_t end = buf_.find(kToolClose);
      if (end == std::string::npos) {
        if (!final) return d;
        // Unterminated at the end of the reply: a complete call inside still counts (the reply
        // may have stopped on the closing tag), else the text goes back to content.
        ToolCall call;
        if (parse_tool_call_block(buf_, options_.tools_schema, &call)) d.tool_calls.push_back(std::move(call));
        else d.content += std::string(kToolOpen) + buf_;
        buf_.clear();
        state_ = State::kContent;
        return d;
      }
      ToolCall call;
      if (parse_tool_call_block(std::string_view(buf_).substr(0, end), options_.tools_schema, &call))
        d.tool_calls.push_back(std::move(call));
      else
        d.content += std::string(kToolOpen) + buf_.substr(0, end + kToolClose.size());
      buf_.erase(0, end + kToolClose.size());
      state_ = State::kContent;
      strip_newlines_ = true;
      continue;
    }
    // Content or reasoning: find the next marker that this state acts on.
    std::vector<std::string_view> markers;
    if (state_ == State::kReasoning) {
      markers.push_back(kThinkClose);
    } else {
      if (options_.reasoning) markers.push_back(kThinkOpen);
      if (options_.tools) markers.push_back(kToolOpen);
    }
    size_t at = std::string::npos;
    std::string_view hit;
    for (std::string_view m : markers) {
      const size_t p = buf_.find(m);
      if (p < at) at = p, hit = m;
    }
    std::string& sink = state_ == State::kReasoning ? d.reasoning : d.content;
    if (at == std::string::npos) {
      size_t hold = 0;
      if (!final)
        for (std::string_view m : markers) hold = std::max(hold, partial_suffix(buf_, m));
      emit(sink, buf_.substr(0, buf_.size() - hold));
      buf_.erase(0, buf_.size() - hold);
      return d;
    }
    emit(sink, buf_.substr(0, at));
    buf_.erase(0, at + hit.size());
    strip_newlines_ = true;
    if (hit == kThinkOpen) state_ = State::kReasoning;
    else if (hit == kThinkClose) state_ = State::kContent;
    else state_ = State::kToolCall;
  }
}

}  // namespace weft::server
