#!/usr/bin/env python3
"""Regenerates the seed corpora in fuzz/corpus/<target>/ from tests/data and the shipped model.

Seeds are small on purpose (a few KiB): libFuzzer's default max_len follows the largest seed, and
small inputs run fast. Each target gets a few valid files (so mutation starts from inputs that
reach deep into the loader) and a few edge cases the loader must reject or accept cleanly.
Run: python3 fuzz/make_seeds.py (standard library only).
Multi-file targets read one input cut at SEP (kPartSeparator in fuzz/fuzz_util.h).
"""
import json
import os
import struct

SEP = b"\n--8<--\n"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")
FIX = os.path.join(ROOT, "tests", "data", "fixtures")
MODEL = os.path.join(ROOT, "models", "weft-tiny-hybrid")


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def read(path):
    with open(path, "rb") as f:
        return f.read()


DTYPE_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "U8": 1}


def safetensors(tensors, metadata=None, pad_to=8, header_override=None):
    """tensors: [(name, dtype, shape)], data is a counting byte pattern."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = DTYPE_SIZE[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        blobs.append(bytes((off + i) % 251 for i in range(n)))
        off += n
    text = json.dumps(header, separators=(",", ":")).encode() if header_override is None else header_override
    while pad_to and (len(text) + 8) % pad_to:
        text += b" "
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


# ---- safetensors ----
small = [("a.weight", "F32", [2, 3]), ("b.norm", "BF16", [4]), ("c.bias", "F16", [3])]
write("safetensors", "valid_small", safetensors(small, {"format": "pt"}))
write("safetensors", "valid_unaligned", safetensors(small, pad_to=0))  # odd data offset
write("safetensors", "valid_empty_header", safetensors([]))
write("safetensors", "valid_zero_dim", safetensors([("z", "F32", [0, 5]), ("s", "F32", [])]))
write("safetensors", "bad_overlap", safetensors([], header_override=json.dumps(
    {"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
     "y": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode()) + bytes(12))
write("safetensors", "bad_truncated", safetensors(small)[:-5])
write("safetensors", "bad_header_length", struct.pack("<Q", 1 << 40) + b"{}")
# The real header entries of a fixture's smallest tensors (norms), re-packed with their data.
real = read(os.path.join(FIX, "llama_f32", "model.safetensors"))
hlen = struct.unpack("<Q", real[:8])[0]
hdr = json.loads(real[8:8 + hlen])
size = lambda k: hdr[k]["data_offsets"][1] - hdr[k]["data_offsets"][0]
keep = sorted((k for k in hdr if k != "__metadata__"), key=size)[:3]
trimmed, blob = {"__metadata__": {"format": "pt"}}, b""
for k in keep:
    b0, b1 = hdr[k]["data_offsets"]
    trimmed[k] = dict(hdr[k], data_offsets=[len(blob), len(blob) + b1 - b0])
    blob += real[8 + hlen + b0:8 + hlen + b1]
text = json.dumps(trimmed).encode()
write("safetensors", "fixture_llama_trimmed", struct.pack("<Q", len(text)) + text + blob)

# ---- model_files: config.json | index | a.safetensors | b.safetensors ----
a = safetensors([("x.weight", "F32", [2, 2])])
b = safetensors([("y.weight", "BF16", [3])])
index = json.dumps({"metadata": {"total_size": 22},
                    "weight_map": {"x.weight": "a.safetensors", "y.weight": "b.safetensors"}}).encode()
write("model_files", "valid_sharded", SEP.join([b"{}", index, a, b]))
write("model_files", "valid_single", SEP.join([b'{"model_type": "llama"}', b"", a]))
write("model_files", "bad_missing_tensor", SEP.join([b"{}", json.dumps(
    {"weight_map": {"x.weight": "a.safetensors", "w": "a.safetensors"}}).encode(), a, b]))
write("model_files", "bad_duplicate_tensor", SEP.join([b"{}", json.dumps(
    {"weight_map": {"x.weight": "a.safetensors", "y.weight": "b.safetensors"}}).encode(), a, a]))
write("model_files", "bad_shard_name", SEP.join([b"{}", json.dumps(
    {"weight_map": {"x.weight": "../a.safetensors"}}).encode(), a, b]))
write("model_files", "bad_missing_shard", SEP.join([b"{}", json.dumps(
    {"weight_map": {"x.weight": "c.safetensors"}}).encode(), a, b]))

# ---- config: config.json | generation_config.json ----
for name in sorted(os.listdir(FIX)):
    cfg = os.path.join(FIX, name, "config.json")
    if os.path.exists(cfg):
        gen = os.path.join(FIX, name, "generation_config.json")
        write("config", "fixture_" + name, read(cfg) + (SEP + read(gen) if os.path.exists(gen) else b""))
write("config", "shipped_tiny_hybrid",
      read(os.path.join(MODEL, "config.json")) + SEP + read(os.path.join(MODEL, "generation_config.json")))
write("config", "llama3_rope", json.dumps({
    "model_type": "llama", "vocab_size": 128, "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192},
    "eos_token_id": [1, 2]}))
write("config", "qwen3_moe_sparse", json.dumps({
    "model_type": "qwen3_moe", "vocab_size": 128, "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32, "intermediate_size": 96,
    "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
    "decoder_sparse_step": 2, "mlp_only_layers": [0]}))
write("config", "bad_not_object", "[1, 2, 3]")
write("config", "bad_heads", json.dumps({
    "model_type": "qwen3", "vocab_size": 128, "hidden_size": 64, "num_hidden_layers": 1,
    "num_attention_heads": 3, "num_key_value_heads": 2}))

# ---- tokenizer: tokenizer.json | text ----
tok = json.loads(read(os.path.join(MODEL, "tokenizer.json")))
vocab = tok["model"]["vocab"]
byte_tokens = {k: v for k, v in vocab.items() if len(k) == 1}  # the 256 byte-level tokens
kept, merges = dict(byte_tokens), []
for m in tok["model"]["merges"]:
    l, r = m.split(" ") if isinstance(m, str) else m
    if l in kept and r in kept and (l + r) in vocab:
        kept[l + r] = vocab[l + r]
        merges.append(l + " " + r)
    if len(merges) == 40:
        break
added = [{"id": 300 + i, "content": c, "special": True}
         for i, c in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])]
# Renumber densely so vocab_size stays small.
order = sorted(kept, key=lambda k: kept[k])
dense = {k: i for i, k in enumerate(order)}
base = {"version": "1.0", "added_tokens": added, "normalizer": tok["normalizer"],
        "pre_tokenizer": tok["pre_tokenizer"], "post_processor": tok["post_processor"],
        "decoder": tok["decoder"],
        "model": {"type": "BPE", "ignore_merges": False, "vocab": dense, "merges": merges}}
text = b"Hello world, it is 2026!\n<|im_start|>user\n caf\xc3\xa9 \xff\xfe<|im_end|>"
write("tokenizer", "qwen2_trimmed", json.dumps(base, ensure_ascii=False).encode() + SEP + text)
gpt2 = json.loads(json.dumps(base))
gpt2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}
gpt2["model"]["merges"] = [m.split(" ") for m in merges]
gpt2["normalizer"] = None
write("tokenizer", "gpt2_array_merges", json.dumps(gpt2).encode() + SEP + b"  don't stop  \t\n")
llama3 = json.loads(json.dumps(base))
llama3["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = (
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
llama3["model"]["ignore_merges"] = True
write("tokenizer", "llama3_ignore_merges", json.dumps(llama3).encode() + SEP + b"12345 I'LL go")
tok_cfg = json.dumps({"add_bos_token": True, "bos_token": {"content": "<|im_start|>"},
                      "eos_token": "<|im_end|>"}).encode()
gen_cfg = json.dumps({"bos_token_id": 300, "eos_token_id": [301, 302, 99999, -1]}).encode()
write("tokenizer", "qwen2_with_configs",
      json.dumps(base, ensure_ascii=False).encode() + SEP + b"hi" + SEP + tok_cfg + SEP + gen_cfg)
broken = json.loads(json.dumps(base))
del broken["model"]["vocab"][order[0]]
write("tokenizer", "bad_missing_byte", json.dumps(broken).encode())

# ---- ids: token-id files ----
write("ids", "spaces", "1 2 3 4\n5\t6\n")
write("ids", "commas", "151643,1001, 42 ,7\r\n")
write("ids", "max", "2147483647 0 +5")
write("ids", "bad_range", "2147483648")
write("ids", "bad_junk", "1 2 x3 \x00\xff")
write("ids", "bad_sign", "-1 --2")

# ---- compare: A.jsonl | B.jsonl ----
cmp_dir = os.path.join(ROOT, "tests", "data", "compare")
write("compare", "flaky", read(os.path.join(cmp_dir, "flaky_a.jsonl")) + SEP +
      read(os.path.join(cmp_dir, "flaky_b.jsonl")))
write("compare", "disjoint", read(os.path.join(cmp_dir, "disjoint.jsonl")) + SEP +
      read(os.path.join(cmp_dir, "flaky_a.jsonl")))
write("compare", "malformed", read(os.path.join(cmp_dir, "malformed.jsonl")) + SEP +
      read(os.path.join(cmp_dir, "missing_key.jsonl")))
write("compare", "numeric_keys_nulls",
      '{"task": 1, "x": 1.5, "ok": true}\n{"task": 2, "x": null, "ok": false}\n'
      '{"task": 1, "repeat": 3, "x": 2.5, "ok": true}\n' + SEP.decode() +
      '{"task": 1, "x": 1e308, "ok": false}\n{"task": 2, "x": -1e308}\n')
# Found by compare_fuzz: a number beyond double range (nlohmann throws out_of_range).
write("compare", "regress_number_overflow", '{"task": 1, "x": 1.5}\n' + SEP.decode() + '{"task": 1, "x": 2e308}\n')
