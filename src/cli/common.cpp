#include "cli/common.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>

#include "core/mapped_file.h"
#include "model/footprint.h"
#include "model/synth.h"

namespace weft::cli {

namespace fs = std::filesystem;

namespace {

// Where the shipped trained model lives: the source tree's models/weft-tiny-hybrid, or
// $WEFT_SHIPPED_MODEL (tests point it at a missing directory to exercise the fallback).
std::string shipped_model_dir() {
  if (const char* env = std::getenv("WEFT_SHIPPED_MODEL"); env && *env) return env;
#ifdef WEFT_SOURCE_DIR_DEFAULT
  return std::string(WEFT_SOURCE_DIR_DEFAULT) + "/models/weft-tiny-hybrid";
#else
  return "";
#endif
}

// Said once per process, however many times the default is resolved: the fallback model has
// random weights, so its text is noise, and nothing else on screen would tell the user so.
void warn_random_weights(const std::string& dir, const std::string& shipped) {
  static bool warned = false;
  if (warned) return;
  warned = true;
  std::fprintf(stderr,
               "weft: note: the shipped model %s is missing, so this run uses a RANDOM-WEIGHT synthetic model (%s);\n"
               "weft: note: its output is noise. For real output pass -m DIR with a Hugging Face checkpoint, or restore\n"
               "weft: note: models/weft-tiny-hybrid (git checkout -- models/weft-tiny-hybrid, or train it with tools/train).\n",
               shipped.empty() ? "models/weft-tiny-hybrid" : shipped.c_str(), dir.c_str());
}

}  // namespace

Result<std::string> default_model_dir() {
  if (const char* env = std::getenv("WEFT_DEFAULT_MODEL"); env && *env) return std::string(env);
  const std::string shipped = shipped_model_dir();
  if (!shipped.empty() && fs::exists(shipped + "/config.json")) {
    std::fprintf(stderr, "weft: no -m given; using the built-in model %s\n", shipped.c_str());
    return shipped;
  }
  std::string cache;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) cache = xdg;
  else if (const char* home = std::getenv("HOME"); home && *home) cache = std::string(home) + "/.cache";
  else cache = "/tmp";
  const std::string dir = cache + "/weft/synth-tiny";
  warn_random_weights(dir, shipped);
  if (!fs::exists(dir + "/config.json")) {
    std::fprintf(stderr, "weft: writing the random-weight synthetic model to %s\n", dir.c_str());
    auto spec = synth_preset("tiny");
    if (!spec.ok()) return spec.status();
    std::error_code ec;
    fs::create_directories(cache + "/weft", ec);
    SynthWriteOptions opts;
    opts.force = true;
    WEFT_RETURN_IF_ERROR(synth_write(spec.value(), dir, opts));
  }
  return dir;
}

Result<std::unique_ptr<Model>> open_model(std::string* dir) {
  if (dir->empty()) {
    auto d = default_model_dir();
    if (!d.ok()) return d.status();
    *dir = d.value();
  }
  return Model::load(*dir);
}

Status check_kv_types(const ModelConfig& c, const KvOptions& kv) {
  for (DType t : {kv.k_type, kv.v_type})
    if (!kv_type_supported(t, c.head_dim))
      return Status::error(std::string("KV type ") + dtype_name(t) + " stores blocks of 32 values along head_dim; this model's head_dim is " +
                           std::to_string(c.head_dim) + " (use f16 or f32)");
  return Status();
}

uint64_t mem_available_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
  std::fclose(f);
  return uint64_t(kib) * 1024;
}

namespace {

// Bytes of the KV caches for `tokens` tokens: the cache grows in whole pages. Saturates at
// UINT64_MAX rather than wrap for absurd token counts.
uint64_t kv_cache_bytes(const ModelConfig& c, int64_t tokens, const std::vector<KvOptions>& caches) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  uint64_t bytes = 0;
  for (const KvOptions& kv : caches) {
    const uint64_t page = uint64_t(kv.page_tokens > 0 ? kv.page_tokens : 1);
    const uint64_t rows = (uint64_t(std::max<int64_t>(tokens, 0)) + page - 1) / page * page;
    const uint64_t per_token = kv_bytes_per_token(c, kv.k_type, kv.v_type);
    if (per_token != 0 && rows > (kMax - bytes) / per_token) return kMax;
    bytes += rows * per_token;
  }
  return bytes;
}

std::string bytes_text(uint64_t b) { return std::to_string(b) + " bytes (" + human_bytes(double(b)) + ")"; }

}  // namespace

