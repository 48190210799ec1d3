// Energy counters for the bench's decode windows: NVML (GPU, when a GPU does the work) or RAPL
// (CPU package, /sys/class/powercap). When neither can be read, the meter says why; it never
// invents a number.
#pragma once

#include <cmath>
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

  // How often the counter's value changes, measured once (at construction) by polling it for up
  // to 0.3 s: NVML's energy counter moves in steps of tens of milliseconds on some GPUs, so a
  // decode window of a few such steps cannot resolve its energy (a window's count is off by up to
  // one step at each end). NaN when unavailable, +inf when it did not move within the poll.
  double tick_seconds() const { return tick_s_; }
  // Whether a window of `seconds` resolves its energy to about 10% (>= 20 ticks: one tick of
  // quantization at each end).
  bool resolves(double seconds) const { return std::isfinite(tick_s_) && seconds >= kTicksPerWindow * tick_s_; }
  static constexpr double kTicksPerWindow = 20;

 private:
  bool read_all(std::vector<uint64_t>* out) const;
  void measure_tick();

  bool available_ = false;
  std::string source_, reason_;
  double tick_s_ = std::nan("");
  // RAPL: one energy_uj file per package zone, with its wrap range.
  std::vector<std::string> files_;
  std::vector<uint64_t> ranges_, start_;
  // NVML (dlopen'ed at run time so weft never links against the driver).
  void* nvml_lib_ = nullptr;
  void* nvml_device_ = nullptr;
  void* nvml_energy_fn_ = nullptr;
};

}  // namespace weft::lab
