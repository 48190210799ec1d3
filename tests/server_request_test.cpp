// Unit tests of the server's pure parts: the request parser (types, limits, normalisation), the
// output parser (<think>, both <tool_call> forms, streaming in pieces of any size), the model's
// generation defaults, and the prefix cache's reuse rule.
#include <gtest/gtest.h>

#include <random>

#include "engine/generation_defaults.h"
#include "engine/prefix_cache.h"
#include "server/generation_request.h"
#include "server/output_parser.h"
#include "server/request.h"

namespace weft::server {
namespace {

using ojson = nlohmann::ordered_json;

std::optional<RequestError> chat(const std::string& body, ChatRequest* out = nullptr) {
  ChatRequest tmp;
  return parse_chat_request(body, RequestLimits{}, out ? out : &tmp);
}

TEST(RequestParser, AcceptsAFullChatRequest) {
  ChatRequest r;
  auto e = chat(R"({"model": "m", "messages": [
      {"role": "system", "content": "s"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": 2}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "tool_choice": "auto", "temperature": 0.5, "top_p": 0.9, "seed": -3, "max_completion_tokens": 7,
    "stop": "x", "stream": true, "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 2,
    "user": "u", "presence_penalty": 0, "chat_template_kwargs": {"enable_thinking": false}})", &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.messages[1]["content"], "ab");  // text parts joined
  // Arguments become an object with the client's key order (templates print them with tojson).
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["arguments"].dump(), R"({"z":1,"a":2})");
  EXPECT_EQ(*r.sampling.temperature, 0.5);
  EXPECT_EQ(*r.sampling.seed, uint64_t(-3));
  EXPECT_EQ(*r.sampling.max_tokens, 7);
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(r.sampling.stream && r.sampling.include_usage);
  EXPECT_EQ(r.sampling.top_logprobs, 2);
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);
  EXPECT_FALSE(r.tools.is_null());
}

TEST(RequestParser, RefusesWrongTypesAndLimits) {
  const char* bad[] = {
      "", "{", "null", "[1]", R"({"messages": {}})", R"({"messages": []})", R"({})",
      R"({"messages": [{"role": "robot", "content": "x"}]})", R"({"messages": [{"content": "x"}]})",
      R"({"messages": [{"role": "user"}]})", R"({"messages": [{"role": "user", "content": 1}]})",
      R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
      R"({"messages": [{"role": "user", "content": "x"}], "temperature": "1"})",
      R"({"messages": [{"role": "user", "content": "x"}], "temperature": 3})",
      R"({"messages": [{"role": "user", "content": "x"}], "top_p": 0})",
      R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})",
      R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5})",
      R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 99999999})",
      R"({"messages": [{"role": "user", "content": "x"}], "n": 2})",
      R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a","b","c","d","e"]})",
      R"({"messages": [{"role": "user", "content": "x"}], "stop": [""]})",
      R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})",
      R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
      R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})",
      R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {}}]})",
      R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "always"})",
      R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})",
      R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})",
      R"({"messages": [{"role": "assistant", "content": "x", "tool_calls": [{"function": {"name": 1}}]}]})",
      R"({"messages": [{"role": "user", "content": "x"}], "seed": 18446744073709551615})",
  };
  for (const char* b : bad) {
    auto e = chat(b);
    ASSERT_TRUE(e) << b;
    EXPECT_EQ(e->status, 400);
    EXPECT_FALSE(e->message.empty());
    // The error body is valid JSON with OpenAI's shape.
    auto j = nlohmann::json::parse(error_body(*e));
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  }
  EXPECT_TRUE(chat(std::string("{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}")));
  const std::string many = R"({"messages": [{"role": "user", "content": "x"}], "stop": ")" + std::string(300, 'a') + "\"}";
  EXPECT_TRUE(chat(many));
}

