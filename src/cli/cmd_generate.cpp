// `weft generate`: prefill a prompt, then decode N tokens (greedy or sampled), streaming text
// when the model has a tokenizer; --json prints one machine-readable object instead.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "io/tokenizer.h"

namespace weft::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_generate(int argc, char** argv) {
  CLI::App app("Generate tokens from a prompt (prefill + decode)", "generate");
  std::string model_dir, ids_file, prompt;
  int64_t n = 64;
  int threads = 0;
  int64_t ctx_max = 0;
  bool json = false, no_stop = false;
  SamplerOptions so;
  KvFlags kv;
  app.add_option("-m,--model", model_dir, "model directory (HF format); default: the built-in model");
  auto* ids_opt = app.add_option("--ids-file", ids_file, "prompt as token ids (whitespace/comma separated)");
  auto* prompt_opt = app.add_option("-p,--prompt", prompt, "prompt text (needs tokenizer.json in the model dir)");
  ids_opt->excludes(prompt_opt);
  app.add_option("-n,--n-tokens", n, "tokens to generate")->check(CLI::NonNegativeNumber);
  app.add_option("--temp", so.temperature, "temperature (0 = greedy)")->check(CLI::NonNegativeNumber);
  app.add_option("--top-k", so.top_k, "keep the k most likely tokens (0 = off)")->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", so.top_p, "nucleus sampling mass (1 = off)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--min-p", so.min_p, "drop tokens below min_p x p(top) (0 = off)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", so.seed, "sampling seed");
  app.add_option("--threads", threads, "worker threads (0 = all cores)")->check(CLI::Range(0, 1024));
  app.add_flag("--ignore-eos", no_stop, "keep generating past end-of-sequence tokens");
  app.add_flag("--json", json, "print one JSON object: tokens, prefill_tok_s, decode_tok_s, text");
  kv.add(app);
  add_ctx_max_flag(app, &ctx_max);
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;

  auto kv_options = kv.resolve();
  if (!kv_options.ok()) return fail(kv_options.status());
  auto model = open_model(&model_dir);
  if (!model.ok()) return fail(model.status());
  const ModelConfig& c = model.value()->config();
  std::optional<Tokenizer> tokenizer;
  if (std::filesystem::exists(model_dir + "/tokenizer.json")) {
    auto tok = Tokenizer::load_from_dir(model_dir);
    if (!tok.ok()) return fail(tok.status());
    tokenizer = std::move(tok.value());
  }
  std::vector<int32_t> ids;
  if (!ids_file.empty()) {
    auto r = read_ids_file(ids_file);
    if (!r.ok()) return fail(r.status());
    ids = std::move(r.value());
  } else {
    if (!tokenizer) return fail(Status::error("--prompt needs tokenizer.json in '" + model_dir + "'; use --ids-file"));
    if (tokenizer->add_bos() && tokenizer->bos_id()) ids.push_back(*tokenizer->bos_id());
    auto enc = tokenizer->encode(prompt);
    ids.insert(ids.end(), enc.begin(), enc.end());
    if (ids.empty() && c.bos_token_id >= 0) ids.push_back(c.bos_token_id);
    if (ids.empty()) return fail(Status::error("empty prompt and the model has no BOS token"));
  }
  if (Status s = check_kv_types(c, kv_options.value()); !s.ok()) return fail(s);
  // The cache holds the prompt and the generated tokens: refuse before anything is allocated.
  if (Status s = check_context(c, int64_t(ids.size()) + n, {kv_options.value()}, ctx_max); !s.ok()) return fail(s);

  SessionOptions sess_opts;
  sess_opts.kv = kv_options.value();
  sess_opts.threads = threads;
  Session session(*model.value(), sess_opts);
  Sampler sampler(so);
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  auto t0 = std::chrono::steady_clock::now();
  auto progress = [&](int64_t done, int64_t total) {
    if (total >= 2048) std::fprintf(stderr, "\rweft: prefill %lld / %lld tokens", (long long)done, (long long)total);
    if (total >= 2048 && done == total) std::fprintf(stderr, "\n");
  };
  Status s = session.feed_with_progress(ids.data(), int64_t(ids.size()), nullptr, logits.data(), 1024, progress);
  if (!s.ok()) return fail(s);
  const double prefill_s = seconds_since(t0);

  std::vector<int32_t> eos = c.eos_token_ids;
  if (tokenizer)
    for (int32_t e : tokenizer->eos_ids()) eos.push_back(e);
  std::vector<int32_t> out;
  std::optional<StreamDecoder> stream;
  if (tokenizer) stream.emplace(*tokenizer);
  if (!json && tokenizer) {
    std::fputs(tokenizer->decode(ids).c_str(), stdout);
    std::fflush(stdout);
  }
  auto t1 = std::chrono::steady_clock::now();
  int64_t decoded = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t next = sampler.sample(logits.data(), c.vocab_size);
    out.push_back(next);
    if (!json) {
      if (stream) std::fputs(stream->push(next).c_str(), stdout);
      else std::printf("%d ", next);
      std::fflush(stdout);
    }
    const bool stop = !no_stop && std::find(eos.begin(), eos.end(), next) != eos.end();
    if (stop || i + 1 == n) break;
    s = session.step(next, logits.data());
    if (!s.ok()) return fail(s);
    ++decoded;
  }
  const double decode_s = seconds_since(t1);
  if (json) {
    nlohmann::json j;
    j["tokens"] = out;
    j["prompt_tokens"] = ids.size();
    j["prefill_tok_s"] = prefill_s > 0 ? double(ids.size()) / prefill_s : 0.0;
    j["decode_tok_s"] = decode_s > 0 && decoded > 0 ? double(decoded) / decode_s : 0.0;
    j["threads"] = session.pool().size();
    if (tokenizer) j["text"] = tokenizer->decode(out);
    std::printf("%s\n", j.dump().c_str());
  } else {
    if (stream) std::fputs(stream->flush().c_str(), stdout);
    std::printf("\n");
    std::fprintf(stderr, "weft: prompt %zu tokens, prefill %.1f tok/s; %zu generated, decode %.2f tok/s\n",
                 ids.size(), prefill_s > 0 ? double(ids.size()) / prefill_s : 0.0, out.size(),
                 decode_s > 0 && decoded > 0 ? double(decoded) / decode_s : 0.0);
  }
  return 0;
}

const CommandRegistrar kRegister("generate", "prefill a prompt and decode tokens (greedy or sampled)", run_generate);

}  // namespace
}  // namespace weft::cli
