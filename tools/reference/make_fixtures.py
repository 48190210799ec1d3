#!/usr/bin/env python3
"""Build weft's reference fixtures: tiny random-weight HF models + transformers float32 logits.

Runs on the GPU machine (torch 2.11, transformers 5.17, safetensors, numpy); everything is
computed on the CPU in float32 with fixed seeds, so it is deterministic. See README.md beside
this file for the exact command and tests/data/fixtures/README.md for what each case covers.

    python3 tools/reference/make_fixtures.py --dest /tmp/fixtures --tar $OUT/fixtures.tar
    python3 tools/reference/make_fixtures.py --introspect --out $OUT   # dump configs/keys/sources
"""
import argparse
import copy
import inspect
import json
import os
import re
import shutil
import sys
import tarfile

T_PROMPT = 40
N_GEN = 12
SEED = 20261129
HYB4 = ["linear_attention"] * 3 + ["full_attention"]


def hyb_rope():
    return {"rope_theta": 1e7, "partial_rotary_factor": 0.25, "rope_type": "default"}


# name -> description (builder logic lives in build_case)
CASES = [
    "qwen35_dense",
    "qwen35_moe_hd256",
    "qwen35_moe_experts_f16",
    "qwen35_vl_tied_sharded",
    "qwen3next_moe",
    "qwen3_tied_f16",
    "llama_f32",
]


def make_config(name):
    """Returns (config, model_class, save_dtype_name)."""
    import transformers as T
    if name == "qwen35_dense":
        cfg = T.Qwen3_5TextConfig(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
            linear_value_head_dim=24, linear_conv_kernel_dim=4, layer_types=list(HYB4),
            rope_parameters=hyb_rope(), tie_word_embeddings=False)
        return cfg, T.Qwen3_5ForCausalLM, "bfloat16"
    if name in ("qwen35_moe_hd256", "qwen35_moe_experts_f16"):
        hd256 = name == "qwen35_moe_hd256"
        cfg = T.Qwen3_5MoeTextConfig(
            vocab_size=256, hidden_size=64, num_hidden_layers=5 if hd256 else 4,
            num_attention_heads=16 if hd256 else 4, num_key_value_heads=2,
            head_dim=256 if hd256 else 32,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
            linear_value_head_dim=16 if hd256 else 24, linear_conv_kernel_dim=4,
            layer_types=list(HYB4) + (["linear_attention"] if hd256 else []),
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=48,
            rope_parameters=hyb_rope(), tie_word_embeddings=False)
        return cfg, T.Qwen3_5MoeForCausalLM, "bfloat16" if hd256 else "float16"
    if name == "qwen35_vl_tied_sharded":
        cfg = T.Qwen3_5TextConfig(
            vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
            linear_value_head_dim=24, linear_conv_kernel_dim=4, layer_types=list(HYB4),
            rope_parameters=hyb_rope(), tie_word_embeddings=True)
        return cfg, T.Qwen3_5ForCausalLM, "bfloat16"
    if name == "qwen3next_moe":
        cfg = T.Qwen3NextConfig(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
            linear_value_head_dim=24, linear_conv_kernel_dim=4, layer_types=list(HYB4),
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=48, decoder_sparse_step=1, mlp_only_layers=[1],
            norm_topk_prob=True, rope_parameters=hyb_rope(), tie_word_embeddings=False)
        return cfg, T.Qwen3NextForCausalLM, "bfloat16"
    if name == "qwen3_tied_f16":
        cfg = T.Qwen3Config(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=256,
            rope_parameters={"rope_theta": 1e6, "rope_type": "default"},
            tie_word_embeddings=True)
        return cfg, T.Qwen3ForCausalLM, "float16"
    if name == "llama_f32":
        cfg = T.LlamaConfig(
            vocab_size=257, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
            num_attention_heads=8, num_key_value_heads=2, head_dim=16,
            rope_parameters={"rope_theta": 1e4, "rope_type": "default"},
            tie_word_embeddings=False)
        return cfg, T.LlamaForCausalLM, "float32"
    raise KeyError(name)


