// Reference attention for any KV type: decode rows to f32, exact two-pass softmax in double.
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/kv_quant.h"

namespace weft {

void attention_reference(const KvLayerView& kv, const AttentionArgs& a, ThreadPool* pool) {
  // Token t sees rows [0, pos0 + t]; the cache must already hold the last of them.
  WEFT_ASSERT(a.pos0 >= 0 && a.pos0 + a.T <= kv.length, "attention would read past the KV cache");
  const int64_t hd = kv.head_dim, group = a.n_heads / kv.n_kv_heads;
  auto task = [&](int64_t idx) {
    const int64_t t = idx / a.n_heads, h = idx % a.n_heads, g = h / group;
    const int64_t n_keys = a.pos0 + t + 1;
    const float* q = a.q + (t * a.n_heads + h) * hd;
    std::vector<float> row(static_cast<size_t>(hd));
    std::vector<double> scores(static_cast<size_t>(n_keys)), acc(static_cast<size_t>(hd), 0.0);
    double m = -INFINITY;
    for (int64_t j = 0; j < n_keys; ++j) {
      decode_kv_row(kv.k_type, kv.k_row(g, j), row.data(), hd);
      double s = 0;
      for (int64_t d = 0; d < hd; ++d) s += double(q[d]) * double(row[size_t(d)]);
      scores[size_t(j)] = s * a.scale;
      m = std::fmax(m, scores[size_t(j)]);
    }
    double l = 0;
    for (int64_t j = 0; j < n_keys; ++j) {
      const double p = std::exp(scores[size_t(j)] - m);
      l += p;
      decode_kv_row(kv.v_type, kv.v_row(g, j), row.data(), hd);
      for (int64_t d = 0; d < hd; ++d) acc[size_t(d)] += p * double(row[size_t(d)]);
    }
    float* out = a.out + (t * a.n_heads + h) * hd;
    for (int64_t d = 0; d < hd; ++d) out[d] = float(acc[size_t(d)] / l);
  };
  if (pool) pool->parallel_for(a.T * a.n_heads, task);
  else for (int64_t i = 0; i < a.T * a.n_heads; ++i) task(i);
}

}  // namespace weft
