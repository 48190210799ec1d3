// Bad input (issue 2): every hostile model directory, weight file, id file or flag gives a clear
// message and exit code 1 (bad input) or 2 (bad usage) — never a crash, a signal or a hang.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/session.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/model.h"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string fixture_dir(const std::string& name) { return test::source_dir() + "/tests/data/fixtures/" + name; }

using test::read_bytes;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// A safetensors file taken apart: parsed header and the data region.
struct Parts {
  json header;
  std::string data;
};

Parts split(const std::string& file) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | uint8_t(file[size_t(i)]);
  return {json::parse(file.substr(8, n)), file.substr(8 + n)};
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(uint8_t(v >> (8 * i)));
  return s;
}

std::string assemble(const std::string& header_text, const std::string& data) {
  return le64(header_text.size()) + header_text + data;
}
std::string assemble(const Parts& p) {
  std::string text = p.header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  return assemble(text, p.data);
}

struct CliResult {
  int rc = 0;
  std::string out;
};

// Runs `weft <args>` with a hang guard; the output holds stdout and stderr.
CliResult run_weft(const std::string& args) {
  CliResult r;
  r.rc = test::run_command("timeout 60 " + test::weft_binary() + " " + args, &r.out);
  return r;
}

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::temp_dir("bad");
    dense_ = read_bytes(fixture_dir("qwen35_dense") + "/model.safetensors");
    ASSERT_GT(dense_.size(), 1000u);
    ids_ = dir_ + "/ids.txt";
    write_bytes(ids_, "1 2 3 4 5\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A fresh model directory with qwen35_dense's config and the given weight file.
  std::string model_with(const std::string& weights, const std::string& fixture = "qwen35_dense") {
    const std::string d = dir_ + "/m" + std::to_string(counter_++);
    fs::create_directories(d);
    fs::copy_file(fixture_dir(fixture) + "/config.json", d + "/config.json");
    fs::copy_file(fixture_dir(fixture) + "/generation_config.json", d + "/generation_config.json");
    write_bytes(d + "/model.safetensors", weights);
    return d;
  }

  std::string weights_path(const std::string& bytes) {
    const std::string p = dir_ + "/w" + std::to_string(counter_++) + ".safetensors";
    write_bytes(p, bytes);
    return p;
  }

  // Library: SafetensorsFile::open fails and its message names the problem.
  void expect_open_fails(const std::string& what, const std::string& bytes, const std::string& needle) {
    auto f = SafetensorsFile::open(weights_path(bytes));
    ASSERT_FALSE(f.ok()) << what << ": opened a hostile file";
    EXPECT_NE(f.status().message().find(needle), std::string::npos)
        << what << ": message '" << f.status().message() << "' lacks '" << needle << "'";
  }

  // Library: Model::load of a directory fails naming the problem.
  void expect_load_fails(const std::string& what, const std::string& model_dir, const std::string& needle) {
    auto m = Model::load(model_dir);
    ASSERT_FALSE(m.ok()) << what << ": loaded";
    EXPECT_NE(m.status().message().find(needle), std::string::npos)
        << what << ": message '" << m.status().message() << "' lacks '" << needle << "'";
  }

  // Binary: `weft logits` on the directory exits with `rc` and prints `needle`.
  void expect_cli_fails(const std::string& what, const std::string& args, int rc, const std::string& needle) {
    CliResult r = run_weft(args);
    EXPECT_EQ(r.rc, rc) << what << ": `weft " << args << "` exit " << r.rc << ", output:\n" << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos)
        << what << ": output lacks '" << needle << "':\n" << r.out;
  }
  void expect_logits_fails(const std::string& what, const std::string& model_dir, const std::string& needle) {
    expect_cli_fails(what, "logits -m " + model_dir + " --ids-file " + ids_ + " -o " + dir_ + "/out.safetensors", 1,
                     needle);
  }

  // Both ways: the file alone, then as a model directory through the binary.
  void expect_weights_rejected(const std::string& what, const std::string& bytes, const std::string& needle) {
    expect_open_fails(what, bytes, needle);
    expect_logits_fails(what, model_with(bytes), needle);
  }

  std::string dir_, dense_, ids_;
  int counter_ = 0;
};

// ---- model directory and config.json ----

TEST_F(BadInputTest, MissingModelDir) {
  expect_load_fails("missing dir", dir_ + "/nope", "does not exist");
  expect_logits_fails("missing dir", dir_ + "/nope", "does not exist");
  expect_cli_fails("info, missing dir", "info -m " + dir_ + "/nope", 1, "does not exist");
  expect_cli_fails("generate, missing dir", "generate -m " + dir_ + "/nope --ids-file " + ids_ + " -n 2", 1,
                   "does not exist");
}

