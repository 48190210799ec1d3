// Long inputs (issue 8): `weft logits` streams its [T, V] rows into the safetensors file batch by
// batch. The streaming writer must produce the very bytes of the whole-tensor writer, stay atomic
// on every error, and the command's peak memory must not grow as T x V.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/session.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/synth.h"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

using test::read_bytes;

std::string fixture_dir(const std::string& name) { return test::source_dir() + "/tests/data/fixtures/" + name; }

// Two tensors of different dtypes plus metadata: the layout write_safetensors gives them.
struct Sample {
  std::vector<float> a = std::vector<float>(3 * 37);
  std::vector<uint16_t> b = std::vector<uint16_t>(5 * 11);
  std::vector<TensorToWrite> tensors() const {
    return {{"logits", DType::kF32, {3, 37}, a.data()}, {"other", DType::kBF16, {5, 11}, b.data()}};
  }
  std::string data() const {
    return std::string(reinterpret_cast<const char*>(a.data()), a.size() * 4) +
           std::string(reinterpret_cast<const char*>(b.data()), b.size() * 2);
  }
};

Sample make_sample() {
  Sample s;
  std::mt19937 rng(7);
  for (float& x : s.a) x = std::uniform_real_distribution<float>(-3, 3)(rng);
  for (uint16_t& x : s.b) x = uint16_t(rng());
  return s;
}

TEST(SafetensorsStreamWriter, PiecesGiveTheBytesOfTheWholeTensorWriter) {
  const std::string dir = test::temp_dir("stream-writer");
  const Sample s = make_sample();
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  ASSERT_TRUE(write_safetensors(dir + "/whole.safetensors", s.tensors(), meta).ok());
  const std::string whole = read_bytes(dir + "/whole.safetensors");

  // Pieces of 0, 1, 7 and random sizes, crossing the boundary between the two tensors.
  const std::string data = s.data();
  auto w = SafetensorsStreamWriter::open(dir + "/stream.safetensors", s.tensors(), meta);
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w.value()->bytes_expected(), data.size());
  std::mt19937 rng(3);
  size_t done = 0;
  for (size_t piece : {size_t(0), size_t(1), size_t(7)}) {
    ASSERT_TRUE(w.value()->append(data.data() + done, piece).ok());
    done += piece;
  }
  while (done < data.size()) {
    const size_t piece = std::min(data.size() - done, size_t(rng() % 97));
    ASSERT_TRUE(w.value()->append(data.data() + done, piece).ok());
    done += piece;
  }
  EXPECT_FALSE(fs::exists(dir + "/stream.safetensors")) << "visible before finish()";
  ASSERT_TRUE(w.value()->finish().ok());
  EXPECT_EQ(read_bytes(dir + "/stream.safetensors"), whole);
  EXPECT_FALSE(fs::exists(dir + "/stream.safetensors.tmp"));

  auto f = SafetensorsFile::open(dir + "/stream.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(std::memcmp(f->find("logits")->data, s.a.data(), s.a.size() * 4), 0);
  fs::remove_all(dir);
}

TEST(SafetensorsStreamWriter, ErrorsLeaveNothingBehind) {
  const std::string dir = test::temp_dir("stream-writer-errors");
  const Sample s = make_sample();
  const std::string data = s.data();
  const std::string path = dir + "/out.safetensors";
  std::ofstream(path) << "previous contents";  // an older file at the path must survive a failure
  {
    // Too many bytes: refused, temp removed.
    auto w = SafetensorsStreamWriter::open(path, s.tensors());
    ASSERT_TRUE(w.ok());
    std::string extra = data + "x";
    Status st = w.value()->append(extra.data(), extra.size());
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("header announced"), std::string::npos) << st.message();
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    EXPECT_FALSE(w.value()->append(data.data(), 1).ok()) << "append after abandoning";
  }
  {
    // Too few bytes: finish() refuses and removes the temp file.
    auto w = SafetensorsStreamWriter::open(path, s.tensors());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w.value()->append(data.data(), data.size() - 1).ok());
    Status st = w.value()->finish();
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("data bytes written"), std::string::npos) << st.message();
    EXPECT_FALSE(fs::exists(path + ".tmp"));
  }
  {
    // Dropped half way (an error elsewhere, an exception): the destructor cleans up.
    auto w = SafetensorsStreamWriter::open(path, s.tensors());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w.value()->append(data.data(), 10).ok());
    EXPECT_TRUE(fs::exists(path + ".tmp"));
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(read_bytes(path), "previous contents");
  // A directory that does not exist: an error at open, not later.
  EXPECT_FALSE(SafetensorsStreamWriter::open(dir + "/no/such/dir/x.safetensors", s.tensors()).ok());
  fs::remove_all(dir);
}