Status check_context(const ModelConfig& c, int64_t tokens, const std::vector<KvOptions>& caches, int64_t ctx_max) {
  const int64_t limit = ctx_max > 0 ? ctx_max : c.max_position_embeddings;
  if (limit > 0 && tokens > limit) {
    if (ctx_max > 0)
      return Status::error("context of " + std::to_string(tokens) + " tokens exceeds --ctx-max " + std::to_string(ctx_max));
    return Status::error("context of " + std::to_string(tokens) + " tokens exceeds the model's max_position_embeddings (" +
                         std::to_string(limit) + "); pass --ctx-max " + std::to_string(tokens) +
                         " to run past it anyway (positions beyond it were never trained)");
  }
  const uint64_t available = mem_available_bytes();
  const uint64_t need = kv_cache_bytes(c, tokens, caches);
  if (available == 0 || need <= available) return Status();
  std::string msg = "the KV cache for " + std::to_string(tokens) + " tokens needs " + bytes_text(need) +
                    " but only " + bytes_text(available) + " of memory is available (MemAvailable)";
  if (kv_type_supported(DType::kQ8_0, c.head_dim)) {
    std::vector<KvOptions> q8 = caches;
    for (KvOptions& kv : q8) kv.k_type = kv.v_type = DType::kQ8_0;
    const uint64_t q8_need = kv_cache_bytes(c, tokens, q8);
    if (q8_need < need) msg += "; with --kv q8_0 it would need " + bytes_text(q8_need);
  }
  return Status::error(msg + "; use a shorter context or a smaller KV type");
}

Status check_bench_context(const ModelConfig& c, const std::vector<int64_t>& depths, int64_t gen,
                           const std::vector<DType>& arms, int64_t ctx_max) {
  int64_t deepest = 0;
  for (int64_t d : depths) deepest = std::max(deepest, d);
  std::vector<KvOptions> caches;
  for (DType t : arms) {
    KvOptions kv;
    kv.k_type = kv.v_type = t;
    caches.push_back(kv);
  }
  if (!arms.empty() && arms[0] != DType::kF16) caches.push_back(KvOptions());  // the f16 prefill session
  return check_context(c, deepest + gen, caches, ctx_max);
}

void add_ctx_max_flag(CLI::App& app, int64_t* ctx_max) {
  app.add_option("--ctx-max", *ctx_max,
                 "longest context allowed; default: the model's max_position_embeddings (config.json)")
      ->check(kPositive);
}

Result<std::vector<int32_t>> parse_ids(const std::string& text, const std::string& source) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    char ch = text[i];
    if (ch == ',' || ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r') { ++i; continue; }
    size_t j = i;
    if (text[j] == '-' || text[j] == '+') ++j;
    size_t digits = j;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    bool ok = j > digits && (j == text.size() || text[j] == ',' || text[j] == ' ' || text[j] == '\n' ||
                             text[j] == '\t' || text[j] == '\r');
    if (!ok || j - digits > 10) {
      size_t end = text.find_first_of(" ,\n\t\r", i);
      std::string shown;  // binary junk is shown escaped: a NUL would cut the message short
      for (char b : text.substr(i, std::min<size_t>(end - i, 32))) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02x", unsigned(uint8_t(b)));
        shown += (b >= 0x20 && b < 0x7f) ? std::string(1, b) : std::string(hex);
      }
      return Status::error(source + ": '" + shown +
                           "' is not a token id (ids are integers separated by whitespace or commas)");
    }
    long long v = std::stoll(text.substr(i, j - i));
    if (v < 0 || v > 0x7fffffff) return Status::error(source + ": token id " + std::to_string(v) + " is out of range");
    ids.push_back(int32_t(v));
    i = j;
  }
  return ids;
}

Result<std::vector<int32_t>> read_ids_file(const std::string& path) {
  auto text = read_text_file(path);
  if (!text.ok()) return text.status();
  auto ids = parse_ids(text.value(), path);
  if (!ids.ok()) return ids.status();
  if (ids->empty()) return Status::error(path + ": no token ids");
  return ids;
}

Result<DType> parse_kv_type(const std::string& name) {
  if (name == "f16") return DType::kF16;
  if (name == "f32") return DType::kF32;
  if (name == "q8_0") return DType::kQ8_0;
  if (name == "q4_0") return DType::kQ4_0;
  return Status::error("unknown KV cache type '" + name + "' (use f16, q8_0, q4_0 or f32)");
}

void KvFlags::add(CLI::App& app) {
  app.add_option("--kv", kv, "KV cache type for K and V: f16 (strict default), q8_0, q4_0, f32");
  app.add_option("--kv-k,--ctk", kv_k, "KV cache type for K only (alias -ctk)");
  app.add_option("--kv-v,--ctv", kv_v, "KV cache type for V only (alias -ctv)");
  app.add_flag("--kv-rotate", rotate,
               "Hadamard-rotate the heads stored in a quantized (q8_0/q4_0) K or V cache; off by default, "
               "never applied to f16/f32. Measured on weft-tiny-hybrid (wikitext-2, 4K tokens): pays for q4_0 "
               "(KL mean and p99 -42%, top-1 vs f16 99.10% -> 99.37%); for q8_0 KL -40% but q8_0 is already "
               "indistinguishable from f16 (top-1 unchanged), so it buys nothing visible there "
               "(docs/results.md, \"Hadamard rotation\")");
}