// A -m that names a file which is not a GGUF (a text file, a safetensors file given instead of its
// directory) says so, rather than that nothing exists there.
TEST_F(BadInputTest, ModelPathThatIsAFileButNotGguf) {
  const std::string f = dir_ + "/notes.txt";
  std::ofstream(f) << "not a model\n";
  expect_load_fails("a plain file", f, "neither a model directory nor a GGUF file");
  expect_cli_fails("info, a plain file", "info -m " + f, 1, "neither a model directory nor a GGUF file");
}

TEST_F(BadInputTest, DirWithoutConfig) {
  fs::create_directories(dir_ + "/empty");
  expect_load_fails("no config.json", dir_ + "/empty", "config.json");
  expect_logits_fails("no config.json", dir_ + "/empty", "config.json");
}

TEST_F(BadInputTest, MalformedConfig) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{ \"model_type\": \"qwen3_5_text\", ", "not valid JSON"},
      {"", "not valid JSON"},
      {"[1, 2, 3]", "not a JSON object"},
      {"{\"model_type\": \"gpt2\", \"vocab_size\": 256}", "unknown architecture"},
      {"{\"model_type\": 5}", "model_type"},
      {"{\"model_type\": [\"qwen3\"]}", "model_type"},
      {"{\"text_config\": 3}", "text_config"},
      {"{\"model_type\": \"qwen3\", \"vocab_size\": \"256\"}", "vocab_size"},
      {"{\"model_type\": \"qwen3\", \"vocab_size\": -3}", "vocab_size"},
  };
  for (const auto& [text, needle] : cases) {
    const std::string d = model_with(dense_);
    write_bytes(d + "/config.json", text);
    expect_load_fails("config " + text, d, needle);
    expect_logits_fails("config " + text, d, needle);
  }
}

TEST_F(BadInputTest, ConfigFieldsOfTheWrongType) {
  // Keys that exist with the wrong JSON type must be reported, not thrown through main().
  const std::vector<std::pair<std::string, json>> edits = {
      {"rope_parameters", json{{"rope_type", 7}}},
      {"hidden_size", json("64")},
      {"layer_types", json{1, 2, 3, 4}},
      {"eos_token_id", json("x")},
      {"bos_token_id", json::array()},
      {"mlp_only_layers", json("all")},
      {"num_hidden_layers", json(1e300)},
  };
  json base = json::parse(read_bytes(fixture_dir("qwen35_dense") + "/config.json"));
  for (const auto& [key, value] : edits) {
    json c = base;
    c[key] = value;
    const std::string d = model_with(dense_);
    write_bytes(d + "/config.json", c.dump());
    auto m = Model::load(d);  // may load (ignored field) or fail, must not throw
    CliResult r = run_weft("logits -m " + d + " --ids-file " + ids_ + " -o " + dir_ + "/out.safetensors");
    EXPECT_TRUE(r.rc == 0 || r.rc == 1) << "config " << key << " = " << value.dump() << ": exit " << r.rc << "\n"
                                        << r.out;
    EXPECT_EQ(r.rc == 0, m.ok()) << key << ": library and binary disagree: " << r.out;
  }
}

TEST_F(BadInputTest, UnknownArchitecture) {
  json c = json::parse(read_bytes(fixture_dir("qwen35_dense") + "/config.json"));
  c["model_type"] = "gpt2";
  const std::string d = model_with(dense_);
  write_bytes(d + "/config.json", c.dump());
  expect_load_fails("gpt2", d, "unknown architecture (model_type 'gpt2')");
  expect_logits_fails("gpt2", d, "unknown architecture");
  expect_cli_fails("info gpt2", "info -m " + d, 1, "unknown architecture");
}

TEST_F(BadInputTest, MissingSafetensors) {
  const std::string d = model_with(dense_);
  fs::remove(d + "/model.safetensors");
  expect_load_fails("no weights", d, "no model.safetensors");
  expect_logits_fails("no weights", d, "no model.safetensors");
  fs::create_directories(d + "/model.safetensors");  // a directory where the file should be
  expect_load_fails("weights is a dir", d, "not a regular file");
  expect_logits_fails("weights is a dir", d, "not a regular file");
}

// ---- the safetensors container ----

TEST_F(BadInputTest, Truncated) {
  const Parts p = split(dense_);
  const size_t header_end = 8 + p.header.dump().size();  // within the (padded) header
  expect_weights_rejected("empty file", "", "too small");
  expect_weights_rejected("cut inside the length", dense_.substr(0, 3), "too small");
  expect_weights_rejected("cut after the length", dense_.substr(0, 8), "exceeds the file");
  expect_weights_rejected("cut inside the header", dense_.substr(0, header_end / 2), "exceeds the file");
  expect_weights_rejected("cut at the header end", dense_.substr(0, header_end - 1), "exceeds the file");
  expect_weights_rejected("cut inside the data", dense_.substr(0, dense_.size() / 2), "beyond the data region");
  expect_weights_rejected("one byte short", dense_.substr(0, dense_.size() - 1), "beyond the data region");
}

