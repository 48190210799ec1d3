// RAPL via sysfs and NVML via dlopen; both read cumulative counters, so a window is a difference.
#include "lab/energy.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

namespace weft::lab {
namespace {

bool read_u64(const std::string& path, uint64_t* v) {
  std::ifstream f(path);
  unsigned long long x = 0;
  if (!(f >> x)) return false;
  *v = x;
  return true;
}

using NvmlInit = int (*)();
using NvmlShutdown = int (*)();
using NvmlHandleByIndex = int (*)(unsigned, void**);
using NvmlTotalEnergy = int (*)(void*, unsigned long long*);  // millijoules since driver load

}  // namespace

EnergyMeter::EnergyMeter(bool gpu_used) {
  if (gpu_used) {
    source_ = "nvml";
    nvml_lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nvml_lib_) { reason_ = "libnvidia-ml.so.1 not loadable"; return; }
    auto init = reinterpret_cast<NvmlInit>(dlsym(nvml_lib_, "nvmlInit_v2"));
    auto by_index = reinterpret_cast<NvmlHandleByIndex>(dlsym(nvml_lib_, "nvmlDeviceGetHandleByIndex_v2"));
    nvml_energy_fn_ = dlsym(nvml_lib_, "nvmlDeviceGetTotalEnergyConsumption");
    if (!init || !by_index || !nvml_energy_fn_) { reason_ = "NVML symbols missing"; return; }
    if (init() != 0) { reason_ = "nvmlInit failed"; return; }
    if (by_index(0, &nvml_device_) != 0) { reason_ = "no NVML device 0"; return; }
    unsigned long long mj = 0;
    if (reinterpret_cast<NvmlTotalEnergy>(nvml_energy_fn_)(nvml_device_, &mj) != 0) {
      reason_ = "nvmlDeviceGetTotalEnergyConsumption not supported on this GPU";
      return;
    }
    available_ = true;
    measure_tick();
    return;
  }
  source_ = "rapl";
  namespace fs = std::filesystem;
  const fs::path root = "/sys/class/powercap";
  std::error_code ec;
  if (!fs::exists(root, ec)) { reason_ = "no /sys/class/powercap (RAPL not exposed; NVML not applicable to a CPU run)"; return; }
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    // Package zones only ("intel-rapl:0"); sub-zones ("intel-rapl:0:0") are already inside them.
    if (name.rfind("intel-rapl:", 0) != 0 || name.find(':', 11) != std::string::npos) continue;
    uint64_t v = 0, range = 0;
    if (!read_u64((e.path() / "energy_uj").string(), &v)) {
      reason_ = (e.path() / "energy_uj").string() + " not readable (permissions; NVML not applicable to a CPU run)";
      files_.clear();
      return;
    }
    if (!read_u64((e.path() / "max_energy_range_uj").string(), &range)) range = 0;
    files_.push_back((e.path() / "energy_uj").string());
    ranges_.push_back(range);
  }
  if (files_.empty()) { reason_ = "no intel-rapl package zone under /sys/class/powercap"; return; }
  available_ = true;
  measure_tick();
}

void EnergyMeter::measure_tick() {
  // Polls the counter every ~0.2 ms and takes the median interval between changes (the first
  // change only ends a partial interval). A busy poll for at most 0.3 s, once per meter.
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::vector<uint64_t> last, now;
  if (!read_all(&last)) return;
  std::vector<double> changes;  // seconds since t0
  while (changes.size() < 6) {
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (t > 0.3) break;
    if (!read_all(&now)) return;
    if (now != last) {
      changes.push_back(t);
      last = now;
    }
    const auto until = Clock::now() + std::chrono::microseconds(200);
    while (Clock::now() < until) {
    }
  }
  if (changes.size() < 2) {  // at most one step in 0.3 s: a tick of about the poll or longer
    tick_s_ = changes.empty() ? INFINITY : 0.3;
    return;
  }
  std::vector<double> gaps;
  for (size_t i = 1; i < changes.size(); ++i) gaps.push_back(changes[i] - changes[i - 1]);
  std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
  tick_s_ = gaps[gaps.size() / 2];
}

EnergyMeter::~EnergyMeter() {
  if (nvml_lib_) {
    if (available_)
      if (auto shut = reinterpret_cast<NvmlShutdown>(dlsym(nvml_lib_, "nvmlShutdown"))) shut();
    dlclose(nvml_lib_);
  }
}

bool EnergyMeter::read_all(std::vector<uint64_t>* out) const {
  out->clear();
  if (nvml_device_) {
    unsigned long long mj = 0;
    if (reinterpret_cast<NvmlTotalEnergy>(nvml_energy_fn_)(nvml_device_, &mj) != 0) return false;
    out->push_back(uint64_t(mj) * 1000);  // to microjoules, like RAPL
    return true;
  }
  for (const std::string& f : files_) {
    uint64_t v = 0;
    if (!read_u64(f, &v)) return false;
    out->push_back(v);
  }
  return true;
}

void EnergyMeter::begin() {
  if (available_ && !read_all(&start_)) start_.clear();
}

double EnergyMeter::end() {
  std::vector<uint64_t> now;
  if (!available_ || start_.empty() || !read_all(&now) || now.size() != start_.size()) return std::nan("");
  double uj = 0;
  for (size_t i = 0; i < now.size(); ++i) {
    if (now[i] >= start_[i]) uj += double(now[i] - start_[i]);
    else if (i < ranges_.size() && ranges_[i] > 0) uj += double(ranges_[i] - start_[i] + now[i]);  // wrapped once
    else return std::nan("");
  }
  return uj * 1e-6;
}

}  // namespace weft::lab
