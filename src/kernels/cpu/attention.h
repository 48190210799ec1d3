// Causal attention of new query tokens against one layer of the paged KV cache.
//
// The strict kernel (attention_f16) reads an f16 cache and is FROZEN: its numerics define the
// strict tier's bit-identical outputs (guarded by golden tests). Kernels for other cache types
// live beside it in their own files and are chosen by the cache type, never by editing it.
//
// Determinism: work is split into tasks by fixed rules (kv head x fixed key chunks for decode,
// query token x kv head for prefill), partial softmax states are merged in chunk order, so the
// result does not depend on the thread count.
#pragma once

#include <cstdint>

#include "kernels/attention_args.h"
#include "kernels/kv_view.h"

namespace weft {

class ThreadPool;


// Keys per decode task: the context is split into chunks of this many tokens, merged by
// log-sum-exp. Fixed (never derived from the thread count) so results are deterministic.
constexpr int64_t kAttnChunk = 256;

// Strict tier: f16 K and V. FROZEN (see above).
void attention_f16(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool);

// Reference for any cache type (f32/f16/q8_0/q4_0): decodes each row to f32 and runs the plain
// two-pass softmax in double. Slow; for tests and for the f32 cache.
void attention_reference(const KvLayerView& kv, const AttentionArgs& args, ThreadPool* pool);

}  // namespace weft
