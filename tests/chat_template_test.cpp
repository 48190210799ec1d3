// Chat templates: weft's Jinja interpreter reproduces, byte for byte, the renderings that Python's
// jinja2 (configured as transformers' apply_chat_template) made of tests/data/chat's conversations
// (tools/chat_refs/make_refs.py), plus unit tests of the interpreter's pieces and its errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/wait.h>
#include <unistd.h>

#include "io/chat_template.h"
#include "io/gguf.h"
#include "io/jinja/template.h"
#include "io/jinja/value.h"

namespace weft {
namespace {

using ojson = nlohmann::ordered_json;
constexpr int64_t kFixedNow = 1767268800;  // make_refs.py's FIXED_NOW

std::string data_path(const std::string& rel) { return std::string(WEFT_SOURCE_DIR) + "/" + rel; }

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class ReferenceRenderings : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("TZ", "UTC", 1);
    tzset();
  }
};

TEST_F(ReferenceRenderings, EveryTemplateAndConversationMatchesJinja2) {
  const ojson templates = ojson::parse(slurp(data_path("tests/data/chat/templates.json")));
  const ojson conversations = ojson::parse(slurp(data_path("tests/data/chat/conversations.json")));
  int checked = 0;
  for (auto it = templates.begin(); it != templates.end(); ++it) {
    const ojson& spec = it.value();
    Result<ChatTemplate> t = ChatTemplate::parse(slurp(data_path(spec["path"].get<std::string>())),
                                                 spec["bos_token"].get<std::string>(), spec["eos_token"].get<std::string>());
    ASSERT_TRUE(t.ok()) << it.key() << ": " << t.status().message();
    for (const ojson& conv : conversations) {
      const std::string base = data_path("tests/data/chat/expected/" + it.key() + "__" + conv["name"].get<std::string>());
      ChatTemplateInput in;
      in.messages = conv["messages"];
      if (conv.contains("tools")) in.tools = conv["tools"];
      in.add_generation_prompt = conv.value("add_generation_prompt", true);
      if (conv.contains("extra")) in.extra = conv["extra"];
      in.now_unix = kFixedNow;
      Result<std::string> out = t->render(in);
      if (std::filesystem::exists(base + ".txt")) {
        ASSERT_TRUE(out.ok()) << base << ": " << out.status().message();
        EXPECT_EQ(out.value(), slurp(base + ".txt")) << base;
      } else {
        ASSERT_TRUE(std::filesystem::exists(base + ".error")) << base << ": no reference";
        ASSERT_FALSE(out.ok()) << base << ": jinja2 refused this conversation, weft rendered it";
        EXPECT_NE(out.status().message().find(slurp(base + ".error")), std::string::npos)
            << base << ": " << out.status().message();
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 50);
}

// --- interpreter pieces ---

std::string render(const std::string& source, const ojson& vars = ojson::object(), jinja::RenderLimits limits = {}) {
  auto t = jinja::Template::parse(source);
  if (!t.ok()) return "PARSE ERROR: " + t.status().message();
  auto out = t.value()->render(vars, limits);
  if (!out.ok()) return "RENDER ERROR: " + out.status().message();
  return out.value();
}

TEST(JinjaWhitespace, TrimBlocksAndLstripBlocksAsTransformers) {
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\n  y"), "  x\n  y");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("a {%+ if true %}b{% endif %}"), "a b");
  EXPECT_EQ(render("{{ 'x' }}\n{{ 'y' }}\n"), "x\ny");  // one trailing newline is dropped
  EXPECT_EQ(render("a\r\nb"), "a\nb");
  EXPECT_EQ(render("{# c #}\nx {#- c -#} y"), "xy");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(JinjaExpressions, PythonSemantics) {
  EXPECT_EQ(render("{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 62 }} {{ 1e16 }} {{ 1e-5 }} {{ 0.1 + 0.2 }}"),
            "-4 2 3.5 4611686018427387904 1e+16 1e-05 0.30000000000000004");
  EXPECT_EQ(render("{{ 'héllo'[::-1] }} {{ [1,2,3][-1] }} {{ [1,2,3,4,5][1:4:2] }} {{ 'abc'[5:] }}|"), "olléh 3 [2, 4] |");
  EXPECT_EQ(render("{{ none }} {{ true }} {{ {'a': [1, 'b']} }} {{ (1,) }}"), "None True {'a': [1, 'b']} (1,)");
  EXPECT_EQ(render("{{ 1 if x else 2 }}{{ x or 'd' }}{{ 'a' ~ x ~ 'b' }}"), "2dab");
  EXPECT_EQ(render("{{ 'x' in 'axb' }}{{ 2 not in [1] }}{{ 'k' in {'k': 1} }}"), "TrueTrueTrue");
  EXPECT_EQ(render("{{ x | tojson }}", {{"x", ojson::parse(R"({"b": 1, "a": [1.0, "é\u0001"]})")}}),
            "{\"b\": 1, \"a\": [1.0, \"é\\u0001\"]}");
}

TEST(JinjaStatements, ScopesMacrosLoops) {
  EXPECT_EQ(render("{% set x = 0 %}{% for i in [1,2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}"), "01020");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "6");
  EXPECT_EQ(render("{% macro m(a, b=2) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, b=3) }}{{ m(b=4, a=5) }}"), "121354");
  EXPECT_EQ(render("{% for i in range(10) %}{% if i == 3 %}{% break %}{% endif %}{% if i is odd %}{% continue %}{% endif %}{{ i }}{% endfor %}"), "02");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2} | items %}{{ k }}{{ v }}{{ loop.last }}{% endfor %}"), "a1Falseb2True");
  EXPECT_EQ(render("{% for i in [1,2,3] if i > 1 %}{{ loop.index }}/{{ loop.length }}{% endfor %}"), "1/22/2");
  EXPECT_EQ(render("{% set b %}x{{ 1 }}{% endset %}{{ b }}{% filter upper %}y{% endfilter %}"), "x1Y");
}