TEST_F(BadInputTest, HeaderLengthLies) {
  const std::string rest = dense_.substr(8);
  expect_weights_rejected("length = file + 1", le64(dense_.size()) + rest, "exceeds the file");
  expect_weights_rejected("length 2^63", le64(1ull << 63) + rest, "exceeds the file");
  expect_weights_rejected("length 2^64-1", le64(~0ull) + rest, "exceeds the file");
  expect_weights_rejected("length 2^64-8", le64(~0ull - 7) + rest, "exceeds the file");
  const Parts p = split(dense_);
  expect_weights_rejected("length too short", le64(p.header.dump().size() - 10) + rest, "not a valid JSON");
}

TEST_F(BadInputTest, BadHeaderJson) {
  const Parts p = split(dense_);
  expect_weights_rejected("not JSON", assemble("this is certainly not json....", p.data), "not a valid JSON object");
  expect_weights_rejected("JSON array", assemble("[1, 2, 3]", p.data), "not a valid JSON object");
  expect_weights_rejected("deep nesting", assemble(std::string(100000, '['), p.data), "not a valid JSON object");
  expect_weights_rejected("binary header", assemble(std::string("\0\xff\x01\x80", 4), p.data),
                          "not a valid JSON object");
  auto edited = [&](const std::function<void(json&)>& edit) {
    Parts q = p;
    edit(q.header);
    return assemble(q);
  };
  const std::string t = "model.norm.weight";
  expect_weights_rejected("entry not object", edited([&](json& h) { h[t] = 5; }), "entry is not an object");
  expect_weights_rejected("no data_offsets", edited([&](json& h) { h[t].erase("data_offsets"); }), "needs dtype");
  expect_weights_rejected("3 offsets", edited([&](json& h) { h[t]["data_offsets"] = {1, 2, 3}; }), "needs dtype");
  expect_weights_rejected("shape not array", edited([&](json& h) { h[t]["shape"] = 64; }), "needs dtype");
  expect_weights_rejected("dtype not string", edited([&](json& h) { h[t]["dtype"] = 16; }), "needs dtype");
  expect_weights_rejected("unknown dtype", edited([&](json& h) { h[t]["dtype"] = "Q9_K"; }), "unsupported dtype Q9_K");
  expect_weights_rejected("negative dim", edited([&](json& h) { h[t]["shape"] = {-64}; }), "negative");
  expect_weights_rejected("float dim", edited([&](json& h) { h[t]["shape"] = {64.0}; }), "non-integer");
  expect_weights_rejected("float offsets", edited([&](json& h) { h[t]["data_offsets"] = {0.0, 128.0}; }),
                          "non-negative integers");
  expect_weights_rejected("negative offset", edited([&](json& h) { h[t]["data_offsets"] = {-128, 0}; }),
                          "non-negative integers");
  expect_weights_rejected("metadata not object", edited([&](json& h) { h["__metadata__"] = "pt"; }),
                          "__metadata__");
}

TEST_F(BadInputTest, OffsetsThatLie) {
  const Parts p = split(dense_);
  const uint64_t D = p.data.size();
  auto edited = [&](const std::function<void(json&)>& edit) {
    Parts q = p;
    edit(q.header);
    return assemble(q);
  };
  const std::string t = "model.norm.weight";  // bf16 [64] = 128 bytes
  expect_weights_rejected("beyond data", edited([&](json& h) { h[t]["data_offsets"] = {D, D + 128}; }),
                          "beyond the data region");
  expect_weights_rejected("end 2^64-1", edited([&](json& h) { h[t]["data_offsets"] = {~0ull - 127, ~0ull}; }),
                          "beyond the data region");
  expect_weights_rejected("begin > end", edited([&](json& h) { h[t]["data_offsets"] = {256, 128}; }), "begin > end");
  expect_weights_rejected("byte count", edited([&](json& h) { h[t]["shape"] = {65}; }), "expected 130");
  expect_weights_rejected("byte count, wrong dtype", edited([&](json& h) { h[t]["dtype"] = "F32"; }), "expected 256");
  expect_weights_rejected("absurd shape", edited([&](json& h) { h[t]["shape"] = {1ull << 40, 1ull << 40}; }),
                          "absurd shape");
  expect_weights_rejected("absurd dim", edited([&](json& h) { h[t]["shape"] = {1ull << 41}; }), "absurd shape");
  expect_weights_rejected("many dims", edited([&](json& h) {
                            h[t]["shape"] = json::array();
                            for (int i = 0; i < 70; ++i) h[t]["shape"].push_back(2);
                          }),
                          "absurd shape");
  // Two tensors on the same bytes, same shape and dtype (each claim alone is consistent).
  expect_weights_rejected("overlap", edited([&](json& h) {
                            h["model.layers.1.input_layernorm.weight"]["data_offsets"] =
                                h["model.layers.0.post_attention_layernorm.weight"]["data_offsets"];
                          }),
                          "overlap");
  expect_weights_rejected("partial overlap", edited([&](json& h) {
                            auto off = h[t]["data_offsets"];
                            h[t]["data_offsets"] = {off[0].get<uint64_t>() - 64, off[1].get<uint64_t>() - 64};
                          }),
                          "overlap");
}

