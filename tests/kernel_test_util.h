// Helpers shared by the kernel and weight-copy tests (matmul, quant_matmul, quant_repack,
// host_weight_copy): a buffer that faults on any read past its end, fresh seeds, and a guard for
// the WEFT_CPU_WEIGHTS variable. Header-only, so each test binary compiles its own copy.
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace weft::test {

// Bytes placed so that they end exactly at an inaccessible page: any read past the end faults,
// which is what a weight tensor at the end of a memory-mapped file would do.
class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t bytes) {
    page_ = size_t(sysconf(_SC_PAGESIZE));
    map_bytes_ = (bytes + page_ - 1) / page_ * page_ + page_;
    void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    base_ = static_cast<uint8_t*>(p);
    mprotect(base_ + map_bytes_ - page_, page_, PROT_NONE);
    data_ = base_ + map_bytes_ - page_ - bytes;
  }
  ~GuardedBuffer() { munmap(base_, map_bytes_); }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  uint8_t* data() { return data_; }

 private:
  size_t page_ = 0, map_bytes_ = 0;
  uint8_t* base_ = nullptr;
  uint8_t* data_ = nullptr;
};

// A fresh seed each run (the tests print it on failure) so that repeated runs cover new inputs.
inline uint32_t fresh_seed() {
  static std::random_device rd;
  return rd();
}

// Restores WEFT_CPU_WEIGHTS when a test changes it.
struct CpuWeightsEnvGuard {
  std::string old;
  bool had = false;
  CpuWeightsEnvGuard() {
    if (const char* v = std::getenv("WEFT_CPU_WEIGHTS")) had = true, old = v;
  }
  ~CpuWeightsEnvGuard() {
    if (had) setenv("WEFT_CPU_WEIGHTS", old.c_str(), 1);
    else unsetenv("WEFT_CPU_WEIGHTS");
  }
};

}  // namespace weft::test