TEST(RequestParser, Completions) {
  CompletionRequest r;
  ASSERT_FALSE(parse_completion_request(R"({"prompt": "hi", "logprobs": 2})", {}, &r));
  EXPECT_EQ(*r.prompt, "hi");
  EXPECT_EQ(*r.sampling.max_tokens, 16);  // OpenAI's default
  EXPECT_EQ(r.sampling.top_logprobs, 2);
  CompletionRequest ids;
  ASSERT_FALSE(parse_completion_request(R"({"prompt": [1, 2, 3]})", {}, &ids));
  EXPECT_EQ(*ids.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  for (const char* b : {R"({})", R"({"prompt": 5})", R"({"prompt": [-1]})", R"({"prompt": ["a", "b"]})",
                        R"({"prompt": "x", "echo": true})", R"({"prompt": "x", "logprobs": 6})",
                        R"({"prompt": "x", "suffix": "y"})", R"({"prompt": [1, "a"]})"}) {
    CompletionRequest c;
    EXPECT_TRUE(parse_completion_request(b, {}, &c)) << b;
  }
}

TEST(GenerationRequest, ClientValuesOverModelDefaults) {
  GenerationDefaults d;
  d.sampling.temperature = 0.6f;
  d.sampling.top_k = 20;
  SamplingFields f;
  f.top_p = 0.5;
  GenerationRequest g = make_generation_request({1, 2, 3}, f, d, 100, 50, 99);
  EXPECT_EQ(g.sampling.temperature, 0.6f);
  EXPECT_EQ(g.sampling.top_k, 20);
  EXPECT_EQ(g.sampling.top_p, 0.5f);
  EXPECT_EQ(g.sampling.seed, 99u);
  EXPECT_EQ(g.max_tokens, 50);  // the server's cap, below the 97 the context leaves
  GenerationRequest h = make_generation_request(std::vector<int32_t>(90, 1), f, d, 100, 50, 99);
  EXPECT_EQ(h.max_tokens, 10);
}

TEST(GenerationDefaults, FollowTransformers) {
  auto greedy = parse_generation_defaults(R"({"temperature": 0.7, "eos_token_id": 1})", "g");
  ASSERT_TRUE(greedy.ok());
  EXPECT_EQ(greedy.value().sampling.temperature, 0.0f);  // do_sample absent: greedy
  auto qwen = parse_generation_defaults(R"({"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95})", "g");
  ASSERT_TRUE(qwen.ok());
  EXPECT_EQ(qwen.value().sampling.temperature, 0.6f);
  EXPECT_EQ(qwen.value().sampling.top_k, 20);
  EXPECT_EQ(qwen.value().sampling.top_p, 0.95f);
  auto plain = parse_generation_defaults(R"({"do_sample": true})", "g");
  EXPECT_EQ(plain.value().sampling.temperature, 1.0f);  // transformers' defaults
  EXPECT_EQ(plain.value().sampling.top_k, 50);
  EXPECT_FALSE(parse_generation_defaults(R"({"do_sample": "yes"})", "g").ok());
  EXPECT_FALSE(parse_generation_defaults(R"({"do_sample": true, "top_p": 2})", "g").ok());
  EXPECT_FALSE(parse_generation_defaults("[", "g").ok());
}

// Feeds text in pieces of random sizes; the joined output must not depend on the cut.
OutputDelta parse_in_pieces(const std::string& text, OutputParserOptions o, uint32_t seed) {
  OutputParser p(o);
  std::mt19937 rng(seed);
  OutputDelta all;
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::min(text.size() - i, size_t(rng() % 7 + 1));
    all.append(p.push(std::string_view(text).substr(i, n)));
    i += n;
  }
  all.append(p.finish());
  return all;
}

TEST(OutputParser, ThinkAndBothToolCallForms) {
  OutputParserOptions o;
  o.tools = true;
  o.tools_schema = ojson::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"s": {"type": "string"}, "n": {"type": "integer"}, "o": {"type": "object"}}}}}])");
  const std::string text =
      "<think>\nplan it\n</think>\n\nHello <b>x</b> "
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"b\": 1, \"a\": [2]}}\n</tool_call>\n"
      "<tool_call>\n<function=f>\n<parameter=s>\n42\n</parameter>\n<parameter=n>\n7\n</parameter>\n"
      "<parameter=o>\n{\"k\": true}\n</parameter>\n</function>\n</tool_call>";
  for (uint32_t seed = 0; seed < 20; ++seed) {
    OutputDelta d = parse_in_pieces(text, o, seed);
    EXPECT_EQ(d.reasoning, "plan it\n");
    EXPECT_EQ(d.content, "Hello <b>x</b> ");
    ASSERT_EQ(d.tool_calls.size(), 2u);
    EXPECT_EQ(d.tool_calls[0].name, "f");
    EXPECT_EQ(d.tool_calls[0].arguments, R"({"b":1,"a":[2]})");
    // Schema types: "42" stays a string, 7 an integer, the object parsed.
    EXPECT_EQ(d.tool_calls[1].arguments, R"({"s":"42","n":7,"o":{"k":true}})");
  }
}