TEST(JinjaErrors, ClearMessagesWithPositions) {
  EXPECT_EQ(render("{% if x %}"), "PARSE ERROR: template syntax error at 1:11: unexpected end of template, expected 'endif'");
  EXPECT_EQ(render("a\n{{ x + }}"), "PARSE ERROR: template syntax error at 2:8: unexpected '}}'");
  EXPECT_NE(render("{% frobnicate %}").find("unknown or unsupported statement 'frobnicate'"), std::string::npos);
  EXPECT_NE(render("{{ 'abc }}").find("unterminated string"), std::string::npos);
  EXPECT_NE(render("{% break %}").find("outside of a for loop"), std::string::npos);
  EXPECT_EQ(render("x\n  {{ raise_exception('no way') }}"), "RENDER ERROR: template error at 2:6: raise_exception: no way");
  EXPECT_NE(render("{{ x.y }}").find("'x' is undefined"), std::string::npos);
  EXPECT_NE(render("{{ 1 + 'a' }}").find("unsupported operand"), std::string::npos);
  EXPECT_NE(render("{{ [].append(1) }}").find("unsafe"), std::string::npos);
  EXPECT_NE(render("{{ x | nosuchfilter }}").find("no filter named 'nosuchfilter'"), std::string::npos);
  EXPECT_NE(render("{{ 1 // 0 }}").find("by zero"), std::string::npos);
  EXPECT_NE(render("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
}

TEST(JinjaLimits, HostileTemplatesStopWithAnError) {
  EXPECT_NE(render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("nested too deeply"), std::string::npos);
  jinja::RenderLimits small;
  small.max_steps = 1000;
  EXPECT_NE(render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", ojson::object(), small)
                .find("step limit"), std::string::npos);
  small.max_output_bytes = 1000;
  EXPECT_NE(render("{{ 'x' * 1000000 }}", ojson::object(), small).find("output limit"), std::string::npos);
  EXPECT_NE(render("{% set s = namespace(v='ab') %}{% for i in range(30) %}{% set s.v = s.v ~ s.v %}{% endfor %}", ojson::object(), small)
                .find("output limit"), std::string::npos);
  const std::string deep = std::string(5000, '(') + "1" + std::string(5000, ')');
  EXPECT_NE(render("{{ " + deep + " }}").find("nested too deeply"), std::string::npos);
  std::string chain = "1";
  for (int k = 0; k < 100000; ++k) chain += "+1";
  EXPECT_NE(render("{{ " + chain + " }}").find("nested too deeply"), std::string::npos);
  std::string attrs = "x";
  for (int k = 0; k < 100000; ++k) attrs += k % 2 ? ".a" : "|trim";
  EXPECT_NE(render("{{ " + attrs + " }}").find("nested too deeply"), std::string::npos);
  std::string deep_if;
  for (int k = 0; k < 500; ++k) deep_if += "{% if true %}";
  EXPECT_NE(render(deep_if).find("nested too deeply"), std::string::npos);
}

TEST(JinjaValues, PythonFloatRepr) {
  EXPECT_EQ(jinja::python_float_repr(1.0), "1.0");
  EXPECT_EQ(jinja::python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(jinja::python_float_repr(1e-5), "1e-05");
  EXPECT_EQ(jinja::python_float_repr(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(jinja::python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(jinja::python_float_repr(-2.5), "-2.5");
}

// --- where templates come from ---

TEST(ChatTemplateSources, ModelDirGgufAndErrors) {
  Result<ChatTemplate> shipped = ChatTemplate::for_model(data_path("models/weft-tiny-hybrid"));
  ASSERT_TRUE(shipped.ok()) << shipped.status().message();
  EXPECT_EQ(shipped->eos_token(), "<|endoftext|>");
  const auto dir = std::filesystem::temp_directory_path() / ("weft_chat_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "tokenizer_config.json")
        << R"({"bos_token": {"content": "<s>"}, "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}D"}]})";
  }
  Result<ChatTemplate> listed = ChatTemplate::for_model(dir.string());
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  EXPECT_EQ(listed->render({}).value(), "<s>D");
  std::filesystem::remove(dir / "tokenizer_config.json");
  Result<ChatTemplate> none = ChatTemplate::for_model(dir.string());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--chat-template FILE"), std::string::npos);
  // A GGUF file: tokenizer.chat_template, bos/eos from the token list.
  const std::string gguf = (dir / "m.gguf").string();
  ASSERT_TRUE(write_gguf(gguf,
                         {{"tokenizer.ggml.tokens", GgufValue::string_array({"<s>", "</s>", "a"})},
                          {"tokenizer.ggml.bos_token_id", GgufValue::u32(0)},
                          {"tokenizer.ggml.eos_token_id", GgufValue::u32(1)},
                          {"tokenizer.chat_template", GgufValue::string("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}")}},
                         {}).ok());
  Result<ChatTemplate> from_gguf = ChatTemplate::for_model(gguf);
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.status().message();
  ChatTemplateInput in;
  in.messages = ojson::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(from_gguf->render(in).value(), "<s>hi</s>");
  std::filesystem::remove_all(dir);
  EXPECT_FALSE(ChatTemplate::for_model("/nonexistent/model").ok());
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

TEST(JinjaLimits, NoCyclesNoUnboundedNesting) {
  EXPECT_NE(render("{% set ns = namespace(x=0) %}{% set ns.x = [ns] %}{{ ns }}").find("cannot hold another namespace"), std::string::npos);
  EXPECT_NE(render("{% set ns = namespace(x=[]) %}{% for i in range(2000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x | length }}")
                .find("nested too deeply"), std::string::npos);
  ojson deep = ojson::array();
  for (int k = 0; k < 1000; ++k) deep = ojson::array({deep});
  EXPECT_NE(render("{{ x }}", {{"x", deep}}).find("nested too deeply"), std::string::npos);
  EXPECT_NE(render("{{ ([1] * 100000000) | length }}").find("output limit"), std::string::npos);
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

int run_weft(const std::string& args) {
  const std::string cmd = std::string(WEFT_BINARY) + " " + args + " >/dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(GenerateChat, RendersThroughTheTemplateOrFailsClearly) {
  const std::string model = data_path("models/weft-tiny-hybrid");
  EXPECT_EQ(run_weft("generate -m " + model + " --chat --system 'Be brief.' -p 'Hi' -n 2"), 0);
  EXPECT_NE(run_weft("generate -m " + model + " --chat --chat-template /nonexistent.jinja -p Hi -n 1"), 0);
  EXPECT_NE(run_weft("generate -m " + model + " --system 'no chat flag' -p Hi -n 1"), 0);
  const auto bad = std::filesystem::temp_directory_path() / ("weft_bad_tmpl_" + std::to_string(::getpid()) + ".jinja");
  { std::ofstream(bad) << "{% if %}"; }
  EXPECT_NE(run_weft("generate -m " + model + " --chat --chat-template " + bad.string() + " -p Hi -n 1"), 0);
  std::filesystem::remove(bad);
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

TEST(JinjaLimits, WorkInsideBuiltinsCountsAgainstTheStepLimit) {
  jinja::RenderLimits small;
  small.max_steps = 100000;
  // Few statements, but every one walks a 50000-element list.
  EXPECT_NE(render("{% set xs = range(50000) | list %}{% for i in range(100) %}{{ xs | length }}{% endfor %}", ojson::object(), small)
                .find("step limit"), std::string::npos);
  EXPECT_NE(render("{% set xs = range(50000) | list %}{% for i in range(100) %}{{ 7 in xs }}{% endfor %}", ojson::object(), small)
                .find("step limit"), std::string::npos);
  // The same template with a default budget renders.
  EXPECT_EQ(render("{% set xs = range(50000) | list %}{% for i in range(3) %}{{ xs | length }}{% endfor %}").substr(0, 5), "50000");
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// tools/chat_refs/snippets.py: one corner of Python/jinja2 semantics each, rendered by jinja2.
TEST(ReferenceSnippets, EachMatchesJinja2) {
  const ojson snippets = ojson::parse(slurp(data_path("tests/data/chat/snippets_expected.json")));
  ASSERT_GE(snippets.size(), 100u);
  for (const ojson& s : snippets) {
    const std::string source = s["template"].get<std::string>();
    auto t = jinja::Template::parse(source);
    Result<std::string> out = t.ok() ? t.value()->render(s["variables"]) : Result<std::string>(t.status());
    if (s.contains("output")) {
      ASSERT_TRUE(out.ok()) << source << "\n" << out.status().message();
      EXPECT_EQ(out.value(), s["output"].get<std::string>()) << source;
    } else {
      EXPECT_FALSE(out.ok()) << source << ": jinja2 said " << s["error"].get<std::string>();
    }
  }
}

}  // namespace
}  // namespace weft
