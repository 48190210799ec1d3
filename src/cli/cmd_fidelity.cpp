// `weft fidelity`: teacher-forced quality of KV-cache types against a reference arm (KL, top-1,
// ΔNLL / perplexity ratio, Δp), overall and by context depth. Definitions: src/lab/fidelity.h.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/command.h"
#include "cli/common.h"
#include "core/mapped_file.h"
#include "core/progress_line.h"
#include "io/json_text.h"
#include "io/tokenizer.h"
#include "lab/fidelity.h"
#include "model/gguf_convert.h"
#include "io/model_files.h"

namespace weft::cli {
namespace {

namespace fs = std::filesystem;

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return Status::error("cannot write " + path);
  f << text;
  f.close();
  if (!f) return Status::error("error writing " + path);
  return Status();
}

// Tokenizes only as much of the text as the run needs (wikitext-2 test is 1.3 MB; 4K tokens need
// ~20 KB): a prefix cut at a line end, doubled until it yields `need` tokens plus a margin.
// Pre-tokenization pieces are local, so the cut can only change the tokens next to it; the
// 64-token margin keeps those out of the first `need`. need <= 0 means the whole text.
std::vector<int32_t> encode_prefix(const Tokenizer& tok, const std::string& text, int64_t need) {
  if (need <= 0) return tok.encode(text);
  size_t len = std::max<size_t>(16384, size_t(need) * 8);
  while (true) {
    if (len >= text.size()) return tok.encode(text);
    size_t cut = text.rfind('\n', len);
    if (cut == std::string::npos || cut == 0) cut = len;
    std::vector<int32_t> ids = tok.encode(std::string_view(text).substr(0, cut));
    if (int64_t(ids.size()) >= need + 64) return ids;
    len *= 2;
  }
}

int run_fidelity_cmd(int argc, char** argv) {
  CLI::App app(
      "Teacher-forced fidelity of KV-cache types: every arm (a KV type, or K/V pair such as q8_0/f16) "
      "reads the same tokens; each position's next-token distribution is compared with the first arm's "
      "(the reference): KL(P_ref || P_arm), top-1 agreement, ΔNLL and perplexity ratio, Δp of the true "
      "token, overall and by context depth. --json prints one object: {\"arms\": {name: {kld_mean, "
      "kld_median, kld_p99, kld_max, top1, ppl_ratio, dnll_mean, dp_mean, dp_abs_p99, n, buckets: [...]}}, "
      "\"ref\", \"tokens\", \"model\"}.",
      "fidelity");
  std::string model_dir, text_file, ids_file, arms_csv, out_dir, weights_csv;
  int64_t ctx = 0, batch = 128;
  int threads = 0;
  bool json = false;
  app.add_option("-m,--model", model_dir, "model directory (HF format); default: the built-in model");
  auto* text_opt = app.add_option("--text", text_file, "UTF-8 text, tokenized with the model's tokenizer.json");
  auto* ids_opt = app.add_option("--ids-file", ids_file, "token ids separated by whitespace or commas");
  text_opt->excludes(ids_opt);
  app.add_option("--arms", arms_csv,
                 "comma-separated KV types, the first is the reference, e.g. f16,q8_0,q4_0; K/V pairs such as "
                 "q8_0/f16; a \"+rot\" suffix (q4_0+rot, q4_0/q4_0+rot) turns on the Hadamard rotation of "
                 "--kv-rotate for that arm; with --weights one type is enough (default f16)");
  app.add_option("--weights", weights_csv,
                 "also compare weight types: comma-separated schemes (q8_0, q4_k_m, q5_k_m, q6_k, q4_0, bf16, ...), "
                 "each an arm \"w:SCHEME\" with the model's weights re-encoded through GGUF (weft convert + "
                 "quantize, in a temporary directory) and the reference arm's KV type; the scheme of the model "
                 "itself (bf16 / keep) is the reference and is skipped");
  app.add_option("--ctx", ctx, "tokens to feed (the first N); default all, capped by max_position_embeddings")
      ->check(kNonNegative);
  app.add_option("--batch", batch, "tokens per lockstep chunk; memory is arms x batch x vocab floats")
      ->check(kPositive);
  app.add_option("--threads", threads, "worker threads per session (0 = all cores); results do not depend on it")
      ->check(kNonNegative);
  app.add_option("--out", out_dir, "write results.json, report.md and kl_by_depth.svg here");
  std::string device;
  add_device_flag(app, &device);
  app.add_flag("--json", json, "print one JSON object on stdout instead of the Markdown table");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto dev = resolve_device(device);
  if (!dev.ok()) return fail(dev.status());
  if (text_file.empty() && ids_file.empty()) {
    std::fprintf(stderr, "weft fidelity: one of --text FILE or --ids-file FILE is required\n(see weft fidelity --help)\n");
    return 2;
  }

  if (arms_csv.empty() && weights_csv.empty()) {
    std::fprintf(stderr, "weft fidelity: --arms is required (or --weights)\n(see weft fidelity --help)\n");
    return 2;
  }
  if (arms_csv.empty()) arms_csv = "f16";
  Result<std::vector<lab::FidelityArm>> arms = Status::error("");
  if (!weights_csv.empty() && arms_csv.find(',') == std::string::npos) {
    // One KV type: the reference of the weight arms (they add the second and later arms).
    auto one = lab::parse_fidelity_arm(arms_csv);
    if (!one.ok()) return fail(one.status());
    arms = std::vector<lab::FidelityArm>{one.value()};
  } else {
    arms = lab::parse_fidelity_arms(arms_csv);
  }
  if (!arms.ok()) return fail(arms.status());
  // Read the input before loading the model, so a missing file is reported at once.
  std::string text;
  std::vector<int32_t> ids;
  if (!text_file.empty()) {
    auto t = read_text_file(text_file);
    if (!t.ok()) return fail(t.status().with_context("--text"));
    text = std::move(t.value());
  } else {
    auto r = read_ids_file(ids_file);
    if (!r.ok()) return fail(r.status());
    ids = std::move(r.value());
  }
  auto model = open_model(&model_dir);
  if (!model.ok()) return fail(model.status());
  const ModelConfig& c = model.value()->config();
  if (Status s = lab::check_arms_supported(arms.value(), c); !s.ok()) return fail(s);

  int64_t limit = ctx;
  if (c.max_position_embeddings > 0 && (limit == 0 || limit > c.max_position_embeddings)) {
    if (limit > c.max_position_embeddings)
      std::fprintf(stderr, "weft: --ctx %lld exceeds the model's max_position_embeddings; using %lld\n",
                   (long long)limit, (long long)c.max_position_embeddings);
    limit = c.max_position_embeddings;
  }
  if (!text_file.empty()) {
    if (!fs::exists(model_dir + "/tokenizer.json"))
      return fail(Status::error("--text needs a tokenizer, but " + model_dir +
                                "/tokenizer.json does not exist (give pre-tokenized ids with --ids-file)"));
    auto tok = Tokenizer::load_from_dir(model_dir);
    if (!tok.ok()) return fail(tok.status());
    if (tok->add_bos() && tok->bos_id()) ids.push_back(*tok->bos_id());
    std::vector<int32_t> body = encode_prefix(tok.value(), text, limit > 0 ? limit : 0);
    ids.insert(ids.end(), body.begin(), body.end());
  }
  if (limit > 0 && int64_t(ids.size()) > limit) ids.resize(size_t(limit));
  if (ctx > 0 && int64_t(ids.size()) < ctx)
    std::fprintf(stderr, "weft: the input has only %zu tokens (--ctx %lld asked for more)\n", ids.size(), (long long)ctx);
  if (ids.size() < 2) return fail(Status::error("the input has fewer than two tokens: nothing to score"));

  std::fprintf(stderr, "weft fidelity: %zu tokens, %zu arms (reference %s), batch %lld\n", ids.size(),
               arms->size(), arms->front().name.c_str(), (long long)batch);
  lab::FidelityOptions opts;
  opts.batch = batch;
  opts.threads = threads;
  opts.device = dev.value();
  ProgressLine line;
  opts.progress = [&](int64_t done, int64_t total) {
    const double el = line.seconds();
    line.update(done >= total, "fidelity: %lld / %lld tokens, %.1f tok/s, %.1f s", (long long)done, (long long)total,
                el > 0 ? double(done) / el : 0.0, el);
  };
  // Weight arms: the model re-encoded per scheme (kept alive for the run).
  std::vector<std::unique_ptr<Model>> weight_models;
  std::string weight_tmp;
  if (!weights_csv.empty()) {
    weight_tmp = (fs::temp_directory_path() / ("weft-fidelity-weights-" + std::to_string(getpid()))).string();
    std::error_code ec;
    fs::create_directories(weight_tmp, ec);
    if (ec) return fail(Status::error("cannot create " + weight_tmp + ": " + ec.message()));
    std::string base = model_dir;
    if (!ModelFiles::is_gguf(model_dir)) {
      base = weight_tmp + "/keep.gguf";
      if (Status s = convert_hf_to_gguf(model_dir, base, WeightScheme::kKeep); !s.ok()) return fail(s.with_context("--weights"));
    }
    std::stringstream ss(weights_csv);
    for (std::string w; std::getline(ss, w, ',');) {
      auto scheme = parse_weight_scheme(w);
      if (!scheme.ok()) return fail(scheme.status().with_context("--weights"));
      if (scheme.value() == WeightScheme::kKeep) continue;  // the reference's own weights
      const std::string path = weight_tmp + "/" + weight_scheme_name(scheme.value()) + ".gguf";
      std::fprintf(stderr, "weft fidelity: writing the %s weights\n", weight_scheme_name(scheme.value()));
      if (Status s = quantize_gguf(base, path, scheme.value()); !s.ok()) return fail(s.with_context("--weights"));
      auto m = Model::load(path);
      if (!m.ok()) return fail(m.status());
      lab::FidelityArm a = arms.value().front();
      a.name = std::string("w:") + weight_scheme_name(scheme.value());
      a.model = m.value().get();
      weight_models.push_back(std::move(m.value()));
      arms.value().push_back(a);
    }
  }
  auto result = lab::run_fidelity(*model.value(), ids, arms.value(), opts);
  if (!weight_tmp.empty()) {
    std::error_code ec;
    fs::remove_all(weight_tmp, ec);
  }
  if (!result.ok()) return fail(result.status());

  const nlohmann::json j = lab::fidelity_json(result.value(), model_dir);
  const std::string table = lab::fidelity_markdown(result.value());
  if (!out_dir.empty()) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) return fail(Status::error("cannot create " + out_dir + ": " + ec.message()));
    char head[512];
    std::snprintf(head, sizeof head,
                  "# KV-cache fidelity\n\nModel `%s`, %lld tokens (%lld scored positions), reference arm `%s` "
                  "(perplexity %.4f), batch %lld, wall time %.1f s.\n\n",
                  model_dir.c_str(), (long long)result->tokens, (long long)result->tokens - 1, result->ref.c_str(),
                  result->ref_summary.ref_ppl, (long long)batch, result->wall_s);
    const std::string report = std::string(head) + table + "\n![mean KL by context depth](kl_by_depth.svg)\n";
    for (const auto& [name, body] :
         {std::pair<std::string, std::string>{"results.json", json_text(j, 2) + "\n"}, {"report.md", report},
          {"kl_by_depth.svg", lab::fidelity_svg(result.value(), "Mean KL vs " + result->ref + " by context depth")}})
      if (Status s = write_file(out_dir + "/" + name, body); !s.ok()) return fail(s);
    std::fprintf(stderr, "weft: wrote %s/{results.json,report.md,kl_by_depth.svg}\n", out_dir.c_str());
  }
  if (json) {
    std::printf("%s\n", json_text(j).c_str());
  } else {
    std::printf("reference %s: perplexity %.4f over %lld positions; wall %.1f s\n\n%s", result->ref.c_str(),
                result->ref_summary.ref_ppl, (long long)result->tokens - 1, result->wall_s, table.c_str());
  }
  return 0;
}

const CommandRegistrar kRegister("fidelity", "teacher-forced KL / top-1 / PPL of KV-cache types vs a reference",
                                 run_fidelity_cmd);

}  // namespace
}  // namespace weft::cli
