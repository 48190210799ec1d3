// Energy counters for the bench's decode windows: NVML (GPU, when a GPU does the work) or RAPL
// (CPU package, /sys/class/powercap). When neither can be read, the meter says why; it never
// invents a number.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace weft::lab {

class EnergyMeter {
 public:
  // gpu_used: whether the measured work runs on a GPU. NVML is only meaningful then; a CPU run
  // uses RAPL. The meter is unavailable (with reason()) when the counter cannot be read.
  explicit EnergyMeter(bool gpu_used);
  ~EnergyMeter();
  EnergyMeter(const EnergyMeter&) = delete;
  EnergyMeter& operator=(const EnergyMeter&) = delete;

  bool available() const { return available_; }
  const std::string& source() const { return source_; }  // "rapl" / "nvml"
  const std::string& reason() const { return reason_; }  // why unavailable

  // Marks the start of a window; end() returns the joules consumed since (NaN if unavailable).
  // RAPL counters wrap at max_energy_range_uj; one wrap per window is corrected (a window of a
  // decode run is seconds, the wrap period minutes).
  void begin();
  double end();

 private:
  bool read_all(std::vector<uint64_t>* out) const;

  bool available_ = false;
  std::string source_, reason_;
  // RAPL: one energy_uj file per package zone, with its wrap range.
  std::vector<std::string> files_;
  std::vector<uint64_t> ranges_, start_;
  // NVML (dlopen'ed at run time so weft never links against the driver).
  void* nvml_lib_ = nullptr;
  void* nvml_device_ = nullptr;
  void* nvml_energy_fn_ = nullptr;
};

}  // namespace weft::lab