TEST(OutputParser, EdgeCases) {
  OutputParserOptions o;
  o.tools = true;
  // A malformed block comes back as text, verbatim.
  OutputDelta bad = parse_in_pieces("a<tool_call>\nnot json\n</tool_call>b", o, 1);
  EXPECT_TRUE(bad.tool_calls.empty());
  EXPECT_EQ(bad.content, "a<tool_call>\nnot json\n</tool_call>b");
  // An unterminated call at the end still counts when it is complete.
  OutputDelta open = parse_in_pieces("<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n", o, 2);
  ASSERT_EQ(open.tool_calls.size(), 1u);
  EXPECT_EQ(open.tool_calls[0].arguments, "{}");
  // Without tools the tags are text; a prompt that opened <think> starts the reply in reasoning.
  OutputParserOptions plain;
  plain.tools = false;
  plain.starts_in_reasoning = true;
  OutputDelta r = parse_in_pieces("why\n</think>\n\n<tool_call>x</tool_call> <thin", plain, 3);
  EXPECT_EQ(r.reasoning, "why\n");
  EXPECT_EQ(r.content, "<tool_call>x</tool_call> <thin");
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<think>\n\n</think>\n\n"));
  ToolCall c;
  EXPECT_FALSE(parse_tool_call_block("<function=>\n</function>", {}, &c));
  EXPECT_FALSE(parse_tool_call_block("<function=f>\n<parameter=x>\n1\n</function>", {}, &c));
  EXPECT_FALSE(parse_tool_call_block("{\"arguments\": {}}", {}, &c));
  EXPECT_FALSE(parse_tool_call_block("{\"name\": \"f\", \"arguments\": [1]}", {}, &c));
  // Found by server_request_fuzz: a JSON call with an empty (or blank) name is text too.
  EXPECT_FALSE(parse_tool_call_block("{\"name\": \"\", \"arguments\": {}}", {}, &c));
  EXPECT_FALSE(parse_tool_call_block("{\"name\": \" \", \"arguments\": {\"a\": 1}}", {}, &c));
  OutputDelta unnamed = parse_in_pieces("<tool_call>\n{\"name\":\"\", \"arguments\": {}}\n</tool_call>", o, 4);
  EXPECT_TRUE(unnamed.tool_calls.empty());
}

}  // namespace
}  // namespace weft::server

namespace weft {
namespace {

TEST(PrefixCache, ReusesTheLastCheckpointInsideTheCommonPrefix) {
  RecurrentStateSpec spec;
  spec.n_layers = 1;
  spec.conv_dim = 4;
  spec.n_v_heads = 1;
  spec.key_head_dim = 2;
  spec.value_head_dim = 2;
  RecurrentState st(spec);
  PrefixCache cache(3);
  std::vector<int32_t> ids(300);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
  for (int64_t at : {64, 128, 192, 256}) {
    cache.push(std::span<const int32_t>(ids.data() + cache.tokens().size(), size_t(at) - cache.tokens().size()));
    cache.checkpoint(st);
  }
  EXPECT_EQ(cache.checkpoints(), 3u);  // the oldest (64) dropped
  EXPECT_EQ(cache.reusable(ids), 256);
  std::vector<int32_t> p(ids.begin(), ids.begin() + 256);
  EXPECT_EQ(cache.reusable(p), 192);  // one token must be left to prefill
  p[150] = -1;
  EXPECT_EQ(cache.reusable(p), 128);
  p[100] = -1;
  EXPECT_EQ(cache.reusable(p), 0);   // 64 was dropped
  cache.truncate(130);
  EXPECT_EQ(cache.tokens().size(), 130u);
  EXPECT_EQ(cache.checkpoints(), 1u);
  EXPECT_NE(cache.checkpoint_at(128), nullptr);
}

}  // namespace
}  // namespace weft