// ---- a container that is valid, but whose tensors disagree with the config ----

TEST_F(BadInputTest, TensorsThatDisagreeWithConfig) {
  const Parts p = split(dense_);
  auto edited = [&](const std::function<void(Parts&)>& edit) {
    Parts q = p;
    edit(q);
    return assemble(q);
  };
  const std::string q = "model.layers.3.self_attn.q_proj.weight";  // bf16 [256, 64]
  // Same byte count, consistent offsets, wrong shape.
  std::string w = edited([&](Parts& x) { x.header[q]["shape"] = {128, 128}; });
  ASSERT_TRUE(SafetensorsFile::open(weights_path(w)).ok());
  expect_load_fails("q_proj shape", model_with(w), "'" + q + "' has shape [128, 128], config implies [256, 64]");
  expect_logits_fails("q_proj shape", model_with(w), "config implies [256, 64]");
  w = edited([&](Parts& x) { x.header[q]["shape"] = {256, 64, 1}; });
  expect_logits_fails("q_proj rank", model_with(w), "config implies [256, 64]");
  // Unsupported dtype for a matrix: I32 [256, 32] has the same byte count.
  w = edited([&](Parts& x) { x.header[q]["dtype"] = "I32"; x.header[q]["shape"] = {256, 32}; });
  ASSERT_TRUE(SafetensorsFile::open(weights_path(w)).ok());
  expect_load_fails("q_proj i32", model_with(w), "dtype i32");
  expect_logits_fails("q_proj i32", model_with(w), "dtype i32");
  // Unsupported dtype for a vector (the norm, copied to f32 at load): I32 [64] in new bytes.
  w = edited([&](Parts& x) {
    const uint64_t D = x.data.size();
    x.data.append(256, '\0');
    x.header["model.norm.weight"] = {{"dtype", "I32"}, {"shape", {64}}, {"data_offsets", {D, D + 256}}};
  });
  ASSERT_TRUE(SafetensorsFile::open(weights_path(w)).ok());
  expect_load_fails("norm i32", model_with(w), "unsupported dtype i32");
  // F64 for a matrix with a consistent byte count.
  w = edited([&](Parts& x) { x.header[q]["dtype"] = "F64"; x.header[q]["shape"] = {256, 16}; });
  expect_load_fails("q_proj f64", model_with(w), "dtype f64");
  // A tensor the config needs is absent.
  w = edited([&](Parts& x) { x.header.erase("model.norm.weight"); });
  expect_load_fails("missing norm", model_with(w), "missing tensor 'model.norm.weight'");
  expect_logits_fails("missing norm", model_with(w), "missing tensor 'model.norm.weight'");
  w = edited([&](Parts& x) { x.header.erase("lm_head.weight"); });
  expect_logits_fails("missing lm_head", model_with(w), "lm_head.weight");
}

// ---- sharded checkpoints ----

TEST_F(BadInputTest, ShardedIndex) {
  const std::string src = fixture_dir("qwen35_vl_tied_sharded");
  auto copy = [&]() {
    const std::string d = dir_ + "/s" + std::to_string(counter_++);
    fs::copy(src, d);
    return d;
  };
  const json index = json::parse(read_bytes(src + "/model.safetensors.index.json"));
  ASSERT_TRUE(index["weight_map"].is_object() && !index["weight_map"].empty());
  const std::string some_tensor = index["weight_map"].begin().key();
  const std::string some_shard = index["weight_map"].begin()->get<std::string>();
  auto with_index = [&](const json& idx) {
    const std::string d = copy();
    write_bytes(d + "/model.safetensors.index.json", idx.dump());
    return d;
  };
  {
    json idx = index;
    idx["weight_map"][some_tensor] = "model-00003-of-00002.safetensors";
    const std::string d = with_index(idx);
    expect_load_fails("missing shard", d, "model-00003-of-00002.safetensors");
    expect_logits_fails("missing shard", d, "model-00003-of-00002.safetensors");
  }
  {
    json idx = index;
    idx["weight_map"]["model.language_model.not_a_tensor"] = some_shard;
    const std::string d = with_index(idx);
    expect_load_fails("tensor not in shard", d, "'model.language_model.not_a_tensor'");
    expect_logits_fails("tensor not in shard", d, "does not hold it");
  }
  {
    const std::string d = copy();
    fs::remove(d + "/" + some_shard);
    expect_logits_fails("shard file deleted", d, some_shard);
  }
  {
    const std::string d = copy();
    fs::resize_file(d + "/" + some_shard, fs::file_size(d + "/" + some_shard) / 2);
    expect_logits_fails("shard truncated", d, "beyond the data region");
  }
  for (const json& bad_name : {json("../config.json"), json(""), json("."), json(".."), json(7)}) {
    json idx = index;
    idx["weight_map"][some_tensor] = bad_name;
    expect_logits_fails("shard name " + bad_name.dump(), with_index(idx), "");
  }
  {  // the same tensors in two shards
    const std::string d = model_with(dense_);
    fs::copy_file(d + "/model.safetensors", d + "/a.safetensors");
    fs::rename(d + "/model.safetensors", d + "/b.safetensors");
    json idx = {{"weight_map", {{"model.norm.weight", "a.safetensors"}, {"lm_head.weight", "b.safetensors"}}}};
    write_bytes(d + "/model.safetensors.index.json", idx.dump());
    expect_load_fails("tensor in two shards", d, "appears in more than one shard");
    expect_logits_fails("tensor in two shards", d, "more than one shard");
  }
  {
    json idx = index;
    idx.erase("weight_map");
    expect_logits_fails("no weight_map", with_index(idx), "no weight_map");
  }
  {
    const std::string d = copy();
    write_bytes(d + "/model.safetensors.index.json", "{\"weight_map\": ");
    expect_logits_fails("index not JSON", d, "not valid JSON");
  }
}

