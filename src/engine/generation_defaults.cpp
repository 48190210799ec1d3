#include "engine/generation_defaults.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace weft {

std::string GenerationDefaults::describe() const {
  char buf[256];
  const SamplerOptions& s = sampling;
  if (s.temperature <= 0.0f)
    std::snprintf(buf, sizeof buf, "sampling: greedy (%s)", source.c_str());
  else
    std::snprintf(buf, sizeof buf, "sampling: temperature %g, top_k %d, top_p %g, min_p %g (%s)", double(s.temperature),
                  s.top_k, double(s.top_p), double(s.min_p), source.c_str());
  return buf;
}

std::string GenerationDefaults::describe_effective(const SamplerOptions& effective, bool flags_given) const {
  GenerationDefaults e = *this;
  e.sampling = effective;
  if (flags_given) e.source = "flags over " + source;
  return e.describe();
}

namespace {

Status read_number(const nlohmann::json& j, const char* key, double lo, double hi, double* out) {
  if (!j.contains(key) || j[key].is_null()) return Status();
  if (!j[key].is_number()) return Status::error(std::string("'") + key + "' must be a number");
  const double v = j[key].get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    return Status::error(std::string("'") + key + "' = " + std::to_string(v) + " is out of range");
  *out = v;
  return Status();
}

}  // namespace

Result<GenerationDefaults> parse_generation_defaults(const std::string& json_text, const std::string& source) {
  GenerationDefaults d;
  d.source = source;
  auto j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::error(source + ": not a JSON object");
  bool do_sample = false;
  if (j.contains("do_sample") && !j["do_sample"].is_null()) {
    if (!j["do_sample"].is_boolean()) return Status::error(source + ": 'do_sample' must be true or false");
    do_sample = j["do_sample"].get<bool>();
  }
  // transformers' GenerationConfig defaults.
  double temperature = 1.0, top_k = 50, top_p = 1.0, min_p = 0.0;
  Status s = read_number(j, "temperature", 0.0, 100.0, &temperature);
  if (s.ok()) s = read_number(j, "top_k", 0.0, 1e9, &top_k);
  if (s.ok()) s = read_number(j, "top_p", 0.0, 1.0, &top_p);
  if (s.ok()) s = read_number(j, "min_p", 0.0, 1.0, &min_p);
  if (!s.ok()) return s.with_context(source);
  if (!do_sample) {
    d.source += ", do_sample is not true: greedy";
    return d;
  }
  d.sampling.temperature = float(temperature);
  d.sampling.top_k = int(top_k);
  d.sampling.top_p = float(top_p);
  d.sampling.min_p = float(min_p);
  return d;
}

Result<GenerationDefaults> load_generation_defaults(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(model_path, ec)) {
    GenerationDefaults d;
    d.source = "no generation_config.json beside a single-file model: greedy";
    return d;
  }
  const std::string path = model_path + "/generation_config.json";
  if (!fs::exists(path, ec)) {
    GenerationDefaults d;
    d.source = "no generation_config.json: greedy";
    return d;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_generation_defaults(ss.str(), path);
}

}  // namespace weft
