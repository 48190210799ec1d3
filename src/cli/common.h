// Helpers shared by the subcommands: model resolution (with the built-in default), id files,
// KV-type flags, and error reporting.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "model/model.h"
#include "model/state.h"

namespace weft::cli {

// The model a command runs when -m is not given: the shipped trained model
// (models/weft-tiny-hybrid) when present, else a small synthetic hybrid written once to
// $XDG_CACHE_HOME/weft (or ~/.cache/weft). Prints which one it chose on stderr.
Result<std::string> default_model_dir();

// Loads the model at *dir; an empty *dir means the built-in default, and is set to the path
// chosen.
Result<std::unique_ptr<Model>> open_model(std::string* dir);

// An error naming the problem unless both KV types suit the model's head_dim.
Status check_kv_types(const ModelConfig& config, const KvOptions& kv);

// Parses token ids separated by whitespace and/or commas. Errors name the offending text.
Result<std::vector<int32_t>> read_ids_file(const std::string& path);
Result<std::vector<int32_t>> parse_ids(const std::string& text, const std::string& source);

// "f16", "q8_0", "q4_0", "f32" -> DType. Error lists the accepted names.
Result<DType> parse_kv_type(const std::string& name);

// Adds --kv / --kv-k / --kv-v (aliases -ctk / -ctv) and --kv-rotate to a command and resolves
// them. --kv-rotate without a quantized K or V type is an error rather than a silent no-op.
struct KvFlags {
  std::string kv, kv_k, kv_v;
  bool rotate = false;
  void add(CLI::App& app);
  Result<KvOptions> resolve() const;
};

// Runs CLI11 parsing; returns -1 to continue, or the exit code (0 for --help, 2 for bad usage).
int parse_or_exit(CLI::App& app, int argc, char** argv);

int fail(const Status& status);  // prints "weft: <message>" and returns 1

std::string human_bytes(double bytes);

}  // namespace weft::cli