def init_weights(model, gen, log):
    """Overwrite every parameter with a 'test with teeth' distribution (rounding comes after).

    Returns the embedding std used. Untied models: unit-variance embeddings. Tied models use
    std 0.25: with unit variance the token's own embedding dominates lm_head(norm(h)) and greedy
    decoding collapses into repeating the fed-back token (seen: 249, 249, 249, ...)."""
    import torch
    embed_std = 0.25 if getattr(model.config, "tie_word_embeddings", False) else 1.0
    norm_params = {}  # param name -> zero_centered?
    for mname, mod in model.named_modules():
        if "RMSNorm" in type(mod).__name__ or "LayerNorm" in type(mod).__name__:
            w = getattr(mod, "weight", None)
            if w is None:
                continue
            pname = (mname + "." if mname else "") + "weight"
            # Zero-centred norms ((1+w), Qwen3.5 / Qwen3-Next) are initialised to zeros by HF,
            # plain-w norms (Llama, Qwen3, the GDN gated norm) to ones.
            norm_params[pname] = bool((w == 0).all())
    counts = {}
    with torch.no_grad():
        for pname, p in model.named_parameters():
            shape = tuple(p.shape)
            if pname in norm_params:
                u = (torch.rand(shape, generator=gen) * 0.6 - 0.3)
                v = u if norm_params[pname] else 1.0 + u
                kind = "norm(1+w)" if norm_params[pname] else "norm(w)"
            elif pname.endswith("A_log"):
                # A in [0.1, 4]: with softplus(a+dt_bias) ~ 0.7 the per-step decay exp(g) spans
                # ~0.06..0.93, so the recurrent state carries information across many tokens.
                v = torch.log(torch.rand(shape, generator=gen) * 3.9 + 0.1)
                kind = "A_log"
            elif pname.endswith("dt_bias"):
                v = torch.rand(shape, generator=gen) - 0.5
                kind = "dt_bias"
            elif "conv1d" in pname:
                v = torch.randn(shape, generator=gen) * 0.5
                kind = "conv1d"
            elif "embed_tokens" in pname:
                v = torch.randn(shape, generator=gen) * embed_std
                kind = "embed"
            elif p.dim() >= 2:
                v = torch.randn(shape, generator=gen) * (1.5 / shape[-1] ** 0.5)
                kind = "matrix"
            else:  # biases (none in these configs) and anything unexpected
                v = torch.randn(shape, generator=gen) * 0.1
                kind = "vector"
            counts[kind] = counts.get(kind, 0) + 1
            p.copy_(v.to(torch.float32))
    log(f"  init: {counts}, embed std {embed_std}")
    return embed_std


def round_weights(model, save_dtype):
    """Make every weight exactly representable in bf16 AND in the save dtype."""
    import torch
    with torch.no_grad():
        for _, p in model.named_parameters():
            q = p.to(torch.bfloat16).to(torch.float32)
            q = q.to(save_dtype).to(torch.float32)
            p.copy_(q)


def run_reference(model, prompt):
    import torch
    with torch.no_grad():
        out = model(input_ids=prompt[None], use_cache=False)
        prompt_logits = out.logits[0].float().clone()
        # greedy continuation with the cache, by hand
        out = model(input_ids=prompt[None], use_cache=True)
        pkv = out.past_key_values
        rows = [out.logits[0, -1].float().clone()]
        gen_ids = []
        for i in range(N_GEN):
            tok = int(torch.argmax(rows[-1]))
            gen_ids.append(tok)
            if i == N_GEN - 1:
                break
            out = model(input_ids=torch.tensor([[tok]]), past_key_values=pkv, use_cache=True)
            pkv = out.past_key_values
            rows.append(out.logits[0, -1].float().clone())
        gen_logits = torch.stack(rows)
        gen_ids = torch.tensor(gen_ids, dtype=torch.int64)
        # cross-checks: the cache-free teacher-forced run over prompt+gen, and model.generate
        full = torch.cat([prompt, gen_ids[:-1]])
        tf = model(input_ids=full[None], use_cache=False).logits[0, len(prompt) - 1:].float()
        nocache_diff = float((tf - gen_logits).abs().max())
        gen_match = None
        try:
            g = model.generate(input_ids=prompt[None], attention_mask=torch.ones_like(prompt[None]),
                               do_sample=False, max_new_tokens=N_GEN, min_new_tokens=N_GEN,
                               pad_token_id=0, eos_token_id=None)
            gen_match = bool((g[0, len(prompt):] == gen_ids).all())
        except Exception as e:  # informative only
            gen_match = f"generate failed: {e!r}"[:200]
    return prompt_logits, gen_ids, gen_logits, nocache_diff, gen_match


