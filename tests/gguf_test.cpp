// Tests of the GGUF reader and writer: a round trip of every value type and several tensor
// types, hand-built hostile files (each defect class gives a clear error, never a crash), every
// truncation, and random byte flips.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/quant_types.h"
#include "io/gguf.h"
#include "kernels/cpu/quant_blocks.h"
#include "test_util.h"

namespace weft {
namespace {

using Metadata = std::vector<std::pair<std::string, GgufValue>>;

// ---- a byte-level builder, independent of the writer, for hand-made (and broken) files ----
struct Raw {
  std::string b;
  Raw& u32(uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); return *this; }
  Raw& u64(uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); return *this; }
  Raw& u8(uint8_t v) { b.push_back(char(v)); return *this; }
  Raw& str(const std::string& s) { u64(s.size()); b += s; return *this; }
  Raw& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b += "GGUF";
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  Raw& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(uint32_t(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  // Pads to `align` and appends `n` data bytes.
  Raw& data(size_t n, size_t align = 32) {
    b.resize((b.size() + align - 1) / align * align, '\0');
    b.append(n, '\x5a');
    return *this;
  }
};

Status parse_status(const std::string& bytes) {
  auto r = GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return r.ok() ? Status() : r.status();
}

void expect_error(const std::string& bytes, const std::string& fragment) {
  Status s = parse_status(bytes);
  ASSERT_FALSE(s.ok()) << "accepted a file that should fail with '" << fragment << "'";
  EXPECT_NE(s.message().find(fragment), std::string::npos) << "message: " << s.message();
}

// A small valid file built by hand: one f32 tensor [2, 4] (ne = {4, 2}), 32 bytes of data.
std::string valid_raw() {
  Raw r;
  r.header(3, 1, 1).str("general.architecture").u32(8).str("llama");
  r.tensor("w", {4, 2}, 0, 0).data(32);
  return r.b;
}

TEST(Gguf, HandBuiltFileParses) {
  const std::string f = valid_raw();
  auto r = GgufFile::parse(reinterpret_cast<const uint8_t*>(f.data()), f.size());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->version(), 3u);
  EXPECT_EQ(r->alignment(), 32u);
  EXPECT_EQ(r->data_offset() % 32, 0u);
  ASSERT_EQ(r->tensors().size(), 1u);
  const GgufTensor& t = r->tensors()[0];
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 4}));  // row-major [rows, cols]
  EXPECT_EQ(t.cols(), 4);
  EXPECT_EQ(t.rows(), 2);
  EXPECT_EQ(t.nbytes, 32u);
  EXPECT_EQ(t.data, reinterpret_cast<const uint8_t*>(f.data()) + r->data_offset());
  EXPECT_EQ(*r->get_string("general.architecture"), "llama");
  EXPECT_FALSE(r->get_uint("general.architecture").ok());
  EXPECT_FALSE(r->get_string("missing").ok());
  // Version 2 has the same layout and is read too.
  std::string v2 = f;
  v2[4] = 2;
  EXPECT_TRUE(parse_status(v2).ok());
}

