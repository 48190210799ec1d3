// Engine invariants (issue 8): what happens when code behind the input boundary is misused.
// Rewinding past the cached length is a Status error; a weight dtype without a matmul kernel
// aborts instead of being read as f32; attention never reads a KV row at or past view.length
// (WEFT_ASSERT: checked in Debug and -DWEFT_CHECKS=ON builds, skipped otherwise).
#include <gtest/gtest.h>

#include <vector>

#include "cache/kv_cache.h"
#include "core/check.h"
#include "core/cpu_features.h"
#include "engine/session.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "model/model.h"
#include "test_util.h"

namespace weft {
namespace {

class InvariantsDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST(Invariants, RewindPastTheCachedLengthIsAnError) {
  auto model = Model::load(test::source_dir() + "/tests/data/fixtures/qwen35_dense");
  ASSERT_TRUE(model.ok()) << model.status().message();
  SessionOptions so;
  so.threads = 1;
  Session s(*model.value(), so);
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5};
  ASSERT_TRUE(s.feed(ids.data(), 3, nullptr, nullptr).ok());
  RecurrentState at3(recurrent_state_spec(model.value()->config()));
  at3.assign_from(s.state().recurrent());
  ASSERT_TRUE(s.feed(ids.data() + 3, 2, nullptr, nullptr).ok());
  ASSERT_EQ(s.position(), 5);

  for (int64_t bad : {6, 100, -1}) {
    Status st = s.state().rewind(bad, at3);
    EXPECT_FALSE(st.ok()) << "rewind to " << bad;
    EXPECT_NE(st.message().find("holds 5 tokens"), std::string::npos) << st.message();
    EXPECT_EQ(s.position(), 5) << "a refused rewind changed the state";
  }
  ASSERT_TRUE(s.state().rewind(3, at3).ok());
  EXPECT_EQ(s.position(), 3);
  EXPECT_EQ(s.state().kv().view(0).length, 3);
}

TEST_F(InvariantsDeathTest, MatmulRefusesWeightDtypesWithoutAKernel) {
  std::vector<uint8_t> w(64 * 32);
  std::vector<float> x(32, 1.0f), out(64);
  for (DType t : {DType::kQ8_0, DType::kI32}) {
    EXPECT_DEATH(matmul(t, w.data(), 2, 32, x.data(), 32, 1, out.data(), 64, nullptr), "no kernel")
        << dtype_name(t);
    EXPECT_DEATH(matmul_scalar(t, w.data(), 2, 32, x.data(), 32, 2, out.data(), 64, nullptr), "no kernel")
        << dtype_name(t);
    if (cpu_features().has_avx2_fma_f16c()) {
      // T = 1 (decode) once read any unknown dtype as f32; T > 1 once read zeros.
      EXPECT_DEATH(matmul_avx2(t, w.data(), 2, 32, x.data(), 32, 1, out.data(), 64, nullptr), "no kernel");
      EXPECT_DEATH(matmul_avx2(t, w.data(), 2, 32, x.data(), 32, 2, out.data(), 64, nullptr), "no kernel");
    }
  }
  EXPECT_TRUE(matmul_supports(DType::kBF16) && matmul_supports(DType::kF16) && matmul_supports(DType::kF32));
}

// A cache of 5 rows and attention asked for positions 5.. : every kernel must trip the assert
// rather than read a row that was never written.
TEST_F(InvariantsDeathTest, AttentionNeverReadsPastTheCache) {
  if (!kAssertsEnabled) GTEST_SKIP() << "WEFT_ASSERT is compiled out (Release without -DWEFT_CHECKS=ON)";
  for (DType type : {DType::kF16, DType::kQ8_0}) {
    KvCacheSpec spec;
    spec.n_layers = 1;
    spec.n_kv_heads = 2;
    spec.head_dim = 32;
    spec.k_type = spec.v_type = type;
    spec.page_tokens = 4;
    KvCache cache(spec);
    std::vector<float> kv(5 * 2 * 32, 0.5f);
    cache.append(0, kv.data(), kv.data(), 5);
    const KvLayerView view = cache.view(0);
    ASSERT_EQ(view.length, 5);
    EXPECT_DEATH((void)view.k_row(0, 5), "outside the KV cache");
    EXPECT_DEATH((void)view.v_row(1, 7), "outside the KV cache");
    EXPECT_DEATH((void)view.k_row(2, 0), "outside the KV cache");

    std::vector<float> q(2 * 4 * 32, 0.1f), out(2 * 4 * 32);
    AttentionArgs a;
    a.q = q.data();
    a.T = 2;
    a.pos0 = 4;  // token 1 would see row 5, which the cache does not hold
    a.n_heads = 4;
    a.scale = 0.2f;
    a.out = out.data();
    if (type == DType::kF16) {
      EXPECT_DEATH(attention_f16(view, a, nullptr), "past the KV cache");
    }
    EXPECT_DEATH(attention_reference(view, a, nullptr), "past the KV cache");
    a.pos0 = 3;  // rows [0, 5): fine
    attention_reference(view, a, nullptr);
    if (type == DType::kF16) attention_f16(view, a, nullptr);
  }
}

}  // namespace
}  // namespace weft