def margins_stats(prompt_logits, gen_logits):
    import torch
    allrows = torch.cat([prompt_logits, gen_logits])
    top2 = torch.topk(allrows, 2, dim=-1).values
    m = top2[:, 0] - top2[:, 1]
    return {
        "frac_margin_gt_1e-2": float((m > 1e-2).float().mean()),
        "frac_margin_gt_1e-2_prompt": float((m[: len(prompt_logits)] > 1e-2).float().mean()),
        "frac_margin_gt_1e-2_gen": float((m[len(prompt_logits):] > 1e-2).float().mean()),
        "min_margin": float(m.min()),
        "median_margin": float(m.median()),
        "logit_std": float(prompt_logits.std()),
        "logit_absmax": float(allrows.abs().max()),
    }


def read_st(path):
    from safetensors.torch import load_file
    return load_file(path)


def write_st(path, tensors):
    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, path, metadata={"format": "pt"})


EXPERT_RE = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def check_file_tensors(files, ref_sd, save_dtype, prefix_map, log):
    """Every tensor in the files must equal (exactly) the reference weight it stands for."""
    import torch
    n_ok, n_skip, bad = 0, 0, []
    for f in files:
        for k, v in read_st(f).items():
            kk = k
            for a, b in prefix_map:
                if kk.startswith(a):
                    kk = b + kk[len(a):]
            if kk.startswith("model.visual.") or kk.startswith("mtp."):
                n_skip += 1
                continue
            m = EXPERT_RE.match(kk)
            if kk in ref_sd:
                ref = ref_sd[kk]
            elif m:
                base, j, which = m.group(1), int(m.group(2)), m.group(3)
                if which == "down_proj":
                    ref = ref_sd[base + ".down_proj"][j]
                else:
                    gu = ref_sd[base + ".gate_up_proj"][j]
                    inter = gu.shape[0] // 2
                    # HF forward: gate, up = linear(x, gate_up_proj[e]).chunk(2, dim=-1)
                    ref = gu[:inter] if which == "gate_proj" else gu[inter:]
            else:
                bad.append(f"{k}: no reference tensor")
                continue
            if v.dtype != save_dtype:
                bad.append(f"{k}: dtype {v.dtype} != {save_dtype}")
            if tuple(v.shape) != tuple(ref.shape) or not torch.equal(v.float(), ref.float()):
                bad.append(f"{k}: value/shape mismatch {tuple(v.shape)} vs {tuple(ref.shape)}")
            n_ok += 1
    log(f"  file check: {n_ok} tensors exact, {n_skip} dummies skipped, {len(bad)} problems")
    for b in bad[:20]:
        log("   !! " + b)
    if bad:
        raise SystemExit("file/reference mismatch")