// ---- token ids ----

TEST_F(BadInputTest, TokenIds) {
  const std::string m = fixture_dir("qwen35_dense");  // vocab 256
  auto logits_with_ids = [&](const std::string& what, const std::string& text, const std::string& needle) {
    const std::string f = dir_ + "/ids" + std::to_string(counter_++) + ".txt";
    write_bytes(f, text);
    expect_cli_fails(what, "logits -m " + m + " --ids-file " + f + " -o " + dir_ + "/out.safetensors", 1, needle);
    expect_cli_fails(what + " (generate)", "generate -m " + m + " --ids-file " + f + " -n 3", 1, needle);
  };
  logits_with_ids("id = vocab", "1 2 256 3", "token id 256 at index 2 is outside the vocabulary [0, 256)");
  logits_with_ids("id = -1", "1 -1 3", "token id -1 is out of range");
  logits_with_ids("non-number", "12 abc", "'abc' is not a token id");
  logits_with_ids("hex", "0x10", "is not a token id");
  logits_with_ids("float", "1.5", "is not a token id");
  logits_with_ids("trailing junk", "12abc", "is not a token id");
  logits_with_ids("huge", "99999999999999999999999", "is not a token id");
  logits_with_ids("2^32", "4294967296", "out of range");
  logits_with_ids("2^31", "2147483648", "out of range");
  logits_with_ids("2^31-1", "2147483647", "outside the vocabulary");
  logits_with_ids("lone sign", "1 - 2", "is not a token id");
  logits_with_ids("empty", "", "no token ids");
  logits_with_ids("whitespace only", " \n\t, ,\n", "no token ids");
  logits_with_ids("binary", std::string("\0\x01\xff", 3), "is not a token id");
  expect_cli_fails("ids file missing", "logits -m " + m + " --ids-file " + dir_ + "/none.txt -o " + dir_ + "/o",
                   1, "cannot open");
  expect_cli_fails("ids file is a dir", "logits -m " + m + " --ids-file " + dir_ + " -o " + dir_ + "/o", 1, "");
  // Library: the session refuses ids outside the vocabulary.
  auto model = Model::load(m);
  ASSERT_TRUE(model.ok()) << model.status().message();
  SessionOptions so;
  so.threads = 1;
  Session session(*model.value(), so);
  std::vector<float> logits(256);
  for (int32_t bad : {256, -1, 1 << 30}) {
    Status s = session.feed(&bad, 1, nullptr, logits.data());
    ASSERT_FALSE(s.ok()) << "fed id " << bad;
    EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos) << s.message();
  }
}

TEST_F(BadInputTest, UnwritableOutput) {
  const std::string m = fixture_dir("qwen35_dense");
  expect_cli_fails("out in missing dir", "logits -m " + m + " --ids-file " + ids_ + " -o " + dir_ + "/no/such/o", 1,
                   "cannot create");
}

// ---- flags ----

