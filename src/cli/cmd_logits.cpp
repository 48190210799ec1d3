// `weft logits`: teacher-forced logits of every position of a token stream, as a safetensors
// file with one tensor `logits` f32 [T, V]. The contract other tools build on.
#include <cstdio>

#include "cli/command.h"
#include "cli/common.h"
#include "engine/session.h"
#include "io/safetensors.h"

namespace weft::cli {
namespace {

int run_logits(int argc, char** argv) {
  CLI::App app("Teacher-forced logits for every position of a token stream", "logits");
  std::string model_dir, ids_file, out_path;
  int threads = 0;
  int64_t batch = 128;
  KvFlags kv;
  app.add_option("-m,--model", model_dir, "model directory (HF format); default: the built-in model");
  app.add_option("--ids-file", ids_file, "token ids separated by whitespace or commas")->required();
  app.add_option("-o,--out", out_path, "output .safetensors (tensor 'logits' f32 [T, V])")->required();
  app.add_option("--threads", threads, "worker threads (0 = all cores); results do not depend on it")
      ->check(CLI::Range(0, 1024));
  app.add_option("--batch", batch, "tokens per forward call")->check(CLI::PositiveNumber);
  kv.add(app);
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;

  auto kv_options = kv.resolve();
  if (!kv_options.ok()) return fail(kv_options.status());
  auto ids = read_ids_file(ids_file);
  if (!ids.ok()) return fail(ids.status());
  auto model = open_model(&model_dir);
  if (!model.ok()) return fail(model.status());
  const ModelConfig& c = model.value()->config();
  if (Status s = check_kv_types(c, kv_options.value()); !s.ok()) return fail(s);
  const int64_t T = int64_t(ids->size()), V = c.vocab_size;
  SessionOptions so;
  so.kv = kv_options.value();
  so.threads = threads;
  so.batch = batch;
  Session session(*model.value(), so);
  std::vector<float> logits(static_cast<size_t>(T * V));
  auto progress = [&](int64_t done, int64_t total) {
    if (total >= 2048) std::fprintf(stderr, "\rweft: teacher-forced %lld / %lld tokens", (long long)done, (long long)total);
    if (total >= 2048 && done == total) std::fprintf(stderr, "\n");
  };
  Status s = session.feed_with_progress(ids->data(), T, logits.data(), nullptr, 1024, progress);
  if (!s.ok()) return fail(s);
  s = write_safetensors(out_path, {{"logits", DType::kF32, {T, V}, logits.data()}});
  if (!s.ok()) return fail(s);
  std::fprintf(stderr, "weft: wrote logits [%lld, %lld] to %s\n", (long long)T, (long long)V, out_path.c_str());
  return 0;
}

const CommandRegistrar kRegister("logits", "teacher-forced logits of a token stream -> safetensors", run_logits);

}  // namespace
}  // namespace weft::cli