def build_case(name, idx, dest, log):
    import torch
    import transformers as T
    from safetensors.torch import save_file
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    cfg, cls, dtype_name = make_config(name)
    save_dtype = dtypes[dtype_name]
    cfg._attn_implementation = "eager"
    torch.manual_seed(SEED + idx)
    model = cls(cfg).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(SEED * 7 + idx)
    embed_std = init_weights(model, gen, log)
    round_weights(model, save_dtype)
    if cfg.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "not tied"

    pgen = torch.Generator().manual_seed(SEED * 13 + idx)
    prompt = torch.randint(3, cfg.vocab_size, (T_PROMPT,), generator=pgen, dtype=torch.int64)
    prompt_logits, gen_ids, gen_logits, nocache_diff, gen_match = run_reference(model, prompt)
    stats = margins_stats(prompt_logits, gen_logits)
    stats.update({"case": name, "save_dtype": dtype_name, "nocache_vs_cache_max_abs": nocache_diff,
                  "generate_ids_match_manual_loop": gen_match, "T": T_PROMPT, "N": N_GEN,
                  "vocab": cfg.vocab_size, "seed": SEED + idx,
                  "embed_std": embed_std})

    d = os.path.join(dest, name)
    os.makedirs(d, exist_ok=True)
    ref_sd = {k: v.detach().clone() for k, v in model.state_dict().items()}

    tmp = d + ".tmp_save"
    shutil.rmtree(tmp, ignore_errors=True)
    if name != "qwen35_vl_tied_sharded":
        smodel = copy.deepcopy(model).to(save_dtype)
        smodel.config.dtype = save_dtype
        smodel.save_pretrained(tmp, safe_serialization=True)
        for f in os.listdir(tmp):
            shutil.copy(os.path.join(tmp, f), os.path.join(d, f))
        shutil.rmtree(tmp)
        files = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".safetensors") and f != "reference.safetensors"]
        assert files == [os.path.join(d, "model.safetensors")], files
        st = read_st(files[0])
        keys_before = len(st)
        if name == "qwen35_moe_hd256":
            # keep the fused layout (what the model holds): experts.gate_up_proj [E,2I,H],
            # experts.down_proj [E,H,I]; transformers 5.17's save_pretrained splits it per expert.
            st = {k: v for k, v in st.items() if not EXPERT_RE.match(k)}
            for k, v in ref_sd.items():
                if k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj"):
                    st[k] = v.to(save_dtype)
            write_st(files[0], st)
        stats["weight_keys"] = len(st)
        stats["weight_keys_as_saved_by_transformers"] = keys_before
        check_file_tensors(files, ref_sd, save_dtype, [], log)
    else:
        # Multimodal-wrapper checkpoint of the dense text model, sharded, tied, with extras.
        vcfg = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                    in_channels=3, patch_size=16, spatial_merge_size=2, temporal_patch_size=2)
        tcfg = cfg.to_dict()
        for k in ("architectures", "dtype", "_attn_implementation", "transformers_version"):
            tcfg.pop(k, None)
        wcfg = T.Qwen3_5Config(text_config=tcfg, vision_config=vcfg, tie_word_embeddings=True)
        wcfg.architectures = ["Qwen3_5ForConditionalGeneration"]
        wcfg.dtype = save_dtype
        wcfg.save_pretrained(d)
        try:
            T.GenerationConfig.from_model_config(wcfg).save_pretrained(d)
        except Exception as e:
            log(f"  (no generation_config.json: {e!r})")
        tensors = {}
        for k, v in ref_sd.items():
            if k == "lm_head.weight":  # tied: the wrapper checkpoint has no lm_head tensor
                continue
            assert k.startswith("model."), k
            tensors["model.language_model." + k[len("model."):]] = v.to(save_dtype)
        # tensors the text engine must skip: vision tower and MTP head (shapes as a tiny real one)
        dg = torch.Generator().manual_seed(SEED + 999)
        def rnd(*shape):
            return (torch.randn(shape, generator=dg) * 0.05).to(save_dtype)
        H, I = cfg.hidden_size, cfg.intermediate_size
        nq = cfg.num_attention_heads * cfg.head_dim
        nkv = cfg.num_key_value_heads * cfg.head_dim
        tensors.update({
            "model.visual.blocks.0.attn.qkv.weight": rnd(96, 32),
            "model.visual.blocks.0.attn.qkv.bias": rnd(96),
            "model.visual.blocks.0.attn.proj.weight": rnd(32, 32),
            "model.visual.blocks.0.norm1.weight": rnd(32),
            "model.visual.merger.linear_fc2.weight": rnd(64, 128),
            "mtp.fc.weight": rnd(H, 2 * H),
            "mtp.pre_fc_norm_embedding.weight": rnd(H),
            "mtp.pre_fc_norm_hidden.weight": rnd(H),
            "mtp.layers.0.input_layernorm.weight": rnd(H),
            "mtp.layers.0.self_attn.q_proj.weight": rnd(2 * nq, H),
            "mtp.layers.0.self_attn.k_proj.weight": rnd(nkv, H),
            "mtp.layers.0.mlp.gate_proj.weight": rnd(I, H),
            "mtp.norm.weight": rnd(H),
        })
        keys = sorted(tensors)
        nbytes = {k: tensors[k].numel() * tensors[k].element_size() for k in keys}
        total = sum(nbytes.values())
        acc, cut = 0, len(keys)
        for i, k in enumerate(keys):
            acc += nbytes[k]
            if acc >= total / 2:
                cut = i + 1
                break
        shards = [keys[:cut], keys[cut:]]
        weight_map = {}
        files = []
        for si, ks in enumerate(shards):
            fn = f"model-{si + 1:05d}-of-00002.safetensors"
            write_st(os.path.join(d, fn), {k: tensors[k] for k in ks})
            files.append(os.path.join(d, fn))
            for k in ks:
                weight_map[k] = fn
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
                      f, indent=2)
            f.write("\n")
        stats["weight_keys"] = len(keys)
        stats["shard_sizes_keys"] = [len(s) for s in shards]
        check_file_tensors(files, ref_sd, save_dtype, [("model.language_model.", "model.")], log)
        assert not any(k.startswith("lm_head") for k in keys)

    # reload what was written with transformers itself and compare logits (informative)
    try:
        if name == "qwen35_vl_tied_sharded":
            rl = T.Qwen3_5ForConditionalGeneration.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
        else:
            rl = T.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
        rl.eval()
        with torch.no_grad():
            lg = rl(input_ids=prompt[None], use_cache=False).logits[0].float()
        stats["reload_prompt_logits_max_abs_diff"] = float((lg - prompt_logits).abs().max())
        stats["reload_class"] = type(rl).__name__
    except Exception as e:
        stats["reload_prompt_logits_max_abs_diff"] = f"reload failed: {e!r}"[:300]

    save_file({
        "prompt_ids": prompt.to(torch.int32).contiguous(),
        "prompt_logits": prompt_logits.contiguous(),
        "gen_ids": gen_ids.to(torch.int32).contiguous(),
        "gen_logits": gen_logits.contiguous(),
    }, os.path.join(d, "reference.safetensors"), metadata={
        "format": "pt", "source": "transformers float32 eager, CPU", "case": name})
    sizes = {f: os.path.getsize(os.path.join(d, f)) for f in sorted(os.listdir(d))}
    stats["file_sizes"] = sizes
    with open(os.path.join(d, "stats.json"), "w") as f:
        json.dump(stats, f, indent=2, sort_keys=True)
        f.write("\n")
    big = [f for f, s in sizes.items() if s > 3 * 1024 * 1024]
    log(f"  margins>1e-2: {stats['frac_margin_gt_1e-2']:.3f} (prompt {stats['frac_margin_gt_1e-2_prompt']:.3f},"
        f" gen {stats['frac_margin_gt_1e-2_gen']:.3f}), logit std {stats['logit_std']:.3f},"
        f" nocache-vs-cache {nocache_diff:.2e}, generate match {gen_match},"
        f" reload diff {stats['reload_prompt_logits_max_abs_diff']}")
    log(f"  gen_ids {gen_ids.tolist()}")
    log(f"  files {sizes}")
    if big:
        log(f"  !! files over 3 MB: {big}")
    if stats["frac_margin_gt_1e-2"] < 0.9:
        log("  !! margin fraction below 0.9: adjust scales")
    return stats


