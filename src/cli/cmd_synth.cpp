// `weft synth`: writes a random-weight Hugging Face model directory of a named real geometry.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/command.h"
#include "cli/common.h"
#include "model/gguf_convert.h"
#include "model/synth.h"

namespace weft::cli {
namespace {

int run_synth(int argc, char** argv) {
  std::string preset_list;
  for (const auto& name : synth_preset_names()) {
    preset_list += "  " + name + std::string(name.size() < 20 ? 20 - name.size() : 1, ' ') +
                   synth_preset_summary(name) + "\n";
  }
  CLI::App app("Writes a random-weight model of a real geometry as a Hugging Face directory\n"
               "(config.json + safetensors). Weights are scaled like a trained model's, so\n"
               "activations and logits have realistic magnitudes. Same flags => same bytes.",
               "weft synth");
  app.footer("presets:\n" + preset_list +
             "\n--layers/--experts/--vocab/--hidden shrink a preset (e.g. to fit a test); "
             "--experts below top-k lowers top-k.");
  std::string preset = "tiny", out_dir, dtype_name = "bf16";
  SynthOverrides ov;
  uint64_t seed = 0;
  bool force = false, quiet = false;
  int threads = 0;
  app.add_option("--preset", preset, "geometry to write (see presets below)")->capture_default_str();
  app.add_option("-o,--out", out_dir, "output model directory")->required();
  app.add_option("--layers", ov.layers, "override num_hidden_layers");
  app.add_option("--experts", ov.experts, "override num_experts (MoE presets)");
  app.add_option("--vocab", ov.vocab, "override vocab_size");
  app.add_option("--hidden", ov.hidden, "override hidden_size");
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  app.add_option("--dtype", dtype_name, "weight dtype")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}))
      ->capture_default_str();
  app.add_option("--threads", threads, "generator and quantizer threads (0 = all cores; output is identical)")
      ->check(kNonNegative);
  std::string format = "hf", weight_type = "keep";
  app.add_option("--format", format, "hf (a model directory) or gguf (one .gguf file at --out)")
      ->check(CLI::IsMember({"hf", "gguf"}))
      ->capture_default_str();
  app.add_option("--type", weight_type, "--format gguf: weight type (keep, f16, bf16, q8_0, q4_0, q6_k, q4_k_m, q5_k_m)")
      ->capture_default_str();
  app.add_flag("--force", force, "replace a non-empty output directory");
  app.add_flag("-q,--quiet", quiet, "no progress lines on stderr");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  Result<SynthSpec> spec = synth_preset(preset);
  if (!spec.ok()) {
    std::fprintf(stderr, "weft synth: %s\n", spec.status().message().c_str());
    return 2;
  }
  spec->seed = seed;
  spec->dtype = dtype_name == "f32" ? DType::kF32 : dtype_name == "f16" ? DType::kF16 : DType::kBF16;
  if (Status st = synth_apply_overrides(&*spec, ov); !st.ok()) {
    std::fprintf(stderr, "weft synth: %s\n", st.message().c_str());
    return 2;
  }

  if (format == "gguf") {
    // Written as a Hugging Face directory beside the output first, then converted.
    auto scheme = parse_weight_scheme(weight_type);
    if (!scheme.ok()) {
      std::fprintf(stderr, "weft synth: %s\n", scheme.status().message().c_str());
      return 2;
    }
    const std::string tmp = out_dir + ".hf.tmp";
    std::error_code ec2;
    std::filesystem::remove_all(tmp, ec2);
    SynthWriteOptions opt;
    opt.threads = threads;
    Status st = synth_write(*spec, tmp, opt);
    if (st.ok()) st = convert_hf_to_gguf(tmp, out_dir, scheme.value(), quiet ? ConvertProgress{} : convert_progress("synth", ProgressUnit::kBytes), threads);
    std::filesystem::remove_all(tmp, ec2);
    if (!st.ok()) {
      std::fprintf(stderr, "weft synth: %s\n", st.message().c_str());
      return 1;
    }
    std::printf("wrote %s: %s (%s), %lld layers, %s weights\n", out_dir.c_str(), preset.c_str(),
                spec->model_type.c_str(), (long long)spec->num_hidden_layers, weight_scheme_name(scheme.value()));
    return 0;
  }

  // synth_write refuses this too; checking first keeps the refusal from following a progress header.
  std::error_code ec;
  if (!force && std::filesystem::is_directory(out_dir, ec) && !std::filesystem::is_empty(out_dir, ec)) {
    std::fprintf(stderr, "weft synth: %s is not empty (use --force to replace it)\n", out_dir.c_str());
    return 1;
  }
  const int64_t bytes = synth_estimated_bytes(*spec);
  SynthWriteOptions opt;
  opt.force = force;
  opt.threads = threads;
  // Small models write in a blink; a line per shard only helps when there is a wait.
  opt.progress = !quiet && bytes > (int64_t(256) << 20);
  if (opt.progress) {
    std::fprintf(stderr, "synth: %s -> %s, %.2f GB of %s weights\n", preset.c_str(),
                 out_dir.c_str(), double(bytes) / 1e9, dtype_name.c_str());
  }
  if (Status st = synth_write(*spec, out_dir, opt); !st.ok()) {
    std::fprintf(stderr, "weft synth: %s\n", st.message().c_str());
    return 1;
  }
  std::printf("wrote %s: %s (%s), %lld layers (%lld full attention), %.3f GB\n", out_dir.c_str(),
              preset.c_str(), spec->model_type.c_str(), (long long)spec->num_hidden_layers,
              (long long)spec->num_full_attention_layers(), double(bytes) / 1e9);
  return 0;
}

const CommandRegistrar kRegistrar("synth", "write a random-weight model of a real geometry",
                                  run_synth);

}  // namespace
}  // namespace weft::cli