TEST_F(BadInputTest, Flags) {
  const std::string m = fixture_dir("qwen35_dense");
  const std::string logits = "logits -m " + m + " --ids-file " + ids_ + " -o " + dir_ + "/out.safetensors";
  const std::string generate = "generate -m " + m + " --ids-file " + ids_ + " -n 2";
  expect_cli_fails("logits unknown flag", logits + " --frobnicate", 2, "frobnicate");
  expect_cli_fails("generate unknown flag", generate + " --frobnicate 3", 2, "frobnicate");
  expect_cli_fails("info unknown flag", "info -m " + m + " --frobnicate", 2, "frobnicate");
  expect_cli_fails("unknown command", "frobnicate", 2, "unknown command");
  expect_cli_fails("no command", "", 2, "usage");
  expect_cli_fails("logits without --ids-file", "logits -m " + m + " -o " + dir_ + "/o", 2, "ids-file");
  expect_cli_fails("logits without -o", "logits -m " + m + " --ids-file " + ids_, 2, "out");
  expect_cli_fails("batch 0", logits + " --batch 0", 2, "batch");
  expect_cli_fails("batch -3", logits + " --batch -3", 2, "batch");
  expect_cli_fails("n negative", generate.substr(0, generate.size() - 5) + " -n -5", 2, "n-tokens");
  expect_cli_fails("top-p 2", generate + " --top-p 2", 2, "top-p");
  // Several inputs may be mixed (one batch), but a text prompt still needs a tokenizer.
  expect_cli_fails("ids and prompt without tokenizer", generate + " --prompt hi", 1, "tokenizer.json");
  expect_cli_fails("prompt without tokenizer", "generate -m " + m + " --prompt hi -n 2", 1, "tokenizer.json");
  expect_cli_fails("info bad ctx", "info -m " + m + " --ctx 12,abc", 1, "abc");
  expect_cli_fails("info ctx 0", "info -m " + m + " --ctx 0", 1, "positive");
  for (const std::string& n : {"100000", "-1", "abc"}) {  // 100000 used to abort spawning threads
    expect_cli_fails("logits --threads " + n, logits + " --threads " + n, 2, "threads");
    expect_cli_fails("generate --threads " + n, generate + " --threads " + n, 2, "threads");
  }
  for (const std::string& flag : {"--kv", "--kv-k", "--kv-v", "-ctk", "-ctv"}) {
    expect_cli_fails("logits " + flag + " q3_k", logits + " " + flag + " q3_k", 1, "unknown KV cache type 'q3_k'");
    expect_cli_fails("generate " + flag + " q3_k", generate + " " + flag + " q3_k", 1, "unknown KV cache type");
  }
  // A quantized cache needs head_dim % 32 == 0; llama_f32 has head_dim 16.
  expect_cli_fails("q8_0 with head_dim 16",
                   "logits -m " + fixture_dir("llama_f32") + " --ids-file " + ids_ + " -o " + dir_ + "/o --kv q8_0", 1,
                   "head_dim");
}

// ---- misaligned but valid: the data region need not be aligned to the element size ----

TEST_F(BadInputTest, MisalignedDataRegionGivesTheSameLogits) {
  const std::string src = read_bytes(fixture_dir("llama_f32") + "/model.safetensors");  // f32 weights
  const Parts p = split(src);
  std::string text = p.header.dump();
  while ((text.size() + 8) % 4 != 1) text.push_back(' ');  // data starts 1 byte past 4-alignment
  const std::string aligned_dir = model_with(assemble(p), "llama_f32");
  const std::string odd_dir = model_with(assemble(text, p.data), "llama_f32");
  std::vector<int32_t> ids = {5, 17, 200, 3, 99, 42, 7, 1};
  std::vector<std::vector<float>> out;
  for (const std::string& d : {aligned_dir, odd_dir}) {
    auto model = Model::load(d);
    if (!model.ok()) {  // refusing is acceptable if it says why
      EXPECT_NE(model.status().message().find("align"), std::string::npos) << model.status().message();
      return;
    }
    SessionOptions so;
    so.threads = 2;
    Session s(*model.value(), so);
    const int64_t V = model.value()->config().vocab_size;
    out.emplace_back(size_t(V) * ids.size());
    ASSERT_TRUE(s.feed(ids.data(), int64_t(ids.size()), out.back().data(), nullptr).ok());
  }
  for (size_t i = 0; i < out[0].size(); ++i)
    ASSERT_EQ(std::memcmp(&out[0][i], &out[1][i], 4), 0) << "first mismatch at " << i << ": " << out[0][i]
                                                         << " vs " << out[1][i];
}

// ---- fuzz: random corruptions never crash; what loads must run ----

// Opens and loads `bytes` as qwen35_dense's weights; a successful load must run a token.
void open_load_run(const std::string& path, const std::string& model_dir, const std::string& what) {
  auto f = SafetensorsFile::open(path);
  if (f.ok()) {  // touch every tensor's first and last byte: views must lie inside the map
    unsigned sum = 0;
    for (const auto& [name, view] : f->tensors()) {
      const auto* bytes = static_cast<const uint8_t*>(view.data);
      if (view.nbytes) sum += bytes[0] + bytes[view.nbytes - 1];
    }
    (void)sum;
  }
  auto model = Model::load(model_dir);
  if (!model.ok()) {
    EXPECT_FALSE(model.status().message().empty()) << what;
    return;
  }
  SessionOptions so;
  so.threads = 1;
  Session s(*model.value(), so);
  std::vector<float> logits(size_t(model.value()->config().vocab_size));
  int32_t id = 0;
  EXPECT_TRUE(s.feed(&id, 1, nullptr, logits.data()).ok()) << what;
}