def main_build(dest, tar, only):
    import torch
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.set_num_threads(4)
    os.makedirs(dest, exist_ok=True)
    logf = open(os.path.join(dest, "make_fixtures.log"), "w")
    def log(s):
        print(s, flush=True)
        print(s, file=logf, flush=True)
    import transformers
    log(f"transformers {transformers.__version__} torch {torch.__version__}")
    failed = []
    for idx, name in enumerate(CASES):
        if only and name not in only:
            continue
        log(f"== {name}")
        try:
            build_case(name, idx, dest, log)
        except BaseException as e:
            import traceback
            log(traceback.format_exc())
            failed.append(name)
    log(f"failed: {failed}")
    logf.close()
    if tar:
        with tarfile.open(tar, "w") as tf:
            for n in sorted(os.listdir(dest)):
                if n.endswith(".tmp_save"):
                    continue
                tf.add(os.path.join(dest, n), arcname=n)
    return 1 if failed else 0


def introspect(out):
    import torch, transformers
    os.makedirs(out, exist_ok=True)
    log = open(os.path.join(out, "introspect.txt"), "w")
    def p(*a):
        print(*a, file=log); log.flush()
    p("transformers", transformers.__version__, "torch", torch.__version__)
    import transformers as T
    names = ["Qwen3_5TextConfig", "Qwen3_5MoeTextConfig", "Qwen3NextConfig", "Qwen3Config", "Qwen3_5Config", "Qwen3_5MoeConfig", "LlamaConfig"]
    for n in names:
        c = getattr(T, n, None)
        if c is None:
            p("MISSING", n); continue
        try:
            p("=== CONFIG", n); p(json.dumps(c().to_dict(), indent=1, default=str))
        except Exception as e:
            p("ERR", n, repr(e))
    # tiny instances
    def tiny_text(cls, **kw):
        return cls(**kw)
    hyb = dict(vocab_size=256, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
               head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
               linear_value_head_dim=24, intermediate_size=128,
               layer_types=["linear_attention"]*3+["full_attention"])
    import tempfile
    from safetensors import safe_open
    def dump(name, model):
        p("=== STATE", name, type(model).__name__)
        for k, v in model.state_dict().items():
            p(k, tuple(v.shape), str(v.dtype))
        d = tempfile.mkdtemp()
        model.save_pretrained(d, safe_serialization=True)
        p("--- saved files", os.listdir(d))
        for f in sorted(os.listdir(d)):
            if f.endswith(".safetensors"):
                with safe_open(os.path.join(d, f), "pt") as sf:
                    for k in sf.keys():
                        p("SAVED", k, tuple(sf.get_slice(k).get_shape()))
            elif f.endswith(".json"):
                p("--- ", f); p(open(os.path.join(d, f)).read())
    try:
        cfg = T.Qwen3_5TextConfig(**hyb); dump("qwen35", T.Qwen3_5ForCausalLM(cfg))
    except Exception as e: p("ERR qwen35", repr(e))
    try:
        cfg = T.Qwen3_5MoeTextConfig(**hyb, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48)
        dump("qwen35moe", T.Qwen3_5MoeForCausalLM(cfg))
    except Exception as e: p("ERR qwen35moe", repr(e))
    try:
        cfg = T.Qwen3NextConfig(**hyb, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48, mlp_only_layers=[1], decoder_sparse_step=1)
        dump("qwen3next", T.Qwen3NextForCausalLM(cfg))
    except Exception as e: p("ERR qwen3next", repr(e))
    try:
        tc = {k: v for k, v in hyb.items()}
        cfg = T.Qwen3_5Config(text_config=tc, vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64), tie_word_embeddings=True)
        p("=== WRAPPER CONFIG tie", cfg.to_dict())
        m = T.Qwen3_5ForConditionalGeneration(cfg)
        dump("qwen35vl", m)
        p("wrapper tie attrs", getattr(cfg, "tie_word_embeddings", None), getattr(cfg.get_text_config(), "tie_word_embeddings", None))
        p("lm_head is embed", m.lm_head.weight.data_ptr() == m.model.language_model.embed_tokens.weight.data_ptr())
    except Exception as e:
        import traceback; p("ERR qwen35vl", traceback.format_exc())
    # sources
    import importlib
    for mod, objs in [("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe", ["Qwen3_5MoeExperts", "Qwen3_5MoeSparseMoeBlock", "Qwen3_5MoeTopKRouter", "Qwen3_5MoePreTrainedModel"]),
                      ("transformers.models.qwen3_next.modeling_qwen3_next", ["Qwen3NextExperts", "Qwen3NextSparseMoeBlock", "Qwen3NextGatedDeltaNet", "Qwen3NextPreTrainedModel", "Qwen3NextRMSNorm"]),
                      ("transformers.models.qwen3_5.modeling_qwen3_5", ["Qwen3_5ForConditionalGeneration", "Qwen3_5Model", "Qwen3_5PreTrainedModel", "Qwen3_5RMSNorm", "Qwen3_5RMSNormGated"]),
                      ]:
        try:
            m = importlib.import_module(mod)
            for o in objs:
                obj = getattr(m, o, None)
                p("=== SOURCE", mod, o)
                p(inspect.getsource(obj) if obj is not None else "MISSING")
        except Exception as e:
            p("ERR src", mod, repr(e))
    try:
        import transformers.conversion_mapping as cm
        src = inspect.getsource(cm)
        p("=== conversion_mapping excerpt")
        for i, line in enumerate(src.splitlines()):
            if "qwen3" in line.lower() or "qwen2_moe" in line.lower() or "experts" in line.lower():
                p(i, line)
        open(os.path.join(out, "conversion_mapping.py"), "w").write(src)
    except Exception as e:
        p("ERR cm", repr(e))
    log.close()

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--introspect", action="store_true", help="dump configs, keys and sources to --out")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--dest", default="tests/data/fixtures", help="fixture tree to write")
    ap.add_argument("--tar", default=None, help="also tar the fixture tree into this file")
    ap.add_argument("--only", nargs="*", default=None, help="build only these cases")
    a = ap.parse_args()
    if a.introspect:
        introspect(a.out)
        sys.exit(0)
    sys.exit(main_build(a.dest, a.tar, a.only))
