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
#include "backend/backend_factory.h"
#include "model/gguf_convert.h"
#include "model/state.h"

namespace weft::cli {

// The model a command runs when -m is not given: the shipped trained model
// (models/weft-tiny-hybrid) when present, else a small synthetic hybrid written once to
// $XDG_CACHE_HOME/weft (or ~/.cache/weft). Prints which one it chose on stderr; the synthetic
// fallback has random weights, which it says (once per process) with how to get real output.
// $WEFT_DEFAULT_MODEL overrides the choice; $WEFT_SHIPPED_MODEL moves the shipped model's path.
Result<std::string> default_model_dir();

// Loads the model at *dir; an empty *dir means the built-in default, and is set to the path
// chosen.
Result<std::unique_ptr<Model>> open_model(std::string* dir);

// An error naming the problem unless both KV types suit the model's head_dim.
Status check_kv_types(const ModelConfig& config, const KvOptions& kv);

// Context limits, checked before any KV row is allocated. `tokens` is the longest sequence a
// command will hold; `caches` lists the KV caches it holds at once (bench: one per arm). Errors:
//   * tokens > the model's max_position_embeddings (config.json), unless ctx_max > 0 (--ctx-max)
//     sets the limit instead: positions past it were never trained and RoPE extrapolates;
//   * the caches would not fit in MemAvailable (/proc/meminfo): the message gives the bytes
//     needed and what --kv q8_0 would need. Skipped where /proc/meminfo is unreadable.
// KV bytes come from the footprint byte model (kv_bytes_per_token), rounded up to whole pages.
Status check_context(const ModelConfig& config, int64_t tokens, const std::vector<KvOptions>& caches,
                     int64_t ctx_max = 0);

// check_context for `weft bench`: the deepest depth plus the decoded tokens, one cache per arm
// (they are all alive at once) plus the f16 prefill session when the first arm is not f16.
Status check_bench_context(const ModelConfig& config, const std::vector<int64_t>& depths, int64_t gen,
                           const std::vector<DType>& arms, int64_t ctx_max = 0);

// Adds --ctx-max N (raises, or lowers, the max_position_embeddings limit of check_context).
void add_ctx_max_flag(CLI::App& app, int64_t* ctx_max);

// MemAvailable from /proc/meminfo in bytes; 0 when unknown.
uint64_t mem_available_bytes();

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

// Checks for numeric flags. CLI11's NonNegativeNumber / PositiveNumber print their range up to
// DBL_MAX written out in full (a 300-digit number); these say what is wanted in words. A value
// that is not a number passes through to the option's own conversion, which names it.
extern const CLI::Validator kNonNegative;  // "--temp: -1 is negative; it must be 0 or more"
extern const CLI::Validator kPositive;     // "--repeats: 0 is not positive; it must be more than 0"

// Runs CLI11 parsing; returns -1 to continue, or the exit code (0 for --help, 2 for bad usage).
int parse_or_exit(CLI::App& app, int argc, char** argv);

int fail(const Status& status);

// Adds --device cpu|cuda; resolve_device parses it and checks the device can run here (a clear
// error when the build has no CUDA or no GPU is visible).
void add_device_flag(CLI::App& app, std::string* device);
Result<Device> resolve_device(const std::string& device);  // prints "weft: <message>" and returns 1

std::string human_bytes(double bytes);

// Progress lines on stderr for `convert` / `quantize` ("weft convert:  42% of 64.50 GiB converted,
// blk.12.ffn_down_exps.weight, 45 s"; "weft quantize: 120 of 733 tensors, ..."), at most one every
// 2 s, so short runs print none; a run that printed any also prints its last (done == total).
// What ConvertProgress's done / total count: source bytes (convert) or tensors (quantize).
enum class ProgressUnit { kTensors, kBytes };
ConvertProgress convert_progress(const char* command, ProgressUnit unit = ProgressUnit::kTensors);

// The flags of every command that runs a model on one KV configuration (chat, generate, logits,
// serve): --kv / --kv-k / --kv-v / --kv-rotate, --device and --ctx-max, added, parsed and checked
// in one place so the commands cannot drift apart in spelling, order of checks or messages.
struct RunFlags {
  KvFlags kv;
  std::string device_name;
  int64_t ctx_max = 0;
  // Set by parse().
  Device device = Device::kCpu;
  KvOptions kv_options;

  void add(CLI::App& app);
  // parse_or_exit, then the device (usable here?) and the KV types: -1 to continue, else the exit
  // code (0 for --help, 2 for bad usage, 1 for a device or KV error, with its message printed).
  int parse(CLI::App& app, int argc, char** argv);
  // check_kv_types and check_context for `caches` caches of kv_options holding `tokens` each.
  Status check_model(const ModelConfig& config, int64_t tokens, size_t caches = 1) const;
};

}  // namespace weft::cli
