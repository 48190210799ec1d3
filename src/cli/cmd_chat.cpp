// `weft chat`: a conversation in the terminal. Each line read from stdin is a user turn; the reply
// streams as it is generated. The conversation runs through the same Scheduler as `weft serve`
// (one slot), so each turn prefills only what the previous turns did not (prefix reuse), and the
// reply equals a cold run's bit for bit in the strict tier. Lines starting with '/' are commands:
// /reset (forget the conversation), /quit. Reads stdin, so it is scriptable: printf 'hi\n' | weft chat.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "engine/engine.h"
#include "engine/generation_defaults.h"
#include "engine/scheduler.h"
#include "io/chat_template.h"
#include "io/tokenizer.h"

namespace weft::cli {
namespace {

int run_chat(int argc, char** argv) {
  CLI::App app("Chat with a model in the terminal (one stdin line per user turn; /reset, /quit)", "chat");
  std::string model_dir, chat_template_file, system;
  int64_t max_tokens = 512, ctx = 8192;
  int threads = 0;
  std::optional<double> temp, top_p;
  std::optional<int> top_k;
  uint64_t seed = 0;
  bool no_think = false;
  RunFlags run;
  app.add_option("-m,--model", model_dir, "model directory (HF format) or .gguf file; default: the built-in model");
  app.add_option("--system", system, "a system message at the start of the conversation");
  app.add_option("-n,--max-tokens", max_tokens, "largest reply in tokens")->check(CLI::Range(1, 1 << 24));
  app.add_option("--ctx", ctx, "tokens the conversation may hold")->check(CLI::Range(16, 1 << 24));
  app.add_option("--temp", temp, "temperature (default: the model's generation_config.json; 0 = greedy)")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-p", top_p, "nucleus sampling mass (default: the model's)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--top-k", top_k, "keep the k most likely tokens (default: the model's)")->check(kNonNegative);
  app.add_option("--seed", seed, "sampling seed");
  app.add_option("--chat-template", chat_template_file, "a Jinja chat template file (default: the model's own)");
  app.add_flag("--no-think", no_think, "pass enable_thinking=false to the template (Qwen3 / Qwen3.5)");
  app.add_option("--threads", threads, "worker threads (0 = all cores)")->check(CLI::Range(0, 1024));
  run.add(app);
  if (int rc = run.parse(app, argc, argv); rc >= 0) return rc;
  auto model = open_model(&model_dir);
  if (!model.ok()) return fail(model.status());
  const ModelConfig& c = model.value()->config();
  if (Status s = run.check_model(c, ctx); !s.ok()) return fail(s);
  auto tokenizer = Tokenizer::load_from_dir(model_dir);
  if (!tokenizer.ok()) return fail(tokenizer.status().with_context("weft chat needs the model's tokenizer"));
  auto tmpl = chat_template_file.empty() ? ChatTemplate::for_model(model_dir)
                                         : ChatTemplate::from_file(chat_template_file, model_dir);
  if (!tmpl.ok()) return fail(tmpl.status());
  auto defaults = load_generation_defaults(model_dir);
  if (!defaults.ok()) return fail(defaults.status());
  SamplerOptions sampling = defaults.value().sampling;
  if (temp) sampling.temperature = float(*temp);
  if (top_p) sampling.top_p = float(*top_p);
  if (top_k) sampling.top_k = *top_k;
  sampling.seed = seed;
  std::fprintf(stderr, "weft: %s\n", defaults.value().describe_effective(sampling, temp || top_p || top_k).c_str());

  std::vector<int32_t> eos = c.eos_token_ids;
  for (int32_t e : tokenizer.value().eos_ids()) eos.push_back(e);
  EngineOptions eo;
  eo.threads = threads;
  eo.device = run.device;
  Engine engine(*model.value(), eo);
  SchedulerOptions so;
  so.parallel = 1;
  so.ctx = ctx;
  so.kv = run.kv_options;
  Scheduler scheduler(engine, &tokenizer.value(), eos, so);

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  auto reset = [&] {
    messages = nlohmann::ordered_json::array();
    if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  };
  reset();
  std::string line;
  int turn = 0;
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/quit" || line == "/exit") break;
    if (line == "/reset") {
      reset();
      std::fprintf(stderr, "weft: conversation reset\n");
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    ChatTemplateInput in;
    in.messages = messages;
    if (no_think) in.extra["enable_thinking"] = false;
    auto prompt = tmpl.value().render(in);
    if (!prompt.ok()) return fail(prompt.status());
    GenerationRequest g;
    g.prompt = tokenizer.value().encode(prompt.value());
    g.sampling = sampling;
    g.sampling.seed = seed + uint64_t(turn++);
    g.max_tokens = std::min<int64_t>(max_tokens, std::max<int64_t>(1, ctx - int64_t(g.prompt.size())));
    const auto t0 = std::chrono::steady_clock::now();
    Submitted sub = scheduler.submit(std::move(g));
    if (sub.code != SubmitCode::kOk) {
      std::fprintf(stderr, "weft: %s\n", sub.message.c_str());
      messages.erase(messages.end() - 1);
      continue;
    }
    std::string reply;
    GenerationEvent last;
    double ttft = -1;
    for (bool done = false; !done;) {
      std::vector<GenerationEvent> events;
      sub.handle->next(&events, std::chrono::milliseconds(500));
      for (GenerationEvent& e : events) {
        if (ttft < 0 && (!e.text.empty() || e.done))
          ttft = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fputs(e.text.c_str(), stdout);
        std::fflush(stdout);
        reply += e.text;
        if (e.done) {
          done = true;
          last = e;
        }
      }
    }
    std::printf("\n");
    std::fflush(stdout);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "weft: %lld prompt tokens (%lld reused), %lld generated, first token %.3f s, %.1f tok/s%s\n",
                 (long long)last.prompt_tokens, (long long)last.cached_tokens, (long long)last.completion_tokens, ttft,
                 secs > 0 ? double(last.completion_tokens) / secs : 0.0,
                 last.finish_reason == "length" ? " (cut at --max-tokens)" : "");
    if (last.finish_reason == "error") return fail(Status::error(last.error));
    messages.push_back({{"role", "assistant"}, {"content", reply}});
  }
  scheduler.shutdown(true);
  return 0;
}

const CommandRegistrar kRegister("chat", "chat in the terminal (streams replies, reuses the conversation's prefix)",
                                 run_chat);

}  // namespace
}  // namespace weft::cli
