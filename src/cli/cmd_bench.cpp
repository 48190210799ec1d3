// `weft bench`: the paired decode curve (tok/s vs context depth per KV arm) with the KV-share
// ceiling, the byte roofline against an in-process bandwidth probe, and Step 0's kill verdict.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/backend_factory.h"
#include "cli/command.h"
#include "cli/common.h"
#include "io/json_text.h"
#include "lab/bench.h"
#include "model/model.h"
#include "model/synth.h"

namespace weft::cli {
namespace {

namespace fs = std::filesystem;

Result<std::vector<int64_t>> parse_depths(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      long long v = std::stoll(item, &used);
      std::string rest = item.substr(used);
      int64_t mult = 1;
      if (rest == "K" || rest == "k") mult = 1024;
      else if (!rest.empty()) throw std::invalid_argument(item);
      if (v <= 0) throw std::invalid_argument(item);
      out.push_back(v * mult);
    } catch (const std::exception&) {
      return Status::error("--ctx: '" + item + "' is not a positive context length");
    }
  }
  return out;
}

// FNV-1a 64: a stable key for the synthetic model's cache directory.
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char ch : s) { h ^= ch; h *= 1099511628211ULL; }
  return h;
}

std::string cache_root() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/weft";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/weft";
  return "/tmp/weft";
}

// The spec of --synthetic with its overrides, and the label bench prints for it.
Result<SynthSpec> synthetic_spec(const std::string& preset, const SynthOverrides& o, std::string* label) {
  auto spec = synth_preset(preset);
  if (!spec.ok()) return spec.status();
  WEFT_RETURN_IF_ERROR(synth_apply_overrides(&spec.value(), o));
  WEFT_RETURN_IF_ERROR(synth_validate(spec.value()));
  *label = "synthetic " + preset;
  if (o.layers > 0) *label += " --layers " + std::to_string(o.layers);
  if (o.experts > 0) *label += " --experts " + std::to_string(o.experts);
  if (o.vocab > 0) *label += " --vocab " + std::to_string(o.vocab);
  if (o.hidden > 0) *label += " --hidden " + std::to_string(o.hidden);
  return spec;
}

// Writes the synthetic model once per spec (config + seed + dtype) and returns its directory.
Result<std::string> synthetic_dir(const SynthSpec& spec, const std::string& label) {
  const std::string key = synth_config_json(spec).dump() + "|seed=" + std::to_string(spec.seed) +
                          "|dtype=" + dtype_name(spec.dtype);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a(key));
  const std::string dir = cache_root() + "/synth-" + hex;
  if (!fs::exists(dir + "/config.json")) {
    std::error_code ec;
    fs::create_directories(cache_root(), ec);
    std::fprintf(stderr, "weft: writing the synthetic model (%s) to %s\n", label.c_str(), dir.c_str());
    SynthWriteOptions wo;
    wo.force = true;
    wo.progress = true;
    WEFT_RETURN_IF_ERROR(synth_write(spec, dir, wo));
  } else {
    std::fprintf(stderr, "weft: using the cached synthetic model %s\n", dir.c_str());
  }
  return dir;
}

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f) return Status::error("cannot write '" + path + "'");
  return Status();
}

