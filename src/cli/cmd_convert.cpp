// `weft convert`: a Hugging Face checkpoint directory -> a GGUF file llama.cpp loads.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "cli/command.h"
#include "cli/common.h"
#include "io/gguf.h"
#include "model/gguf_convert.h"

namespace weft::cli {
namespace {

int run_convert(int argc, char** argv) {
  CLI::App app("Converts a Hugging Face model directory into a GGUF file: llama.cpp's tensor names,\n"
               "layouts and metadata (hyper-parameters, tokenizer, chat template), with the weight\n"
               "matrices in the chosen type. q4_k_m / q5_k_m are llama.cpp's per-tensor mixes.",
               "weft convert");
  std::string dir, out, type = "keep";
  app.add_option("model_dir", dir, "Hugging Face model directory")->required();
  app.add_option("-o,--out", out, "output .gguf file")->required();
  app.add_option("--type", type, "weight type: keep (the checkpoint's), f32, f16, bf16, q8_0, q4_0, q6_k, q4_k_m, q5_k_m")
      ->capture_default_str();
  int threads = 0;
  app.add_option("--threads", threads, "quantizer threads (0 = all cores; the file is the same for any count)")
      ->check(kNonNegative);
  bool quiet = false;
  app.add_flag("-q,--quiet", quiet, "no progress lines on stderr");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto scheme = parse_weight_scheme(type);
  if (!scheme.ok()) return fail(scheme.status());
  if (Status s = convert_hf_to_gguf(dir, out, scheme.value(), quiet ? ConvertProgress{} : convert_progress("convert", ProgressUnit::kBytes), threads); !s.ok()) return fail(s);
  auto f = GgufFile::open(out);
  if (!f.ok()) return fail(f.status());
  std::printf("wrote %s: %zu tensors, %s weights\n", out.c_str(), f->tensors().size(), weight_scheme_name(scheme.value()));
  return 0;
}

const CommandRegistrar kConvert("convert", "convert a Hugging Face model directory to GGUF", run_convert);

}  // namespace
}  // namespace weft::cli
