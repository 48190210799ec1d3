// `weft logits`: teacher-forced logits of every position of a token stream, as a safetensors
// file with one tensor `logits` f32 [T, V]. The contract other tools build on.
#include <algorithm>
#include <cstdio>

#include "cli/command.h"
#include "cli/common.h"
#include "core/progress_line.h"
#include "engine/session.h"
#include "io/safetensors.h"

namespace weft::cli {
namespace {

int run_logits(int argc, char** argv) {
  CLI::App app("Teacher-forced logits for every position of a token stream", "logits");
  std::string model_dir, ids_file, out_path;
  int threads = 0;
  int64_t batch = 128;
  RunFlags run;
  app.add_option("-m,--model", model_dir, "model directory (HF format); default: the built-in model");
  app.add_option("--ids-file", ids_file, "token ids separated by whitespace or commas")->required();
  app.add_option("-o,--out", out_path, "output .safetensors (tensor 'logits' f32 [T, V])")->required();
  app.add_option("--threads", threads, "worker threads (0 = all cores); results do not depend on it")
      ->check(CLI::Range(0, 1024));
  app.add_option("--batch", batch, "tokens per forward call (rounded up to a multiple of 64, the prefill chunk; results do not depend on it)")->check(kPositive);
  run.add(app);
  if (int rc = run.parse(app, argc, argv); rc >= 0) return rc;
  auto ids = read_ids_file(ids_file);
  if (!ids.ok()) return fail(ids.status());
  auto model = open_model(&model_dir);
  if (!model.ok()) return fail(model.status());
  const ModelConfig& c = model.value()->config();
  const int64_t T = int64_t(ids->size()), V = c.vocab_size;
  if (Status s = run.check_model(c, T); !s.ok()) return fail(s);
  SessionOptions so;
  so.kv = run.kv_options;
  so.threads = threads;
  so.device = run.device;
  so.batch = batch;
  Session session(*model.value(), so);
  // Rows are streamed into the file batch by batch: memory holds one batch of logits, never
  // T x V (32 GB at T = 32K with a 248,320-token vocabulary). Feeding whole batches makes the
  // same forward calls as one feed() of all T tokens, so the values are the same.
  auto writer = SafetensorsStreamWriter::open(out_path, {{"logits", DType::kF32, {T, V}, nullptr}});
  if (!writer.ok()) return fail(writer.status());
  const int64_t rows = std::min(session.batch(), T);
  std::vector<float> logits(static_cast<size_t>(rows * V));
  ProgressLine line;
  for (int64_t done = 0; done < T;) {
    const int64_t m = std::min(rows, T - done);
    Status s = session.feed(ids->data() + done, m, logits.data(), nullptr);
    if (s.ok()) s = writer.value()->append(logits.data(), size_t(m * V) * sizeof(float));
    if (!s.ok()) return fail(s);  // the writer's destructor removes the partial temp file
    done += m;
    if (T >= 2048) line.update(done == T, "weft: teacher-forced %lld / %lld tokens", (long long)done, (long long)T);
  }
  if (Status s = writer.value()->finish(); !s.ok()) return fail(s);
  std::fprintf(stderr, "weft: wrote logits [%lld, %lld] to %s\n", (long long)T, (long long)V, out_path.c_str());
  return 0;
}

const CommandRegistrar kRegister("logits", "teacher-forced logits of a token stream -> safetensors", run_logits);

}  // namespace
}  // namespace weft::cli