TEST(Gguf, RoundTripOfEveryValueTypeAndTensorTypes) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> g(0, 1);
  Metadata md = {
      {"general.architecture", GgufValue::string("qwen3")},
      {"u8", GgufValue::u8(200)},         {"i8", GgufValue::i8(-100)},
      {"u16", GgufValue::u16(60000)},     {"i16", GgufValue::i16(-30000)},
      {"u32", GgufValue::u32(4000000000u)}, {"i32", GgufValue::i32(-2000000000)},
      {"u64", GgufValue::u64(1ull << 60)}, {"i64", GgufValue::i64(-(1ll << 60))},
      {"f32", GgufValue::f32(0.1f)},      {"f64", GgufValue::f64(0.1)},
      {"bool", GgufValue::boolean(true)}, {"empty_string", GgufValue::string("")},
      {"tokenizer.ggml.tokens", GgufValue::string_array({"<|endoftext|>", "Ġthe", "", "\xe4\xb8\xad"})},
      {"tokenizer.ggml.merges", GgufValue::string_array({"Ġ t", "h e"})},
      {"tokenizer.ggml.token_type", GgufValue::i32_array({1, 1, 3, 1})},
      {"scores", GgufValue::f32_array({0.5f, -1.0f})},
      {"empty_array", GgufValue::array(GgufType::kU8, {})},
      {"nested", GgufValue::array(GgufType::kArray, {GgufValue::string_array({"a", "b"}), GgufValue::string_array({})})},
  };
  struct Spec { std::string name; GgmlType type; std::vector<int64_t> ne; };
  const std::vector<Spec> specs = {
      {"token_embd.weight", GgmlType::kQ4_K, {256, 3}},
      {"blk.0.attn_norm.weight", GgmlType::kF32, {5}},
      {"blk.0.attn_q.weight", GgmlType::kQ8_0, {64, 3}},
      {"blk.0.ffn_down.weight", GgmlType::kQ6_K, {512, 1, 1, 2}},
      {"blk.0.ffn_up.weight", GgmlType::kBF16, {7, 2}},
      {"blk.0.ffn_gate.weight", GgmlType::kQ4_0, {32, 1}},
      {"blk.0.ssm_in.weight", GgmlType::kQ5_K, {256, 1}},
      {"blk.0.f16.weight", GgmlType::kF16, {3}},
  };
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<GgufTensorToWrite> tensors;
  for (const auto& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.ne) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = g(rng);
    bufs.emplace_back(ggml_row_bytes(s.type, s.ne[0]) * size_t(n / s.ne[0]));
    for (int64_t r = 0; r < n / s.ne[0]; ++r)
      quantize_row(s.type, v.data() + r * s.ne[0], bufs.back().data() + size_t(r) * ggml_row_bytes(s.type, s.ne[0]), s.ne[0]);
    tensors.push_back({s.name, s.type, s.ne, bufs.back().data()});
  }
  const std::string dir = test::temp_dir("gguf_roundtrip");
  const std::string path = dir + "/m.gguf";
  ASSERT_TRUE(write_gguf(path, md, tensors).ok());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ(f->metadata().size(), md.size());
  for (size_t k = 0; k < md.size(); ++k) {
    EXPECT_EQ(f->metadata()[k].first, md[k].first);
    EXPECT_TRUE(f->metadata()[k].second == md[k].second) << md[k].first;
  }
  EXPECT_EQ(f->find("f32")->f, double(0.1f));
  EXPECT_EQ((*f->get_string_array("tokenizer.ggml.tokens"))[3], "\xe4\xb8\xad");
  EXPECT_EQ(*f->get_uint("u16"), 60000u);
  ASSERT_EQ(f->tensors().size(), specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    const GgufTensor* t = f->find_tensor(specs[k].name);
    ASSERT_NE(t, nullptr) << specs[k].name;
    EXPECT_EQ(t->type, specs[k].type);
    EXPECT_EQ(t->ne, specs[k].ne);
    EXPECT_EQ(t->offset % 32, 0u);
    EXPECT_EQ(t->row_bytes() * size_t(t->rows()), t->nbytes);
    ASSERT_EQ(t->nbytes, bufs[k].size());
    EXPECT_EQ(std::memcmp(t->data, bufs[k].data(), t->nbytes), 0) << specs[k].name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 32, 0u);  // the map is page-aligned
  }
  // serialize_gguf produces the very bytes write_gguf streamed.
  auto bytes = serialize_gguf(md, tensors);
  ASSERT_TRUE(bytes.ok());
  auto text = read_text_file(path);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, *bytes);
  // Like llama.cpp's writer: tensors in order, each at the previous end rounded up.
  uint64_t expect = 0;
  for (const auto& t : f->tensors()) {
    EXPECT_EQ(t.offset, expect) << t.name;
    expect = (t.offset + t.nbytes + 31) / 32 * 32;
  }
  EXPECT_EQ(f->data_offset() + expect, text->size());
}

TEST(Gguf, AlignmentFromMetadata) {
  std::vector<float> a(8, 1.0f), b(3, 2.0f);
  Metadata md = {{"general.alignment", GgufValue::u32(64)}};
  auto bytes = serialize_gguf(md, {{"a", GgmlType::kF32, {8}, a.data()}, {"b", GgmlType::kF32, {3}, b.data()}});
  ASSERT_TRUE(bytes.ok());
  auto f = GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->find_tensor("b")->offset, 64u);
  EXPECT_FALSE(serialize_gguf({{"general.alignment", GgufValue::u32(48)}}, {}).ok());
}