int run_bench_cmd(int argc, char** argv) {
  CLI::App app("Paired decode curve: tok/s vs context depth per KV type, with the KV-share ceiling", "bench");
  std::string model_dir, synthetic, ctx, arms = "f16,q8_0", out_dir;
  SynthOverrides ov;
  lab::BenchOptions o;
  int repeats = -1, gen = -1;
  int64_t bw_mib = 512;
  app.add_option("-m,--model", model_dir, "model directory (HF format); default: the built-in model");
  auto* syn = app.add_option("--synthetic", synthetic, "bench a random-weight model of a preset geometry (cached "
                                                       "on disk; generated in GPU memory with --device cuda)");
  bool memory = false;
  app.add_flag("--in-memory", memory, "synthetic: generate the model in memory, not in the disk cache (the default "
                                      "with --device cuda)");
  syn->excludes(app.get_option("--model"));
  app.add_option("--layers", ov.layers, "synthetic: layers (every 4th is full attention)");
  app.add_option("--experts", ov.experts, "synthetic: routed experts");
  app.add_option("--vocab", ov.vocab, "synthetic: vocabulary size");
  app.add_option("--hidden", ov.hidden, "synthetic: hidden size");
  app.add_option("--ctx", ctx, "ascending context depths, comma separated (32K allowed); default 512,1024,2048 "
                               "for the built-in model, 4096,16384,32768 otherwise");
  app.add_option("--arms", arms, "KV types to decode with (f16, q8_0, q4_0, f32), in any order; every ratio is "
                                 "against the f16 arm, which is added (and reported) when absent");
  app.add_option("--repeats", repeats, "interleaved repeats per arm (default 6: fewer cannot support a 95% claim)")->check(kPositive);
  app.add_option("--gen", gen, "decoded tokens per timed run (default 16)")->check(kPositive);
  app.add_option("--threads", o.threads, "worker threads (0 = all cores)")->check(kNonNegative);
  std::string device;
  add_device_flag(app, &device);
  app.add_option("--page-tokens", o.page_tokens, "KV page size in tokens")->check(kPositive);
  app.add_option("--kill-at", o.kill_at, "depth of the Step 0 verdict")->check(kPositive);
  app.add_option("--kill-below", o.kill_below, "Step 0: kill when the ceiling is under 1 + this")->check(kNonNegative);
  app.add_flag("--ceiling-only", o.ceiling_only, "Step 0: the f16 curve, projected ceilings and the kill verdict");
  app.add_flag("--energy", o.energy, "joules per token inside the decode windows (RAPL / NVML when readable)");
  app.add_option("--bandwidth-mib", bw_mib, "MiB per bandwidth-probe array (3 arrays); raised to at least "
                                           "max(256, 8 x last-level cache) so the probe reads DRAM")
      ->check(kPositive);
  app.add_option("--batch", o.batches, "also decode B sequences together for each B (e.g. 1,4,8): aggregate and "
                 "per-sequence tok/s against the batch byte model")->delimiter(',')->check(kPositive);
  app.add_option("--tile-fill", o.tile_from, "decode speed at depths too long to prefill: prefill at most N tokens "
                 "(a multiple of --page-tokens), then repeat their KV pages up to each depth; the decode reads the "
                 "bytes of a real cache of that depth, but the context is meaningless (no fidelity from it)")
      ->check(kPositive);
  int64_t ctx_max = 0;
  add_ctx_max_flag(app, &ctx_max);
  app.add_option("--out", out_dir, "write results.json, report.md and bench.svg here");
  bool json = false, quiet = false;
  app.add_flag("--json", json, "print exactly one JSON object on stdout");
  app.add_flag("-q,--quiet", quiet, "no progress lines on stderr");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto dev = resolve_device(device);
  if (!dev.ok()) return fail(dev.status());
  o.device = dev.value();
  const bool synthetic_flags = ov.layers > 0 || ov.experts > 0 || ov.vocab > 0 || ov.hidden > 0 || memory;
  if (synthetic_flags && synthetic.empty()) {
    std::fprintf(stderr, "weft bench: --layers/--experts/--vocab/--hidden/--in-memory need --synthetic\n");
    return 2;
  }
  const bool builtin = model_dir.empty() && synthetic.empty();
  if (ctx.empty()) ctx = builtin ? "512,1024,2048" : "4096,16384,32768";
  o.repeats = repeats > 0 ? repeats : lab::kMinRepeatsForClaim;
  o.gen = gen > 0 ? gen : 16;
  o.bandwidth_bytes = size_t(bw_mib) << 20;
  o.progress = !quiet;
  auto depths = parse_depths(ctx);
  if (!depths.ok()) { std::fprintf(stderr, "weft bench: %s\n", depths.status().message().c_str()); return 2; }
  o.depths = depths.value();
  o.arms.clear();
  {
    std::stringstream ss(arms);
    std::string item;
    while (std::getline(ss, item, ',')) {
      auto t = parse_kv_type(item);
      if (!t.ok()) { std::fprintf(stderr, "weft bench: --arms: %s\n", t.status().message().c_str()); return 2; }
      o.arms.push_back(t.value());
    }
  }

  std::string label;
  std::unique_ptr<ModelFiles> in_memory;
  if (!synthetic.empty()) {
    auto spec = synthetic_spec(synthetic, ov, &label);
    if (!spec.ok()) return fail(spec.status());
    if (memory || o.device == Device::kCuda) {
      // No disk: the full 35B-A3B geometry (70 GB bf16) fits the GPU, not the GPU machine's disk.
      // With --device cuda the matrices are generated in GPU memory (no host copy, no upload);
      // WEFT_SYNTH_ON_HOST=1 generates them in host memory and uploads them instead (the same
      // bytes: the "before" of the measurement in docs/results.md §10).
      const char* env = std::getenv("WEFT_SYNTH_ON_HOST");
      const bool on_host = env && std::string(env) == "1";
      auto weights = make_weight_memory({on_host ? Device::kCpu : o.device, o.threads});
      if (!weights.ok()) return fail(weights.status());
      if (!quiet)
        std::fprintf(stderr, "weft: generating the synthetic model (%s) in %s\n", label.c_str(),
                     weights.value()->name());
      const auto t0 = std::chrono::steady_clock::now();
      auto files = synth_in_memory(spec.value(), *weights.value());
      if (!files.ok()) return fail(files.status());
      if (!quiet)
        std::fprintf(stderr, "weft: generated in %.1f s\n",
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      in_memory = std::move(files.value());
      label += " (in memory)";
    } else {
      auto d = synthetic_dir(spec.value(), label);
      if (!d.ok()) return fail(d.status());
      model_dir = d.value();
    }
  } else {
    if (model_dir.empty()) {
      auto d = default_model_dir();
      if (!d.ok()) return fail(d.status());
      model_dir = d.value();
    }
    label = fs::path(model_dir).lexically_normal().filename().string();
    if (label.empty()) label = model_dir;
  }
  auto model = in_memory ? Model::load(std::move(in_memory)) : Model::load(model_dir);
  if (!model.ok()) return fail(model.status());
  if (Status s = check_bench_context(model.value()->config(), o.depths, o.gen, o.ceiling_only ? std::vector<DType>{DType::kF16} : o.arms, ctx_max); !s.ok()) return fail(s);
  auto result = lab::run_bench(*model.value(), label, o);
  if (!result.ok()) return fail(result.status());
  const lab::BenchResult& r = result.value();
  const nlohmann::json j = lab::bench_json(r);
  const std::string md = lab::bench_markdown(r);
  if (!out_dir.empty()) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    for (auto [name, text] : {std::pair<const char*, std::string>{"results.json", json_text(j, 2) + "\n"},
                              {"report.md", "# weft bench\n\n" + md},
                              {"bench.svg", lab::bench_svg(r)}}) {
      Status st = write_file(out_dir + "/" + name, text);
      if (!st.ok()) return fail(st);
    }
  }
  if (json) std::printf("%s\n", json_text(j).c_str());
  else std::printf("%s", md.c_str());
  return 0;
}

const CommandRegistrar kRegister("bench", "paired decode curve vs context depth per KV type, with the KV-share ceiling",
                                 run_bench_cmd);

}  // namespace
}  // namespace weft::cli