TEST_F(BadInputTest, FuzzHeaderBytesAndTruncation) {
  const Parts p = split(dense_);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | uint8_t(dense_[size_t(i)]);
  const size_t header_end = 8 + header_len;
  const std::string d = model_with(dense_);
  const std::string path = d + "/model.safetensors";
  std::mt19937_64 rng(20240611);
  int loaded = 0, failed = 0;
  for (int iter = 0; iter < 300; ++iter) {
    std::string bytes = dense_;
    const size_t pos = size_t(rng() % header_end);
    if (iter % 2 == 0 || bytes[pos] < '0' || bytes[pos] > '9') {
      bytes[pos] = char(uint8_t(rng()));
    } else {  // digit -> another digit: shapes and offsets that stay well-formed JSON
      bytes[pos] = char('0' + rng() % 10);
    }
    write_bytes(path, bytes);
    open_load_run(path, d, "corrupt byte " + std::to_string(pos) + " (iteration " + std::to_string(iter) + ")");
    (Model::load(d).ok() ? loaded : failed) += 1;
    if (HasFatalFailure()) return;
  }
  for (int iter = 0; iter < 100; ++iter) {
    const size_t len = size_t(rng() % dense_.size());
    write_bytes(path, dense_.substr(0, len));
    open_load_run(path, d, "truncated to " + std::to_string(len));
    EXPECT_FALSE(Model::load(d).ok()) << "a truncated file loaded: " << len << " bytes";
  }
  std::printf("[ fuzz ] 300 corruptions: %d loaded, %d refused\n", loaded, failed);
}

// Found by config_fuzz: RoPE numbers no float or integer holds are refused with a message before
// any cast (they were UB: a 1e124 original_max_position_embeddings cast to int64).
TEST(BadConfig, RopeNumbersOutOfRangeAreRefused) {
  const json base = json::parse(R"({"model_type": "llama", "vocab_size": 128, "hidden_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}})");
  ASSERT_TRUE(parse_model_config(base).ok());
  struct Case {
    const char* key;
    json value;
    const char* message;
  };
  const Case cases[] = {{"original_max_position_embeddings", json(8.9e123), "original_max_position_embeddings"},
                        {"original_max_position_embeddings", json(0), "original_max_position_embeddings"},
                        {"original_max_position_embeddings", json(-5), "original_max_position_embeddings"},
                        {"factor", json(-1), "factor"},
                        {"factor", json(1e300), "factor"},
                        {"low_freq_factor", json(4.0), "low_freq_factor"},  // equal to high: a 0/0 in forward()
                        {"high_freq_factor", json(0.5), "low_freq_factor"},
                        {"rope_theta", json(1e300), "rope_theta"},
                        {"rope_theta", json(-2), "rope_theta"}};
  for (const Case& k : cases) {
    json c = base;
    c["rope_scaling"][k.key] = k.value;
    auto r = parse_model_config(c);
    ASSERT_FALSE(r.ok()) << k.key << "=" << k.value.dump();
    EXPECT_NE(r.status().message().find(k.message), std::string::npos) << r.status().message();
  }
}

// Hostile values in config.json fields: refused, or loaded and then able to run a token.
TEST_F(BadInputTest, FuzzConfigValues) {
  const json base = json::parse(read_bytes(fixture_dir("qwen35_dense") + "/config.json"));
  std::vector<std::string> keys;
  for (auto it = base.begin(); it != base.end(); ++it) keys.push_back(it.key());
  const std::vector<std::string> rope_keys = {"rope_theta", "partial_rotary_factor", "rope_type", "factor"};
  const std::vector<json> values = {json(0),   json(1),     json(2),       json(-1),   json(3),
                                    json(7),   json(64),    json(1 << 30), json(1e300), json(0.5),
                                    json(1e-30), json(-0.0), json("x"),    json(nullptr), json::array(),
                                    json::object(), json(true), json("llama3"), json(~0ull), json(1ll << 62)};
  const std::string d = model_with(dense_);
  std::mt19937_64 rng(99);
  int loaded = 0;
  for (int iter = 0; iter < 300; ++iter) {
    json c = base;
    std::string what;
    for (int k = 0; k < 1 + int(rng() % 2); ++k) {
      const json& v = values[rng() % values.size()];
      if (rng() % 4 == 0) {
        const std::string& key = rope_keys[rng() % rope_keys.size()];
        c["rope_parameters"][key] = v;
        what += " rope_parameters." + key + "=" + v.dump();
      } else {
        const std::string& key = keys[rng() % keys.size()];
        c[key] = v;
        what += " " + key + "=" + v.dump();
      }
    }
    write_bytes(d + "/config.json", c.dump());
    auto model = Model::load(d);
    if (!model.ok()) continue;
    ++loaded;
    SessionOptions so;
    so.threads = 1;
    Session s(*model.value(), so);
    std::vector<float> logits(size_t(model.value()->config().vocab_size));
    const int32_t ids[3] = {0, 1, 2};
    EXPECT_TRUE(s.feed(ids, 3, nullptr, logits.data()).ok()) << what;
    EXPECT_TRUE(s.step(3, logits.data()).ok()) << what;
  }
  std::printf("[ config fuzz ] 300 edits: %d loaded and ran\n", loaded);
}

