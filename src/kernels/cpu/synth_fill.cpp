// The host generator of synthetic weights (recipe: kernels/synth_fill_args.h). This file is
// compiled with -ffp-contract=off (CMakeLists.txt): `offset + x * scale` must stay a multiply and
// an add, each rounded, because the device generator does exactly that (an FMA would change the
// last bit of some values, and the bytes would depend on the compiler's flags).
#include "kernels/cpu/synth_fill.h"

#include <cmath>

#include "core/dtype.h"

namespace weft {

namespace {

// xoshiro256++: ~1 ns per 64 bits, good in all bit positions (we use every 16-bit lane).
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed) {
    for (auto& w : s_) w = splitmix64(&seed);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[0] + s_[3], 23) + s_[0];
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

template <DType D>
inline void store(void* out, int64_t i, float v) {
  if constexpr (D == DType::kBF16) {
    static_cast<uint16_t*>(out)[i] = f32_to_bf16(v);
  } else if constexpr (D == DType::kF16) {
    static_cast<uint16_t*>(out)[i] = f32_to_f16(v);
  } else {
    static_cast<float*>(out)[i] = v;
  }
}

// Normal values come from the sum of four 16-bit uniforms (Irwin-Hall, n=4): one RNG call per
// value and no transcendental, which is what makes >200M values/s per core possible. Tails are cut
// at +-3.46 sigma; for random weights that is a feature, not a flaw.
template <DType D>
void fill(const SynthChunk& c) {
  Xoshiro256 rng(c.seed);
  const float offset = c.offset, scale = c.scale;
  switch (c.values) {
    case SynthValues::kIrwinHall:
      for (int64_t i = 0; i < c.count; ++i) {
        const uint64_t r = rng.next();
        const int32_t s = int32_t(r & 0xffff) + int32_t((r >> 16) & 0xffff) +
                          int32_t((r >> 32) & 0xffff) + int32_t(r >> 48) - 131070;
        store<D>(c.dst, i, offset + float(s) * scale);
      }
      break;
    case SynthValues::kUniform:
    case SynthValues::kLogUniform: {
      const bool log_of = c.values == SynthValues::kLogUniform;
      for (int64_t i = 0; i < c.count; ++i) {
        const float u = float(rng.next() >> 40) * (1.0f / 16777216.0f);
        const float v = offset + u * scale;
        store<D>(c.dst, i, log_of ? std::log(v) : v);
      }
      break;
    }
  }
}

}  // namespace

void synth_fill_chunk(const SynthChunk& c) {
  switch (c.dtype) {
    case DType::kBF16: fill<DType::kBF16>(c); break;
    case DType::kF16: fill<DType::kF16>(c); break;
    default: fill<DType::kF32>(c); break;
  }
}

}  // namespace weft
