// `weft quantize`: a GGUF model rewritten with its weight matrices in another type.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "cli/command.h"
#include "cli/common.h"
#include "model/gguf_convert.h"

namespace weft::cli {
namespace {

int run_quantize(int argc, char** argv) {
  CLI::App app("Rewrites a GGUF model with its weight matrices in another type (from their\n"
               "dequantized values); metadata, norms and small tensors are copied unchanged.",
               "weft quantize");
  std::string in, out, type;
  app.add_option("in", in, "input .gguf")->required();
  app.add_option("out", out, "output .gguf")->required();
  app.add_option("--type", type, "f32, f16, bf16, q8_0, q4_0, q6_k, q4_k_m, q5_k_m")->required();
  int threads = 0;
  app.add_option("--threads", threads, "quantizer threads (0 = all cores; the file is the same for any count)")
      ->check(kNonNegative);
  bool quiet = false;
  app.add_flag("-q,--quiet", quiet, "no progress lines on stderr");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto scheme = parse_weight_scheme(type);
  if (!scheme.ok()) return fail(scheme.status());
  if (Status s = quantize_gguf(in, out, scheme.value(), quiet ? ConvertProgress{} : convert_progress("quantize"), threads); !s.ok()) return fail(s);
  std::printf("wrote %s (%s)\n", out.c_str(), weight_scheme_name(scheme.value()));
  return 0;
}

const CommandRegistrar kQuantize("quantize", "rewrite a GGUF model's weights in another type", run_quantize);

}  // namespace
}  // namespace weft::cli