// The same through the binary, for a handful: exit 0 or 1, never a signal.
TEST_F(BadInputTest, FuzzThroughTheBinary) {
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | uint8_t(dense_[size_t(i)]);
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 25; ++iter) {
    std::string bytes = dense_;
    if (iter % 5 == 4) {
      bytes.resize(size_t(rng() % bytes.size()));
    } else {
      for (int k = 0; k < 3; ++k) bytes[size_t(rng() % (8 + header_len))] = char(uint8_t(rng()));
    }
    const std::string m = model_with(bytes);
    for (const std::string& args : {"logits -m " + m + " --ids-file " + ids_ + " -o " + dir_ + "/o.safetensors",
                                    "info -m " + m}) {
      CliResult r = run_weft(args);
      EXPECT_TRUE(r.rc == 0 || r.rc == 1) << "iteration " << iter << ": `weft " << args << "` exit " << r.rc << "\n"
                                          << r.out;
      if (r.rc == 1) EXPECT_NE(r.out.find("weft: "), std::string::npos) << r.out;
    }
  }
}

// A misspelt WEFT_SIMD must not pass silently as "no cap" (a benchmark of avx2 vs avx512 would
// compare a path with itself): it is named on stderr, and the known values cap the level.
TEST(SimdLevelEnv, UnknownValueIsSaidAndKnownValuesCap) {
  std::string out;
  ASSERT_EQ(test::run_command("WEFT_SIMD=avx3 " + test::weft_binary() + " info", &out), 0) << out;
  EXPECT_NE(out.find("WEFT_SIMD=avx3 is not one of scalar, avx2, avx512"), std::string::npos) << out;
  ASSERT_EQ(test::run_command("WEFT_SIMD=scalar " + test::weft_binary() + " info", &out), 0) << out;
  EXPECT_NE(out.find("cpu: scalar"), std::string::npos) << out;
  EXPECT_EQ(out.find("is not one of"), std::string::npos) << out;
}

// Likewise a misspelt WEFT_MATMUL_STREAMING_TOKENS (an A/B of the matmul's decode/prefill
// boundary would compare a setting with itself): it is named on stderr and the run goes on with
// the path's own boundary; a valid value says nothing.
TEST(MatmulBoundaryEnv, UnknownValueIsSaid) {
  std::string out;
  const std::string run = " " + test::weft_binary() + " generate --prompt Once -n 2";
  ASSERT_EQ(test::run_command("WEFT_MATMUL_STREAMING_TOKENS=lots" + run, &out), 0) << out;
  EXPECT_NE(out.find("WEFT_MATMUL_STREAMING_TOKENS=lots is not a number of tokens in 0..64"), std::string::npos)
      << out;
  ASSERT_EQ(test::run_command("WEFT_MATMUL_STREAMING_TOKENS=65" + run, &out), 0) << out;
  EXPECT_NE(out.find("WEFT_MATMUL_STREAMING_TOKENS=65 is not"), std::string::npos) << out;
  ASSERT_EQ(test::run_command("WEFT_MATMUL_STREAMING_TOKENS=1" + run, &out), 0) << out;
  EXPECT_EQ(out.find("WEFT_MATMUL_STREAMING_TOKENS"), std::string::npos) << out;
}

// The few-token kernel's A/B switch (matmul.h, matmul_few_tokens) likewise, on every SIMD path.
TEST(MatmulBoundaryEnv, UnknownFewTokensValueIsSaid) {
  std::string out;
  const std::string run = " " + test::weft_binary() + " generate --prompt Once -n 2";
  ASSERT_EQ(test::run_command("WEFT_MATMUL_FEW_TOKENS=yes" + run, &out), 0) << out;
  EXPECT_NE(out.find("WEFT_MATMUL_FEW_TOKENS=yes is not 0 or 1"), std::string::npos) << out;
  for (const char* v : {"0", "1"}) {
    ASSERT_EQ(test::run_command(std::string("WEFT_MATMUL_FEW_TOKENS=") + v + run, &out), 0) << out;
    EXPECT_EQ(out.find("WEFT_MATMUL_FEW_TOKENS"), std::string::npos) << out;
  }
}

// The strict f16 decode-kernel switch: an unknown value is named and ignored, the two known ones
// pass silently (the bits are the same either way: attention_f16_prefill_test).
TEST(AttentionF16DecodeEnv, UnknownValueIsSaid) {
  std::string out;
  const std::string run = " " + test::weft_binary() + " generate --prompt Once -n 2";
  ASSERT_EQ(test::run_command("WEFT_ATTN_F16_DECODE=fast" + run, &out), 0) << out;
  EXPECT_NE(out.find("WEFT_ATTN_F16_DECODE=fast is not frozen or tiled"), std::string::npos) << out;
  for (const char* v : {"frozen", "tiled"}) {
    ASSERT_EQ(test::run_command(std::string("WEFT_ATTN_F16_DECODE=") + v + run, &out), 0) << out;
    EXPECT_EQ(out.find("WEFT_ATTN_F16_DECODE"), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace weft
