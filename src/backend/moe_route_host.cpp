#include "backend/moe_route_host.h"

#include <algorithm>
#include <numeric>

#include "kernels/cpu/ops.h"

namespace weft {

MoeRouting route_on_host(float* logits, int64_t rows, int64_t E, int64_t K, bool renormalize, MoeRoutingHost* h,
                         BackendCounters* counters) {
  const size_t slots = size_t(rows * K);
  h->slot_expert.resize(slots);
  h->slot_weight.resize(slots);
  h->order.resize(size_t(E));
  for (int64_t t = 0; t < rows; ++t) {
    float* p = logits + t * E;
    softmax(p, E);
    std::iota(h->order.begin(), h->order.end(), 0);
    std::partial_sort(h->order.begin(), h->order.begin() + K, h->order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += p[h->order[size_t(k)]];
    for (int64_t k = 0; k < K; ++k) {
      h->slot_expert[size_t(t * K + k)] = h->order[size_t(k)];
      h->slot_weight[size_t(t * K + k)] = renormalize ? float(p[h->order[size_t(k)]] / sum) : p[h->order[size_t(k)]];
    }
  }
  // Counting sort of the slots by expert; slots stay in increasing order inside an expert.
  h->expert_begin.assign(size_t(E + 1), 0);
  for (size_t i = 0; i < slots; ++i) ++h->expert_begin[size_t(h->slot_expert[i]) + 1];
  for (int64_t e = 0; e < E; ++e) {
    counters->moe_experts_touched += h->expert_begin[size_t(e + 1)] != 0;
    h->expert_begin[size_t(e + 1)] += h->expert_begin[size_t(e)];
  }
  ++counters->moe_route_calls;
  h->sorted_slot.resize(slots);
  h->slot_pos.resize(slots);
  std::vector<int32_t>& fill = h->order;
  fill.assign(h->expert_begin.begin(), h->expert_begin.end() - 1);
  for (size_t i = 0; i < slots; ++i) {
    const int32_t pos = fill[size_t(h->slot_expert[i])]++;
    h->sorted_slot[size_t(pos)] = int32_t(i);
    h->slot_pos[i] = pos;
  }
  MoeRouting r;
  r.rows = rows;
  r.k = K;
  r.n_experts = E;
  r.expert_begin = h->expert_begin.data();
  r.sorted_slot = h->sorted_slot.data();
  r.slot_pos = h->slot_pos.data();
  r.slot_weight = h->slot_weight.data();
  r.slot_expert = h->slot_expert.data();
  return r;
}

}  // namespace weft