TEST(Gguf, WriterRejectsBadTensors) {
  std::vector<uint8_t> buf(1024);
  EXPECT_FALSE(serialize_gguf({}, {{"x", GgmlType::kQ4_K, {100}, buf.data()}}).ok());  // not whole blocks
  EXPECT_FALSE(serialize_gguf({}, {{"x", GgmlType::kF32, {1}, buf.data()}, {"x", GgmlType::kF32, {1}, buf.data()}}).ok());
  EXPECT_FALSE(serialize_gguf({}, {{std::string(64, 'n'), GgmlType::kF32, {1}, buf.data()}}).ok());
  EXPECT_FALSE(serialize_gguf({}, {{"x", GgmlType::kF32, {1, 1, 1, 1, 1}, buf.data()}}).ok());
  EXPECT_FALSE(serialize_gguf({}, {{"x", GgmlType::kF32, {4}, nullptr}}).ok());
  EXPECT_FALSE(serialize_gguf({{"k", GgufValue::u8(1)}, {"k", GgufValue::u8(2)}}, {}).ok());
  EXPECT_FALSE(serialize_gguf({{"k", GgufValue::array(GgufType::kString, {GgufValue::u8(1)})}}, {}).ok());
}

TEST(Gguf, HostileHeaders) {
  std::string f = valid_raw();
  { std::string b = f; b[0] = 'X'; expect_error(b, "bad magic"); }
  { std::string b = f; b[4] = 1; expect_error(b, "version 1"); }
  { std::string b = f; b[4] = 4; expect_error(b, "unsupported GGUF version 4"); }
  { std::string b = f; b[4] = 0; b[7] = 3; expect_error(b, "unsupported GGUF version"); }  // big-endian 3
  expect_error(Raw().header(3, 1ull << 60, 0).data(64).b, "tensor count");
  expect_error(Raw().header(3, 0, 1ull << 59).data(64).b, "metadata count");
  expect_error(std::string("GGU"), "truncated");
  expect_error(std::string(), "truncated");
}

