// Writes random-weight Hugging Face model directories of real Qwen3.5 / Qwen3-Next geometries.
#include "model/synth.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <unordered_map>

#include "core/thread_pool.h"
#include "kernels/cpu/synth_fill.h"
#include "io/safetensors.h"

namespace weft {

namespace {

namespace fs = std::filesystem;

// Values are generated in fixed chunks (kSynthChunk values), each seeded from (tensor stream,
// chunk index): the bytes depend only on the spec, never on thread count, shard layout or where
// they are generated (host or GPU: kernels/synth_fill_args.h).
constexpr int64_t kChunk = kSynthChunk;

// lm_head std * sqrt(H): logits of std ~3 spread a softmax over a big vocabulary the way a trained
// model's do (a clear top few, a long tail), where std 1 would be nearly flat.
constexpr float kLogitStd = 3.0f;
// Router std * sqrt(H): 3x a plain init, so expert choice is decisive rather than uniform.
constexpr float kRouterGain = 3.0f;
constexpr float kSharedGateGain = 0.1f;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

uint64_t tensor_stream(uint64_t seed, const std::string& name) {
  uint64_t x = seed;
  return splitmix64(&x) ^ fnv1a(name);
}

uint64_t chunk_seed(uint64_t stream, int64_t chunk) {
  uint64_t x = stream + uint64_t(chunk) * 0xD1B54A32D192ED03ull;
  return splitmix64(&x);
}

// Chunk `chunk` of a tensor of n values drawn from `init`, stored from `base`. Normal values are
// Irwin-Hall sums of four 16-bit uniforms (see the recipe), scaled to unit variance here, once.
SynthChunk make_chunk(const SynthInit& init, uint64_t stream, DType dtype, int64_t n, int64_t chunk, void* base) {
  constexpr float kInvStd = 1.0f / 37837.2273f;  // sqrt((65536^2 - 1) / 3)
  SynthChunk c;
  const int64_t begin = chunk * kChunk;
  c.seed = chunk_seed(stream, chunk);
  c.dst = static_cast<uint8_t*>(base) + dtype_bytes(dtype, size_t(begin));
  c.count = std::min(n, begin + kChunk) - begin;
  c.dtype = dtype;
  c.offset = init.a;
  switch (init.kind) {
    case SynthInit::kNormal:
      c.values = SynthValues::kIrwinHall;
      c.scale = init.b * kInvStd;
      break;
    case SynthInit::kUniform:
    case SynthInit::kLogUniform:
      c.values = init.kind == SynthInit::kUniform ? SynthValues::kUniform : SynthValues::kLogUniform;
      c.scale = init.b - init.a;
      break;
  }
  return c;
}

void fill_one_chunk(const SynthInit& init, uint64_t stream, DType dtype, int64_t n, int64_t chunk,
                    void* out) {
  synth_fill_chunk(make_chunk(init, stream, dtype, n, chunk, out));
}

SynthInit normal(float std) { return {SynthInit::kNormal, 0.0f, std}; }
SynthInit uniform(float lo, float hi) { return {SynthInit::kUniform, lo, hi}; }
// (1 + w) RMSNorm weights are stored zero-centred, as Qwen3.5/Next checkpoints store them.
SynthInit norm_offset() { return uniform(-0.1f, 0.1f); }

std::string architecture(const SynthSpec& s) {
  if (s.model_type == "qwen3_next") return "Qwen3NextForCausalLM";
  if (s.model_type == "qwen3_5_text") return "Qwen3_5ForCausalLM";
  return "Qwen3_5MoeForCausalLM";
}

const char* torch_dtype(DType d) {
  switch (d) {
    case DType::kF16: return "float16";
    case DType::kF32: return "float32";
    default: return "bfloat16";
  }
}

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

Status write_text(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return Status::error("cannot create " + path.string());
  f << text;
  f.close();
  if (!f) return Status::error("failed writing " + path.string());
  return Status::ok_status();
}

struct Shard {
  std::vector<size_t> tensors;  // indices into the tensor list
  int64_t bytes = 0;
};

// Greedy packing in file order (as transformers does): a shard closes when the next tensor would
// push it over the limit; a tensor bigger than the limit gets a shard of its own.
std::vector<Shard> plan_shards(const std::vector<SynthTensor>& ts, DType dtype, int64_t max_bytes) {
  std::vector<Shard> shards;
  for (size_t i = 0; i < ts.size(); ++i) {
    const int64_t b = int64_t(dtype_bytes(dtype, size_t(ts[i].numel())));
    if (shards.empty() || (shards.back().bytes + b > max_bytes && !shards.back().tensors.empty())) {
      shards.emplace_back();
    }
    shards.back().tensors.push_back(i);
    shards.back().bytes += b;
  }
  return shards;
}

Status write_all(const SynthSpec& spec, const fs::path& tmp, const SynthWriteOptions& opt) {
  const std::vector<SynthTensor> ts = synth_tensors(spec);
  const std::vector<Shard> shards = plan_shards(ts, spec.dtype, opt.max_shard_bytes);
  ThreadPool pool(opt.threads);
  const auto t0 = std::chrono::steady_clock::now();
  nlohmann::json weight_map = nlohmann::json::object();
  int64_t total_bytes = 0, total_params = 0;

  for (size_t si = 0; si < shards.size(); ++si) {
    const Shard& shard = shards[si];
    const std::string file = shards.size() == 1 ? "model.safetensors" : shard_name(si, shards.size());
    // new[] without value-init: zero-filling gigabytes we overwrite anyway would cost as much as
    // generating them.
    std::unique_ptr<uint8_t[]> buf(new (std::nothrow) uint8_t[size_t(shard.bytes)]);
    if (!buf && shard.bytes > 0) {
      return Status::error("out of memory allocating a " + std::to_string(shard.bytes) + "-byte shard");
    }
    struct Task {
      size_t tensor;
      int64_t chunk;
    };
    std::vector<Task> tasks;
    std::vector<TensorToWrite> to_write;
    std::vector<uint8_t*> ptrs;
    int64_t offset = 0;
    for (size_t ti : shard.tensors) {
      const SynthTensor& t = ts[ti];
      const int64_t n = t.numel();
      for (int64_t c = 0; c < ceil_div(n, kChunk); ++c) tasks.push_back({ptrs.size(), c});
      ptrs.push_back(buf.get() + offset);
      to_write.push_back({t.name, spec.dtype, t.shape, buf.get() + offset});
      offset += int64_t(dtype_bytes(spec.dtype, size_t(n)));
      weight_map[t.name] = file;
      total_params += n;
    }
    pool.parallel_for(int64_t(tasks.size()), [&](int64_t k) {
      const Task& task = tasks[size_t(k)];
      const SynthTensor& t = ts[shard.tensors[task.tensor]];
      fill_one_chunk(t.init, tensor_stream(spec.seed, t.name), spec.dtype, t.numel(), task.chunk,
                     ptrs[task.tensor]);
    });
    WEFT_RETURN_IF_ERROR(
        write_safetensors((tmp / file).string(), to_write, {{"format", "pt"}}).with_context(file));
    total_bytes += shard.bytes;
    if (opt.progress) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "synth: %s  %.2f GB  (%zu tensors, %.1f s elapsed)\n", file.c_str(),
                   double(shard.bytes) / 1e9, shard.tensors.size(), secs);
    }
  }