Result<KvOptions> KvFlags::resolve() const {
  KvOptions o;
  if (!kv.empty()) {
    auto t = parse_kv_type(kv);
    if (!t.ok()) return t.status();
    o.k_type = o.v_type = t.value();
  }
  if (!kv_k.empty()) {
    auto t = parse_kv_type(kv_k);
    if (!t.ok()) return t.status();
    o.k_type = t.value();
  }
  if (!kv_v.empty()) {
    auto t = parse_kv_type(kv_v);
    if (!t.ok()) return t.status();
    o.v_type = t.value();
  }
  o.rotate = rotate;
  if (rotate && !o.rotates_k() && !o.rotates_v())
    return Status::error("--kv-rotate applies only to a quantized KV cache (q8_0 or q4_0), e.g. --kv q4_0 --kv-rotate; "
                         "the f16/f32 caches are never rotated");
  return o;
}

namespace {

// Whether all of s is a number (strtod's syntax), and its value; a value that is not a number is
// left to the option's own conversion, which names it.
struct Number {
  bool parsed = false;
  double value = 0;
};
Number number_of(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  return {!s.empty() && end == s.c_str() + s.size(), v};
}

// "" when s is acceptable; NaN and infinities never are.
std::string check_number(const std::string& s, bool allow_zero) {
  const Number n = number_of(s);
  if (!n.parsed) return "";
  if (!std::isfinite(n.value)) return s + " is not a finite number";
  if (allow_zero && n.value < 0) return s + " is negative; it must be 0 or more";
  if (!allow_zero && !(n.value > 0)) return s + " is not positive; it must be more than 0";
  return "";
}

}  // namespace

const CLI::Validator kNonNegative([](std::string& s) { return check_number(s, true); }, "NUMBER >= 0",
                                  "NonNegative");
const CLI::Validator kPositive([](std::string& s) { return check_number(s, false); }, "NUMBER > 0", "Positive");

int parse_or_exit(CLI::App& app, int argc, char** argv) {
  // llama.cpp spells the per-tensor KV flags -ctk / -ctv; CLI11 takes only one-letter short
  // names, so they are rewritten to their long forms first. CLI11 wants the list reversed.
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) {
    std::string a = argv[i];
    if (a == "-ctk" || a == "-ctv") a = "-" + a;
    args.push_back(a);
  }
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "weft %s: %s\n(see weft %s --help)\n", app.get_name().c_str(), e.what(), app.get_name().c_str());
    return 2;
  }
  return -1;
}

int fail(const Status& status) {
  std::fprintf(stderr, "weft: %s\n", status.message().c_str());
  return 1;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) { b /= 1024; ++u; }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

void add_device_flag(CLI::App& app, std::string* device) {
  app.add_option("--device", *device, "where the forward pass runs: cpu or cuda")->default_val("cpu");
}

Result<Device> resolve_device(const std::string& name) {
  auto d = parse_device(name);
  if (!d.ok()) return d.status();
  WEFT_RETURN_IF_ERROR(check_device(d.value()));
  return d.value();
}

void RunFlags::add(CLI::App& app) {
  kv.add(app);
  add_device_flag(app, &device_name);
  add_ctx_max_flag(app, &ctx_max);
}

int RunFlags::parse(CLI::App& app, int argc, char** argv) {
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto d = resolve_device(device_name);
  if (!d.ok()) return fail(d.status());
  device = d.value();
  auto k = kv.resolve();
  if (!k.ok()) return fail(k.status());
  kv_options = k.value();
  return -1;
}

Status RunFlags::check_model(const ModelConfig& config, int64_t tokens, size_t caches) const {
  WEFT_RETURN_IF_ERROR(check_kv_types(config, kv_options));
  return check_context(config, tokens, std::vector<KvOptions>(caches, kv_options), ctx_max);
}

ConvertProgress convert_progress(const char* command, ProgressUnit unit) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last = std::make_shared<Clock::time_point>(start);
  auto printed = std::make_shared<bool>(false);
  return [command = std::string(command), unit, start, last, printed](const std::string& tensor, int64_t done,
                                                                      int64_t total) {
    const auto now = Clock::now();
    // A line every 2 s; the last one (done == total) too once a run has shown any.
    const bool final_line = *printed && total > 0 && done == total;
    if (now - *last < std::chrono::seconds(2) && !final_line) return;
    *last = now;
    *printed = true;
    const double secs = std::chrono::duration<double>(now - start).count();
    if (unit == ProgressUnit::kBytes && total > 0)
      std::fprintf(stderr, "weft %s: %3.0f%% of %.2f GiB converted, %s, %.0f s\n", command.c_str(), 100.0 * double(done) / double(total),
                   double(total) / double(1 << 30), tensor.c_str(), secs);
    else if (total > 0)
      std::fprintf(stderr, "weft %s: %lld of %lld tensors, %s, %.0f s\n", command.c_str(), (long long)done,
                   (long long)total, tensor.c_str(), secs);
    else
      std::fprintf(stderr, "weft %s: %lld tensors, %s, %.0f s\n", command.c_str(), (long long)done, tensor.c_str(),
                   secs);
  };
}

}  // namespace weft::cli