TEST(Gguf, HostileMetadata) {
  auto one_kv = [](const std::function<void(Raw&)>& body) {
    Raw r;
    r.header(3, 0, 1);
    body(r);
    return r.b;
  };
  expect_error(one_kv([](Raw& r) { r.u64(1ull << 62).u64(0).u64(0); }), "key is 4611686018427387904 bytes long");
  expect_error(one_kv([](Raw& r) { r.str(""); r.u32(0).u8(1).u8(0); }), "empty key");
  expect_error(one_kv([](Raw& r) { r.str("k").u32(13).u8(1); }), "unknown value type 13");
  expect_error(one_kv([](Raw& r) { r.str("k").u32(7).u8(2); }), "neither 0 nor 1");
  expect_error(one_kv([](Raw& r) { r.str("k").u32(8).u64(1ull << 40); }), "bytes long");  // string length
  expect_error(one_kv([](Raw& r) { r.str("k").u32(9).u32(42).u64(1); }), "unknown array element type 42");
  expect_error(one_kv([](Raw& r) { r.str("k").u32(9).u32(4).u64(1ull << 61); }), "cannot fit");
  expect_error(one_kv([](Raw& r) { r.str("k").u32(9).u32(8).u64(3).str("a").str("b"); }), "cannot fit");
  expect_error(one_kv([](Raw& r) { r.str("k").u32(9).u32(8).u64(2).str("a").u64(5).u8('x'); }), "truncated: metadata 'k'[1] needs 5 bytes");
  expect_error(one_kv([](Raw& r) { r.str("k").u32(6).u8(0).u8(0).u8(0); }), "truncated");  // f32 cut short
  expect_error(one_kv([](Raw& r) {
                 r.str("k").u32(9);
                 for (int d = 0; d < 5; ++d) r.u32(9).u64(1);
                 r.u32(0).u64(0);
               }),
               "nested deeper");
  expect_error(one_kv([](Raw& r) { r.str("general.alignment").u32(4).u32(48); }), "power of two");
  expect_error(one_kv([](Raw& r) { r.str("general.alignment").u32(4).u32(0); }), "power of two");
  expect_error(one_kv([](Raw& r) { r.str("general.alignment").u32(10).u64(32); }), "must be a u32");
  {
    Raw r;
    r.header(3, 0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(2);
    expect_error(r.b, "duplicate metadata key 'k'");
  }
}

TEST(Gguf, HostileTensorInfos) {
  auto one = [](const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset, size_t data) {
    Raw r;
    r.header(3, 1, 0).tensor(name, std::move(ne), type, offset).data(data);
    return r.b;
  };
  expect_error(one("w", {4, 2}, 0, 0, 31), "beyond the end");          // truncated data
  expect_error(one("w", {4, 2}, 0, 32, 40), "beyond the end");         // offset past the data
  expect_error(one("w", {4, 2}, 0, 1ull << 63, 64), "beyond the end");
  expect_error(one("w", {4, 2}, 0, 0xffffffffffffffe0ull, 64), "beyond the end");  // offset + size wraps
  expect_error(one("w", {4, 2}, 0, 8, 64), "multiple of the alignment");
  expect_error(one("w", {4, 2}, 99, 0, 64), "tensor type 99 (unknown) is not supported");
  expect_error(one("w", {32, 2}, 3, 0, 64), "q4_1");
  expect_error(one("w", {128, 1}, 12, 0, 1024), "whole number of q4_K blocks");
  expect_error(one("w", {1, 1, 1, 1, 1}, 0, 0, 64), "5 dimensions");
  expect_error(one("w", {}, 0, 0, 64), "0 dimensions");
  expect_error(one("w", {1ull << 40, 1ull << 40}, 0, 0, 64), "overflows");
  expect_error(one("w", {1ull << 63}, 0, 0, 64), "absurd");
  expect_error(one(std::string(64, 'n'), {1}, 0, 0, 64), "longer than 63");
  expect_error(one("", {1}, 0, 0, 64), "empty name");
  {
    Raw r;
    r.header(3, 2, 0).tensor("a", {8}, 0, 0).tensor("a", {8}, 0, 32).data(64);
    expect_error(r.b, "duplicate tensor name 'a'");
  }
  {
    Raw r;
    r.header(3, 2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).data(96);
    expect_error(r.b, "overlap");
  }
  {  // overlapping in reverse file order is still found
    Raw r;
    r.header(3, 2, 0).tensor("b", {8}, 0, 32).tensor("a", {16}, 0, 0).data(96);
    expect_error(r.b, "overlap");
  }
  {  // a zero-size tensor may sit anywhere aligned
    Raw r;
    r.header(3, 2, 0).tensor("a", {16}, 0, 0).tensor("z", {0, 3}, 0, 32).data(64);
    EXPECT_TRUE(parse_status(r.b).ok()) << parse_status(r.b).message();
  }
}

TEST(Gguf, EveryTruncationFailsCleanly) {
  std::vector<float> w(40, 0.5f);
  std::vector<uint8_t> q(ggml_row_bytes(GgmlType::kQ6_K, 256));
  auto bytes = serialize_gguf({{"general.architecture", GgufValue::string("llama")},
                               {"tokenizer.ggml.tokens", GgufValue::string_array({"a", "bc", "def"})}},
                              {{"w", GgmlType::kF32, {40}, w.data()}, {"q", GgmlType::kQ6_K, {256}, q.data()}});
  ASSERT_TRUE(bytes.ok());
  auto full = GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
  ASSERT_TRUE(full.ok());
  uint64_t data_end = 0;
  for (const auto& t : full->tensors()) data_end = std::max<uint64_t>(data_end, full->data_offset() + t.offset + t.nbytes);
  for (size_t len = 0; len < bytes->size(); ++len) {
    // Copy into an exact-size buffer so that a read past the end is an ASan error, not luck.
    std::vector<uint8_t> cut(bytes->begin(), bytes->begin() + long(len));
    auto r = GgufFile::parse(cut.data(), cut.size());
    if (len < data_end) {
      EXPECT_FALSE(r.ok()) << "accepted a file cut to " << len << " bytes";
    } else {
      EXPECT_TRUE(r.ok()) << len << ": " << r.status().message();  // only trailing padding lost
    }
  }
}

TEST(Gguf, RandomByteFlipsNeverCrash) {
  std::vector<float> w(64, 0.25f);
  auto bytes = serialize_gguf({{"general.architecture", GgufValue::string("qwen3")},
                               {"general.alignment", GgufValue::u32(32)},
                               {"tokenizer.ggml.tokens", GgufValue::string_array({"a", "bc", "def"})},
                               {"nested", GgufValue::array(GgufType::kArray, {GgufValue::i32_array({1, 2})})}},
                              {{"w", GgmlType::kF32, {64}, w.data()}, {"v", GgmlType::kQ8_0, {32, 2}, w.data()}});
  ASSERT_TRUE(bytes.ok());
  std::mt19937 rng(std::random_device{}());
  int accepted = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<uint8_t> b(bytes->begin(), bytes->end());
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] ^= uint8_t(1u << (rng() % 8));
    auto r = GgufFile::parse(b.data(), b.size());
    if (!r.ok()) continue;
    ++accepted;
    for (const auto& t : r->tensors()) {  // whatever was accepted lies inside the buffer
      if (t.nbytes == 0) continue;
      ASSERT_GE(t.data, b.data());
      ASSERT_LE(t.data + t.nbytes, b.data() + b.size());
    }
  }
  std::printf("%d of 20000 mutated files accepted (flips in data or padding)\n", accepted);
}

}  // namespace
}  // namespace weft