  if (shards.size() > 1) {
    nlohmann::json index;
    index["metadata"] = {{"total_size", total_bytes}, {"total_parameters", total_params}};
    index["weight_map"] = weight_map;
    WEFT_RETURN_IF_ERROR(write_text(tmp / "model.safetensors.index.json", index.dump(2) + "\n"));
  }
  WEFT_RETURN_IF_ERROR(write_text(tmp / "config.json", synth_config_json(spec).dump(2) + "\n"));
  int64_t bos, eos;
  synth_token_ids(spec, &bos, &eos);
  nlohmann::json gen = {{"bos_token_id", bos}, {"eos_token_id", eos},
                        {"transformers_version", "5.17.0"}};
  return write_text(tmp / "generation_config.json", gen.dump(2) + "\n");
}

}  // namespace

std::vector<SynthTensor> synth_tensors(const SynthSpec& s) {
  const int64_t H = s.hidden_size;
  const float inv_h = 1.0f / std::sqrt(float(H));
  // Residual-writing projections are scaled by 1/sqrt(2L) so the residual stream's variance
  // grows by at most ~2x over the whole stack instead of linearly with depth.
  const float res = 1.0f / std::sqrt(2.0f * float(s.num_hidden_layers));
  std::vector<SynthTensor> out;
  // add: a tensor the model binds as a matrix (ops read it where the weights live); add_host: one
  // Model::load reads on the host (norms, conv1d, A_log, dt_bias, converted to f32 at bind time).
  auto add = [&](std::string name, std::vector<int64_t> shape, SynthInit init) {
    out.push_back({std::move(name), std::move(shape), init, false});
  };
  auto add_host = [&](std::string name, std::vector<int64_t> shape, SynthInit init) {
    out.push_back({std::move(name), std::move(shape), init, true});
  };

  // Untied: unit-variance embeddings (trained ones are O(1) after the first norm anyway). Tied:
  // the same matrix makes the logits, so it takes the lm_head scale or logits would be ~sqrt(H).
  add("model.embed_tokens.weight", {s.vocab_size, H},
      normal(s.tie_word_embeddings ? kLogitStd * inv_h : 1.0f));

  const int64_t nk = s.linear_num_key_heads, nv = s.linear_num_value_heads;
  const int64_t dk = s.linear_key_head_dim, dv = s.linear_value_head_dim;
  const int64_t conv_dim = 2 * nk * dk + nv * dv;
  for (int64_t i = 0; i < s.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add_host(p + "input_layernorm.weight", {H}, norm_offset());
    if (s.is_full_attention(i)) {
      const int64_t nh = s.num_attention_heads, nkv = s.num_key_value_heads, hd = s.head_dim;
      add(p + "self_attn.q_proj.weight", {nh * hd * 2, H}, normal(inv_h));  // per head [q | gate]
      add(p + "self_attn.k_proj.weight", {nkv * hd, H}, normal(inv_h));
      add(p + "self_attn.v_proj.weight", {nkv * hd, H}, normal(inv_h));
      add(p + "self_attn.o_proj.weight", {H, nh * hd}, normal(res / std::sqrt(float(nh * hd))));
      add_host(p + "self_attn.q_norm.weight", {hd}, norm_offset());
      add_host(p + "self_attn.k_norm.weight", {hd}, norm_offset());
    } else {
      if (s.is_qwen3_next()) {
        add(p + "linear_attn.in_proj_qkvz.weight", {2 * nk * dk + 2 * nv * dv, H}, normal(inv_h));
        add(p + "linear_attn.in_proj_ba.weight", {2 * nv, H}, normal(inv_h));
      } else {
        add(p + "linear_attn.in_proj_qkv.weight", {conv_dim, H}, normal(inv_h));
        add(p + "linear_attn.in_proj_z.weight", {nv * dv, H}, normal(inv_h));
        add(p + "linear_attn.in_proj_b.weight", {nv, H}, normal(inv_h));
        add(p + "linear_attn.in_proj_a.weight", {nv, H}, normal(inv_h));
      }
      add_host(p + "linear_attn.conv1d.weight", {conv_dim, 1, s.linear_conv_kernel_dim}, normal(0.5f));
      // Decay rates A in [1, 16] as in the Mamba-2/GDN init: a spread of memory lengths.
      add_host(p + "linear_attn.A_log", {nv}, {SynthInit::kLogUniform, 1.0f, 16.0f});
      add_host(p + "linear_attn.dt_bias", {nv}, uniform(-0.5f, 0.5f));
      // The gated norm multiplies by w directly (not 1 + w), so it is stored around 1.
      add_host(p + "linear_attn.norm.weight", {dv}, uniform(0.9f, 1.1f));
      add(p + "linear_attn.out_proj.weight", {H, nv * dv}, normal(res / std::sqrt(float(nv * dv))));
    }
    add_host(p + "post_attention_layernorm.weight", {H}, norm_offset());
    if (s.is_moe()) {
      const int64_t E = s.num_experts, I = s.moe_intermediate_size;
      const int64_t Is = s.shared_expert_intermediate_size;
      add(p + "mlp.gate.weight", {E, H}, normal(kRouterGain * inv_h));
      add(p + "mlp.experts.gate_up_proj", {E, 2 * I, H}, normal(inv_h));
      add(p + "mlp.experts.down_proj", {E, H, I}, normal(res / std::sqrt(float(I))));
      add(p + "mlp.shared_expert.gate_proj.weight", {Is, H}, normal(inv_h));
      add(p + "mlp.shared_expert.up_proj.weight", {Is, H}, normal(inv_h));
      add(p + "mlp.shared_expert.down_proj.weight", {H, Is}, normal(res / std::sqrt(float(Is))));
      add(p + "mlp.shared_expert_gate.weight", {1, H}, normal(kSharedGateGain * inv_h));
    } else {
      const int64_t I = s.intermediate_size;
      add(p + "mlp.gate_proj.weight", {I, H}, normal(inv_h));
      add(p + "mlp.up_proj.weight", {I, H}, normal(inv_h));
      add(p + "mlp.down_proj.weight", {H, I}, normal(res / std::sqrt(float(I))));
    }
  }
  add_host("model.norm.weight", {H}, norm_offset());
  if (!s.tie_word_embeddings) add("lm_head.weight", {s.vocab_size, H}, normal(kLogitStd * inv_h));
  return out;
}