std::string write_ids(const std::string& path, const std::vector<int32_t>& ids) {
  std::ofstream out(path);
  for (int32_t id : ids) out << id << ' ';
  return path;
}

std::vector<int32_t> some_ids(int64_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = int32_t(rng() % uint32_t(vocab));
  return ids;
}

// The streamed file is byte for byte the one the whole-tensor writer makes from Session::feed,
// which is what `weft logits` wrote before it streamed.
TEST(LogitsCommand, StreamedFileEqualsWholeTensorFile) {
  const std::string dir = test::temp_dir("logits-stream");
  const std::string model_dir = fixture_dir("qwen35_dense");
  auto model = Model::load(model_dir);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const int64_t V = model.value()->config().vocab_size, T = 150;  // 3 batches of 64, the last partial
  const std::vector<int32_t> ids = some_ids(T, int32_t(V), 11);
  write_ids(dir + "/ids.txt", ids);

  std::string out;
  const int rc = test::run_command(test::weft_binary() + " logits -m " + model_dir + " --ids-file " + dir +
                                       "/ids.txt -o " + dir + "/streamed.safetensors --batch 64 --threads 2",
                                   &out);
  ASSERT_EQ(rc, 0) << out;

  SessionOptions so;
  so.threads = 2;
  so.batch = 64;
  Session session(*model.value(), so);
  std::vector<float> logits(static_cast<size_t>(T * V));
  ASSERT_TRUE(session.feed(ids.data(), T, logits.data(), nullptr).ok());
  ASSERT_TRUE(write_safetensors(dir + "/whole.safetensors", {{"logits", DType::kF32, {T, V}, logits.data()}}).ok());
  EXPECT_EQ(read_bytes(dir + "/streamed.safetensors"), read_bytes(dir + "/whole.safetensors"));
  fs::remove_all(dir);
}

// Peak memory: a model with a 131,072-token vocabulary and 512 positions would need 256 MiB of
// logits held whole; streamed, one batch of 32 rows is 16 MiB. The child's peak RSS
// (getrusage of the waited-for children) must stay well under the whole tensor.
TEST(LogitsCommand, PeakMemoryDoesNotGrowAsTTimesV) {
  const std::string dir = test::temp_dir("logits-memory");
  auto spec = synth_preset("tiny");
  ASSERT_TRUE(spec.ok());
  SynthOverrides o;
  o.vocab = 131072;
  o.hidden = 64;
  o.layers = 4;
  ASSERT_TRUE(synth_apply_overrides(&spec.value(), o).ok());
  ASSERT_TRUE(synth_write(spec.value(), dir + "/model").ok());
  const int64_t T = 512, V = 131072;
  write_ids(dir + "/ids.txt", some_ids(T, 1000, 5));

  std::string out;
  const int rc = test::run_command(test::weft_binary() + " logits -m " + dir + "/model --ids-file " + dir +
                                       "/ids.txt -o " + dir + "/logits.safetensors --batch 32",
                                   &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(fs::file_size(dir + "/logits.safetensors") >= uint64_t(T * V * 4), true);
  rusage ru{};
  ASSERT_EQ(getrusage(RUSAGE_CHILDREN, &ru), 0);
  const double peak_mib = double(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
  const double whole_mib = double(T * V * 4) / (1 << 20);
  std::printf("[ logits T=%lld V=%lld ] peak RSS of the command %.1f MiB; the whole tensor is %.0f MiB\n",
              (long long)T, (long long)V, peak_mib, whole_mib);
  // ASan keeps freed memory in quarantine and adds shadow memory: the peak says nothing about
  // what weft holds. The Release run of the suite asserts the bound.
  if (test::kUnderAddressSanitizer) GTEST_SKIP() << "peak RSS is not meaningful under AddressSanitizer";
  EXPECT_LT(peak_mib, whole_mib / 2) << "weft logits holds the logits of every position in memory";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace weft
