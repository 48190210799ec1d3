// `weft serve`: an OpenAI-compatible HTTP server (src/server) with continuous batching over
// --parallel slots and multi-turn prefix reuse. Binds 127.0.0.1 unless --host says otherwise.
// SIGINT/SIGTERM: stop taking requests, finish those running and queued, exit; a second signal
// cancels what is left.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/command.h"
#include "cli/common.h"
#include "engine/engine.h"
#include "engine/generation_defaults.h"
#include "engine/scheduler.h"
#include "io/chat_template.h"
#include "io/model_files.h"
#include "io/tokenizer.h"
#include "server/http_server.h"

namespace weft::cli {
namespace {

int run_serve(int argc, char** argv) {
  CLI::App app(
      "Serve a model over an OpenAI-compatible HTTP API: POST /v1/chat/completions, POST /v1/completions, "
      "GET /v1/models, GET /health, GET /metrics",
      "serve");
  std::string model_dir, chat_template_file;
  server::ServerOptions so;
  SchedulerOptions sched;
  int threads = 0;
  RunFlags run;
  app.add_option("-m,--model", model_dir, "model directory (HF format) or .gguf file; default: the built-in model");
  app.add_option("--host", so.host, "address to listen on (default 127.0.0.1: this machine only)");
  app.add_option("--port", so.port, "port (0: any free port, printed at start)")->check(CLI::Range(0, 65535));
  app.add_option("--parallel", sched.parallel, "sequences decoded together (slots)")->check(CLI::Range(1, 256));
  app.add_option("--ctx", sched.ctx, "tokens one sequence may hold (prompt + reply)")->check(CLI::Range(16, 1 << 24));
  app.add_option("--queue", sched.max_queue, "requests that may wait for a slot; more get 503 + Retry-After")
      ->check(CLI::Range(1, 100000));
  app.add_option("--prefill-chunk", sched.prefill_chunk,
                 "prompt rows prefilled per step, interleaved with decode steps (rounded up to a multiple of 64)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--checkpoints", sched.max_checkpoints, "GDN state checkpoints kept per slot for prefix reuse")
      ->check(CLI::Range(1, 4096));
  app.add_option("--api-key", so.api_key, "require 'Authorization: Bearer KEY' on /v1 routes ($WEFT_API_KEY too)")
      ->envname("WEFT_API_KEY");
  app.add_option("--max-tokens", so.limits.max_tokens, "largest max_tokens a request may ask for")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--max-body", so.max_body, "largest request body in bytes")->check(CLI::Range(1024, 1 << 30));
  app.add_option("--chat-template", chat_template_file, "a Jinja chat template file (default: the model's own)");
  app.add_option("--model-name", so.model_name, "the model id reported by /v1/models and in replies (default: the directory name)");
  app.add_option("--threads", threads, "worker threads (0 = all cores)")->check(CLI::Range(0, 1024));
  app.add_option("--test-reply", so.test_replies,
                 "testing: chat replies are these texts (in turn) instead of sampled tokens; the model still runs")
      ->group("Testing");
  run.add(app);
  if (int rc = run.parse(app, argc, argv); rc >= 0) return rc;
  sched.kv = run.kv_options;
  auto model = open_model(&model_dir);
  if (!model.ok()) return fail(model.status());
  const ModelConfig& c = model.value()->config();
  if (Status s = run.check_model(c, sched.ctx, size_t(sched.parallel)); !s.ok())
    return fail(s.with_context("--ctx " + std::to_string(sched.ctx) + " x --parallel " + std::to_string(sched.parallel)));
  auto tokenizer = Tokenizer::load_from_dir(model_dir);
  if (!tokenizer.ok()) return fail(tokenizer.status().with_context("weft serve needs the model's tokenizer"));
  std::optional<ChatTemplate> chat_template;
  if (!chat_template_file.empty()) {
    auto t = ChatTemplate::from_file(chat_template_file, model_dir);
    if (!t.ok()) return fail(t.status());
    chat_template = std::move(t.value());
  } else {
    auto t = ChatTemplate::for_model(model_dir);
    if (t.ok()) chat_template = std::move(t.value());
    else std::fprintf(stderr, "weft: %s; /v1/chat/completions answers 400 until one is given\n", t.status().message().c_str());
  }
  auto defaults = load_generation_defaults(model_dir);
  if (!defaults.ok()) return fail(defaults.status());
  std::fprintf(stderr, "weft: %s\n", defaults.value().describe().c_str());
  if (so.model_name == "weft") so.model_name = std::filesystem::path(model_dir).filename().string();
  if (so.model_name.empty()) so.model_name = "weft";

  std::vector<int32_t> eos = c.eos_token_ids;
  for (int32_t e : tokenizer.value().eos_ids()) eos.push_back(e);

  // Signals go to one thread that waits for them (sigwait), blocked everywhere else: the
  // threads started below inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that vanished is a failed write, not a dead server

  EngineOptions eo;
  eo.threads = threads;
  eo.device = run.device;
  Engine engine(*model.value(), eo);
  Scheduler scheduler(engine, &tokenizer.value(), eos, sched);
  server::HttpServer http(scheduler, tokenizer.value(), chat_template ? &*chat_template : nullptr, defaults.value(), so);
  std::string err;
  if (!http.bind(&err)) {
    scheduler.shutdown(false);
    return fail(Status::error(err));
  }
  std::fprintf(stderr,
               "weft: serving %s on http://%s:%d (parallel %d, ctx %lld, kv %s/%s, queue %d, %d threads%s)\n",
               so.model_name.c_str(), so.host.c_str(), http.port(), sched.parallel, (long long)sched.ctx,
               dtype_name(sched.kv.k_type), dtype_name(sched.kv.v_type), sched.max_queue, engine.threads(),
               so.api_key.empty() ? "" : ", API key required");

  std::atomic<bool> finished{false};
  std::thread signal_thread([&] {
    int seen = 0;
    std::thread drainer;
    while (!finished) {
      timespec wait{0, 200 * 1000 * 1000};
      const int sig = sigtimedwait(&signals, nullptr, &wait);
      if (sig < 0) continue;
      if (++seen == 1) {
        std::fprintf(stderr, "weft: %s: finishing requests in flight (again to cancel them)\n", strsignal(sig));
        http.set_draining();
        drainer = std::thread([&] {
          scheduler.shutdown(/*drain=*/true);
          http.stop();
        });
      } else {
        std::fprintf(stderr, "weft: cancelling requests in flight\n");
        scheduler.shutdown(/*drain=*/false);
      }
    }
    if (drainer.joinable()) drainer.join();
  });
  http.serve();
  finished = true;
  signal_thread.join();
  scheduler.shutdown(false);
  const SchedulerStats st = scheduler.stats();
  std::fprintf(stderr, "weft: stopped after %lld requests (%lld prompt tokens, %lld reused; %lld generated)\n",
               (long long)st.requests_total, (long long)st.prompt_tokens, (long long)st.cached_tokens,
               (long long)st.completion_tokens);
  return 0;
}

const CommandRegistrar kRegister("serve", "OpenAI-compatible HTTP server (continuous batching, prefix reuse, tool calls)",
                                 run_serve);

}  // namespace
}  // namespace weft::cli