nlohmann::json synth_config_json(const SynthSpec& s) {
  int64_t bos, eos;
  synth_token_ids(s, &bos, &eos);
  nlohmann::json layer_types = nlohmann::json::array();
  for (int64_t i = 0; i < s.num_hidden_layers; ++i) {
    layer_types.push_back(s.is_full_attention(i) ? "full_attention" : "linear_attention");
  }
  // nlohmann's default object is key-sorted, matching transformers' sort_keys=True output.
  nlohmann::json c = {
      {"architectures", nlohmann::json::array({architecture(s)})},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"bos_token_id", bos},
      {"dtype", torch_dtype(s.dtype)},
      {"eos_token_id", eos},
      {"full_attention_interval", s.full_attention_interval},
      {"head_dim", s.head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", s.hidden_size},
      {"initializer_range", 0.02},
      {"layer_types", layer_types},
      {"linear_conv_kernel_dim", s.linear_conv_kernel_dim},
      {"linear_key_head_dim", s.linear_key_head_dim},
      {"linear_num_key_heads", s.linear_num_key_heads},
      {"linear_num_value_heads", s.linear_num_value_heads},
      {"linear_value_head_dim", s.linear_value_head_dim},
      {"max_position_embeddings", 262144},
      {"model_type", s.model_type},
      {"num_attention_heads", s.num_attention_heads},
      {"num_hidden_layers", s.num_hidden_layers},
      {"num_key_value_heads", s.num_key_value_heads},
      {"rms_norm_eps", 1e-6},
      {"rope_parameters",
       {{"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25}, {"rope_type", "default"}}},
      {"tie_word_embeddings", s.tie_word_embeddings},
      {"transformers_version", "5.17.0"},
      {"use_cache", true},
      {"vocab_size", s.vocab_size},
  };
  if (s.is_moe()) {
    c["moe_intermediate_size"] = s.moe_intermediate_size;
    c["shared_expert_intermediate_size"] = s.shared_expert_intermediate_size;
    c["num_experts"] = s.num_experts;
    c["num_experts_per_tok"] = s.num_experts_per_tok;
    c["norm_topk_prob"] = s.norm_topk_prob;
    c["output_router_logits"] = false;
    c["router_aux_loss_coef"] = 0.001;
  }
  // Qwen3_5MoeTextConfig has no intermediate_size field; the other two classes do.
  if (s.model_type != "qwen3_5_moe_text") c["intermediate_size"] = s.intermediate_size;
  if (s.is_qwen3_next()) {
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = nlohmann::json::array();
  }
  return c;
}

int64_t synth_estimated_bytes(const SynthSpec& spec) {
  int64_t total = 0;
  for (const auto& t : synth_tensors(spec)) total += int64_t(dtype_bytes(spec.dtype, size_t(t.numel())));
  return total;
}

Result<std::unique_ptr<ModelFiles>> synth_in_memory(const SynthSpec& spec, WeightMemory& memory) {
  WEFT_RETURN_IF_ERROR(synth_validate(spec));
  const std::vector<SynthTensor> ts = synth_tensors(spec);
  std::vector<OwnedBytes> blocks;
  std::unordered_map<std::string, TensorView> views;
  // Tensors the model reads on the host stay in host memory whatever `memory` is; they are small
  // (norms, conv1d, A_log, dt_bias: ~1 MB for the 40-layer geometry), so this thread fills them.
  std::vector<SynthChunk> on_host, in_memory;
  for (const SynthTensor& t : ts) {
    const size_t bytes = dtype_bytes(spec.dtype, size_t(t.numel()));
    const bool host = t.host_read && !memory.host_accessible();
    if (host) {
      blocks.push_back(host_bytes(bytes));
      if (!blocks.back())
        return Status::error("out of host memory holding the synthetic model (" + std::to_string(bytes) +
                             " bytes for " + t.name + ")");
    } else {
      auto b = memory.allocate(bytes);
      if (!b.ok())
        return Status::error("holding the synthetic model in " + std::string(memory.name()) + " (" +
                             std::to_string(bytes) + " bytes for " + t.name + "): " + b.status().message());
      blocks.push_back(std::move(b.value()));
    }
    TensorView v;
    v.dtype = spec.dtype;
    v.shape = t.shape;
    v.data = blocks.back().get();
    v.nbytes = bytes;
    views[t.name] = v;
    const uint64_t stream = tensor_stream(spec.seed, t.name);
    for (int64_t c = 0; c < ceil_div(t.numel(), kChunk); ++c)
      (host ? on_host : in_memory).push_back(make_chunk(t.init, stream, spec.dtype, t.numel(), c, blocks.back().get()));
  }
  for (const SynthChunk& c : on_host) synth_fill_chunk(c);
  WEFT_RETURN_IF_ERROR(memory.fill(in_memory).with_context("generating the synthetic model"));
  int64_t bos, eos;
  synth_token_ids(spec, &bos, &eos);
  nlohmann::json gen = {{"bos_token_id", bos}, {"eos_token_id", eos}, {"transformers_version", "5.17.0"}};
  return ModelFiles::in_memory("synthetic " + spec.preset + " (in memory)", synth_config_json(spec), gen,
                               std::move(views), std::move(blocks));
}

Result<std::unique_ptr<ModelFiles>> synth_in_memory(const SynthSpec& spec, int threads) {
  return synth_in_memory(spec, *host_weight_memory(threads));
}

std::vector<SynthChunk> synth_chunks(const SynthInit& init, uint64_t seed, const std::string& name, DType dtype,
                                     int64_t n, void* out) {
  const uint64_t stream = tensor_stream(seed, name);
  std::vector<SynthChunk> chunks;
  for (int64_t c = 0; c < ceil_div(n, kChunk); ++c) chunks.push_back(make_chunk(init, stream, dtype, n, c, out));
  return chunks;
}

void synth_fill(const SynthInit& init, uint64_t seed, const std::string& name, DType dtype,
                int64_t n, void* out, int threads) {
  const uint64_t stream = tensor_stream(seed, name);
  const int64_t chunks = ceil_div(n, kChunk);
  if (threads == 1) {
    for (int64_t c = 0; c < chunks; ++c) fill_one_chunk(init, stream, dtype, n, c, out);
    return;
  }
  ThreadPool pool(threads);
  pool.parallel_for(chunks, [&](int64_t c) { fill_one_chunk(init, stream, dtype, n, c, out); });
}

Status synth_write(const SynthSpec& spec, const std::string& dir_in,
                   const SynthWriteOptions& options) {
  WEFT_RETURN_IF_ERROR(synth_validate(spec));
  if (dir_in.empty()) return Status::error("output directory is empty");
  fs::path dir = fs::path(dir_in).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // "out/" -> "out"
  std::error_code ec;
  const bool exists = fs::exists(dir, ec);
  if (exists) {
    if (!fs::is_directory(dir, ec)) return Status::error(dir.string() + " exists and is not a directory");
    if (!fs::is_empty(dir, ec) && !options.force) {
      return Status::error(dir.string() + " is not empty (use --force to replace it)");
    }
  }
  const fs::path tmp = dir.string() + ".tmp";
  fs::remove_all(tmp, ec);  // leftovers of an interrupted run
  if (!fs::create_directories(tmp, ec) || ec) {
    return Status::error("cannot create " + tmp.string() + ": " + ec.message());
  }
  Status st = write_all(spec, tmp, options);
  if (st.ok() && exists) {
    fs::remove_all(dir, ec);
    if (ec) st = Status::error("cannot remove old " + dir.string() + ": " + ec.message());
  }
  if (st.ok()) {
    fs::rename(tmp, dir, ec);
    if (ec) st = Status::error("cannot rename " + tmp.string() + " to " + dir.string() + ": " + ec.message());
  }
  if (!st.ok()) fs::remove_all(tmp, ec);
  return st;
}

}  // namespace weft
