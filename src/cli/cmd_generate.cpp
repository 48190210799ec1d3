// `weft generate`: prefill one or more prompts, then decode N tokens for each (greedy or
// sampled). Several prompts (--prompt / --ids-file, repeatable) are decoded together as one
// batch: one forward call per step for all of them, each weight read once per step. A single
// prompt streams its text as it is generated; --json prints one JSON object per input, in input
// order, one per line.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "core/progress_line.h"
#include "io/chat_template.h"
#include "io/json_text.h"
#include "io/model_files.h"
#include "engine/engine.h"
#include "engine/generation_defaults.h"
#include "engine/sampler.h"
#include "io/tokenizer.h"

namespace weft::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One input of the batch and what became of it.
struct Job {
  std::vector<int32_t> prompt;
  std::vector<int32_t> out;
  std::vector<float> logits;
  SeqId seq = 0;
  std::optional<Sampler> sampler;
  bool done = false;
};

int run_generate(int argc, char** argv) {
  CLI::App app("Generate tokens from one or more prompts (prefill + decode; several prompts decode as one batch)",
               "generate");
  std::string model_dir;
  std::vector<std::string> ids_files, prompts;
  int64_t n = 64;
  int threads = 0;
  bool json = false, no_stop = false;
  bool chat = false;
  std::string system_prompt, chat_template_file;
  SamplerOptions so;
  RunFlags run;
  app.add_option("-m,--model", model_dir, "model directory (HF format) or .gguf file; default: the built-in model");
  app.add_option("--ids-file", ids_files, "prompt as token ids (whitespace/comma separated); repeatable");
  app.add_option("-p,--prompt", prompts, "prompt text (needs tokenizer.json in the model dir, or a GGUF tokenizer); repeatable");
  app.add_option("-n,--n-tokens", n, "tokens to generate per input")->check(kNonNegative);
  app.add_option("--temp", so.temperature, "temperature (0 = greedy; default: the model's generation_config.json)")->check(kNonNegative);
  app.add_option("--top-k", so.top_k, "keep the k most likely tokens (0 = off)")->check(kNonNegative);
  app.add_option("--top-p", so.top_p, "nucleus sampling mass (1 = off)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--min-p", so.min_p, "drop tokens below min_p x p(top) (0 = off)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", so.seed, "sampling seed (each input's sampler starts from it)");
  app.add_option("--threads", threads, "worker threads (0 = all cores)")->check(CLI::Range(0, 1024));
  app.add_flag("--chat", chat,
               "render each --prompt as a user message through the model's chat template (with the "
               "assistant turn opened), as transformers' apply_chat_template does");
  app.add_option("--system", system_prompt, "with --chat: a system message before the user's");
  app.add_option("--chat-template", chat_template_file, "with --chat: a Jinja template file to use instead of the model's");
  app.add_flag("--ignore-eos", no_stop, "keep generating past end-of-sequence tokens");
  app.add_flag("--json", json,
               "print one JSON object per input (in input order, one per line): tokens, prefill_tok_s, "
               "decode_tok_s, text");
  run.add(app);
  if (int rc = run.parse(app, argc, argv); rc >= 0) return rc;
  auto model = open_model(&model_dir);
  if (!model.ok()) return fail(model.status());
  // Sampling flags not given come from the model's generation_config.json, as in chat and serve.
  {
    auto defaults = load_generation_defaults(model_dir);
    if (!defaults.ok()) return fail(defaults.status());
    const SamplerOptions& d = defaults.value().sampling;
    if (!app.count("--temp")) so.temperature = d.temperature;
    if (!app.count("--top-k")) so.top_k = d.top_k;
    if (!app.count("--top-p")) so.top_p = d.top_p;
    if (!app.count("--min-p")) so.min_p = d.min_p;
    const bool flags = app.count("--temp") + app.count("--top-k") + app.count("--top-p") + app.count("--min-p") > 0;
    std::fprintf(stderr, "weft: %s\n", defaults.value().describe_effective(so, flags).c_str());
  }
  const ModelConfig& c = model.value()->config();
  std::optional<Tokenizer> tokenizer;
  if (std::filesystem::exists(model_dir + "/tokenizer.json") || ModelFiles::is_gguf(model_dir)) {
    auto tok = Tokenizer::load_from_dir(model_dir);
    if (!tok.ok()) return fail(tok.status());
    tokenizer = std::move(tok.value());
  }
  if (ids_files.empty() && prompts.empty()) prompts.push_back("");  // BOS only, as before
  std::vector<Job> jobs;
  for (const std::string& f : ids_files) {
    auto r = read_ids_file(f);
    if (!r.ok()) return fail(r.status());
    if (r.value().empty()) return fail(Status::error("'" + f + "' holds no token ids"));
    jobs.emplace_back().prompt = std::move(r.value());
  }
  if (!chat && (!system_prompt.empty() || !chat_template_file.empty())) {
    return fail(Status::error("--system and --chat-template need --chat"));
  }
  std::optional<ChatTemplate> chat_template;
  if (chat) {
    auto t = chat_template_file.empty() ? ChatTemplate::for_model(model_dir)
                                        : ChatTemplate::from_file(chat_template_file, model_dir);
    if (!t.ok()) return fail(t.status());
    chat_template = std::move(t.value());
  }
  for (const std::string& p : prompts) {
    if (!tokenizer) return fail(Status::error("--prompt needs tokenizer.json in '" + model_dir + "'; use --ids-file"));
    std::vector<int32_t> ids;
    std::string text = p;
    if (chat_template) {  // the template writes any BOS itself, so none is added here
      ChatTemplateInput in;
      if (!system_prompt.empty()) in.messages.push_back({{"role", "system"}, {"content", system_prompt}});
      in.messages.push_back({{"role", "user"}, {"content", p}});
      auto rendered = chat_template->render(in);
      if (!rendered.ok()) return fail(rendered.status());
      text = std::move(rendered.value());
    } else if (tokenizer->add_bos() && tokenizer->bos_id()) {
      ids.push_back(*tokenizer->bos_id());
    }
    auto enc = tokenizer->encode(text);
    ids.insert(ids.end(), enc.begin(), enc.end());
    if (ids.empty() && c.bos_token_id >= 0) ids.push_back(c.bos_token_id);
    if (ids.empty()) return fail(Status::error("empty prompt and the model has no BOS token"));
    jobs.emplace_back().prompt = std::move(ids);
  }
  // Each input's cache holds its prompt and its generated tokens: refuse before anything is
  // allocated (counted as if every input were as long as the longest).
  size_t longest = 0;
  for (const Job& j : jobs) longest = std::max(longest, j.prompt.size());
  if (Status s = run.check_model(c, int64_t(longest) + n, jobs.size()); !s.ok()) return fail(s);

  EngineOptions eo;
  eo.threads = threads;
  eo.device = run.device;
  Engine engine(*model.value(), eo);
  std::vector<PrefillInput> prefill;
  int64_t prompt_tokens = 0;
  for (Job& j : jobs) {
    j.seq = engine.add(run.kv_options);
    j.logits.resize(size_t(c.vocab_size));
    j.sampler.emplace(so);
    prefill.push_back({j.seq, j.prompt.data(), int64_t(j.prompt.size()), j.logits.data()});
    prompt_tokens += int64_t(j.prompt.size());
  }
  // Bound before the clock starts: the one-time copy / upload is not prefill.
  if (Status s = engine.bind_weights(); !s.ok()) return fail(s);
  auto t0 = std::chrono::steady_clock::now();
  ProgressLine line;
  auto progress = [&](int64_t done, int64_t total) {
    if (total >= 2048) line.update(done == total, "weft: prefill %lld / %lld tokens", (long long)done, (long long)total);
  };
  if (Status s = engine.prefill(prefill, progress); !s.ok()) return fail(s);
  const double prefill_s = seconds_since(t0);

  std::vector<int32_t> eos = c.eos_token_ids;
  if (tokenizer)
    for (int32_t e : tokenizer->eos_ids()) eos.push_back(e);
  const bool stream_text = !json && jobs.size() == 1;
  std::optional<StreamDecoder> stream;
  if (tokenizer && stream_text) {
    stream.emplace(*tokenizer);
    std::fputs(tokenizer->decode(jobs[0].prompt).c_str(), stdout);
    std::fflush(stdout);
  }
  auto t1 = std::chrono::steady_clock::now();
  int64_t decoded = 0;
  std::vector<DecodeInput> step;
  for (int64_t i = 0; i < n; ++i) {
    step.clear();
    for (Job& j : jobs) {
      if (j.done) continue;
      const int32_t next = j.sampler->sample(j.logits.data(), c.vocab_size);
      j.out.push_back(next);
      if (stream_text) {
        if (stream) std::fputs(stream->push(next).c_str(), stdout);
        else std::printf("%d ", next);
        std::fflush(stdout);
      }
      const bool stop = !no_stop && std::find(eos.begin(), eos.end(), next) != eos.end();
      if (stop || i + 1 == n) {
        j.done = true;
        engine.retire(j.seq);
        continue;
      }
      step.push_back({j.seq, next, j.logits.data()});
    }
    if (step.empty()) break;
    if (Status s = engine.decode(step); !s.ok()) return fail(s);
    decoded += int64_t(step.size());
  }
  const double decode_s = seconds_since(t1);
  const double prefill_tok_s = prefill_s > 0 ? double(prompt_tokens) / prefill_s : 0.0;
  const double decode_tok_s = decode_s > 0 && decoded > 0 ? double(decoded) / decode_s : 0.0;
  if (json) {
    for (const Job& job : jobs) {
      nlohmann::json j;
      j["tokens"] = job.out;
      j["prompt_tokens"] = job.prompt.size();
      // Rates are of the whole batch (aggregate over inputs), the same in every line.
      j["batch"] = jobs.size();
      j["prefill_tok_s"] = prefill_tok_s;
      j["decode_tok_s"] = decode_tok_s;
      j["threads"] = engine.threads();
      if (tokenizer) j["text"] = tokenizer->decode(job.out);
      std::printf("%s\n", json_text(j).c_str());
    }
  } else {
    if (stream_text) {
      if (stream) std::fputs(stream->flush().c_str(), stdout);
      std::printf("\n");
    } else {
      for (size_t i = 0; i < jobs.size(); ++i) {
        std::printf("[%zu] ", i);
        if (tokenizer) std::printf("%s%s\n", tokenizer->decode(jobs[i].prompt).c_str(), tokenizer->decode(jobs[i].out).c_str());
        else {
          for (int32_t t : jobs[i].out) std::printf("%d ", t);
          std::printf("\n");
        }
      }
    }
    std::fprintf(stderr, "weft: %zu input(s), %lld prompt tokens, prefill %.1f tok/s; %lld decoded, decode %.2f tok/s%s\n",
                 jobs.size(), (long long)prompt_tokens, prefill_tok_s, (long long)decoded, decode_tok_s,
                 jobs.size() > 1 ? " (aggregate)" : "");
  }
  return 0;
}

const CommandRegistrar kRegister("generate", "prefill prompts and decode tokens (greedy or sampled; several prompts as one batch)",
                                 run_generate);

}  // namespace
}  // namespace weft::cli
