#!/usr/bin/env python3
"""Train weft-tiny-hybrid: a ~20M-parameter Qwen3.5 hybrid (Gated DeltaNet + gated full attention).

One script, several stages (see tools/train/README.md):

  tokenizer  byte-level BPE (Qwen2 split regex + ByteLevel(use_regex=False)) on the training text only
  train      Qwen3_5ForCausalLM at 4096 context, bf16 autocast, AdamW, cosine schedule; checkpoints + resume
  export     bf16 safetensors shards (<= 15 MB) + tokenizer files + generation_config
  eval       held-out perplexity (WikiText-2 test, float32, 4096-token windows), in-domain val loss
  fixture    float32 eager-attention reference logits on CPU (tests/data/fixtures/weft_tiny_hybrid_ref/)
  samples    greedy and temperature continuations

`all` runs every stage in order. Everything is written under --out-dir with the repository layout
(models/weft-tiny-hybrid/, tests/data/fixtures/weft_tiny_hybrid_ref/, train_log.csv, summary.json).
Needs torch, transformers >= 5.17, tokenizers, safetensors (the GPU machine has them).
"""
import argparse
import glob
import json
import lzma
import math
import os
import shutil
import sys
import time

EOT = "<|endoftext|>"
# Qwen2 / Qwen3 pre-tokenizer split pattern, byte-identical to the published Qwen3 tokenizer.json.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
MODEL_SUBDIR = os.path.join("models", "weft-tiny-hybrid")
FIXTURE_SUBDIR = os.path.join("tests", "data", "fixtures", "weft_tiny_hybrid_ref")
SAMPLE_PROMPTS = [
    "It is a truth universally acknowledged, that",
    "The Martians had",
    "Captain Nemo looked at me and said",
    "The jury said that the city",
]

T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


# ----------------------------------------------------------------------------------------------
# data

def read_text(path):
    if path.endswith(".xz"):
        with lzma.open(path, "rt", encoding="utf-8") as f:
            return f.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def training_files(train_dir):
    paths = {}
    for p in sorted(glob.glob(os.path.join(train_dir, "*.txt")) + glob.glob(os.path.join(train_dir, "*.txt.xz"))):
        base = os.path.basename(p)
        name = base[:-3] if base.endswith(".xz") else base
        if "wikitext" in name.lower():
            raise SystemExit(f"refusing to train on held-out text: {p}")
        paths.setdefault(name, p)  # prefer the decompressed copy when both exist
    if not paths:
        raise SystemExit(f"no *.txt or *.txt.xz files in {train_dir}")
    return [(n, paths[n]) for n in sorted(paths)]


def load_documents(train_dir):
    """[(file name, [documents])]. The Brown corpus is 500 documents separated by blank lines;
    each novel is one document."""
    out = []
    for name, path in training_files(train_dir):
        text = read_text(path)
        if name.startswith("brown"):
            docs = [d.strip() for d in text.split("\n\n")]
        else:
            docs = [text.strip()]
        out.append((name, [d for d in docs if d]))
    return out


# ----------------------------------------------------------------------------------------------
# tokenizer

def train_tokenizer(files_docs, vocab_size):
    from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    # normalizer NFC, as Qwen2/Qwen3 (a no-op on ASCII text)
    from tokenizers import normalizers
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 1, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    docs = [d for _, ds in files_docs for d in ds]
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    tok.add_special_tokens([AddedToken(EOT, single_word=False, lstrip=False, rstrip=False,
                                       normalized=False, special=True)])
    # Make decoder / post-processor exactly the Qwen2 form (ByteLevel, no prefix space, no regex).
    j = json.loads(tok.to_str())
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    j["normalizer"] = {"type": "NFC"}
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": False}, dict(bl)]}
    j["post_processor"] = dict(bl)
    j["decoder"] = dict(bl)
    # as in the published Qwen2/Qwen3 files: empty strings rather than null (same meaning)
    for k in ("continuing_subword_prefix", "end_of_word_suffix"):
        if j["model"].get(k) is None:
            j["model"][k] = ""
    tok = Tokenizer.from_str(json.dumps(j, ensure_ascii=False))
    return tok


def tokenizer_config(eot_id):
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(eot_id): {"content": EOT, "lstrip": False, "normalized": False,
                                               "rstrip": False, "single_word": False, "special": True}},
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOT,
        "errors": "replace",
        "model_max_length": 8192,
        "pad_token": EOT,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def encode_streams(tok, files_docs, val_frac):
    """Token streams: every file's documents joined and each followed by <|endoftext|>; the last
    val_frac of every file's tokens is held back as an in-domain validation stream."""
    eot = tok.token_to_id(EOT)
    train, val, per_file = [], [], {}
    for name, docs in files_docs:
        ids = []
        for enc in tok.encode_batch(docs, add_special_tokens=False):
            ids.extend(enc.ids)
            ids.append(eot)
        n_val = int(len(ids) * val_frac)
        train.extend(ids[:len(ids) - n_val])
        val.extend(ids[len(ids) - n_val:])
        per_file[name] = {"docs": len(docs), "tokens": len(ids), "val_tokens": n_val,
                          "bytes": sum(len(d.encode("utf-8")) for d in docs)}
    return train, val, per_file


# ----------------------------------------------------------------------------------------------
# model

def make_config(a, vocab_size, eot_id):
    from transformers import Qwen3_5TextConfig
    n = a.layers
    layer_types = ["full_attention" if (i + 1) % a.full_attn_interval == 0 else "linear_attention" for i in range(n)]
    return Qwen3_5TextConfig(
        vocab_size=vocab_size,
        hidden_size=a.hidden,
        intermediate_size=a.intermediate,
        num_hidden_layers=n,
        layer_types=layer_types,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        head_dim=a.head_dim,
        linear_num_key_heads=a.lin_k_heads,
        linear_num_value_heads=a.lin_v_heads,
        linear_key_head_dim=a.lin_head_dim,
        linear_value_head_dim=a.lin_head_dim,
        linear_conv_kernel_dim=4,
        hidden_act="silu",
        max_position_embeddings=a.max_pos,
        initializer_range=0.02,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        attention_bias=False,
        attention_dropout=0.0,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                         "mrope_section": [11, 11, 10], "mrope_interleaved": True},
        bos_token_id=None,
        eos_token_id=eot_id,
        pad_token_id=eot_id,
        use_cache=True,
    )


def count_params(model):
    seen, n = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n


def lr_at(step, a, total):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    prog = min(1.0, (step - a.warmup) / max(1, total - a.warmup))
    return a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * prog)))


def batch_at(step, stream, a, device):
    """Deterministic batch for a step: B random windows of ctx tokens (independent of resume)."""
    import torch
    g = torch.Generator().manual_seed(a.seed * 1_000_003 + step)
    starts = torch.randint(0, stream.numel() - a.ctx, (a.batch,), generator=g)
    x = torch.stack([stream[s:s + a.ctx] for s in starts.tolist()])
    return x.to(device, non_blocking=True)


def eval_loss(model, stream, ctx, device, batch=4, autocast=True):
    """Mean next-token NLL over non-overlapping windows (the last partial window included)."""
    import torch
    import torch.nn.functional as F
    total, count = 0.0, 0
    windows = [stream[i:i + ctx] for i in range(0, stream.numel() - 1, ctx)]
    windows = [w for w in windows if w.numel() >= 2]
    model.eval()
    with torch.no_grad():
        full = [w for w in windows if w.numel() == ctx]
        rest = [w for w in windows if w.numel() != ctx]
        groups = [torch.stack(full[i:i + batch]) for i in range(0, len(full), batch)] + [w[None] for w in rest]
        for x in groups:
            x = x.to(device)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and device.type == "cuda"):
                logits = model(input_ids=x).logits
            lp = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                 reduction="sum")
            total += lp.double().item()
            count += x[:, 1:].numel()
    model.train()
    return total / max(1, count), count


# ----------------------------------------------------------------------------------------------
# stages

def stage_tokenizer(a, S):
    from tokenizers import Tokenizer
    tpath = os.path.join(a.work_dir, "tokenizer.json")
    files_docs = load_documents(a.train_dir)
    shipped = os.path.join(a.out_dir, MODEL_SUBDIR, "tokenizer.json")
    t = time.time()
    if a.stage == "eval":
        tok = Tokenizer.from_file(shipped)
        log("using the shipped tokenizer", shipped)
    elif a.resume and os.path.exists(tpath):
        tok = Tokenizer.from_file(tpath)
        log("reusing tokenizer", tpath)
    else:
        tok = train_tokenizer(files_docs, a.vocab)
        tok.save(tpath)
    S["tokenizer"] = {"vocab_size": tok.get_vocab_size(with_added_tokens=True), "eot_id": tok.token_to_id(EOT),
                      "train_s": round(time.time() - t, 1)}
    train, val, per_file = encode_streams(tok, files_docs, a.val_frac)
    S["data"] = {"files": per_file, "train_tokens": len(train), "val_tokens": len(val),
                 "train_bytes": sum(v["bytes"] for v in per_file.values()),
                 "documents": sum(v["docs"] for v in per_file.values())}
    log("tokenizer", S["tokenizer"], "train tokens", len(train), "val tokens", len(val))
    return tok, train, val


def stage_train(a, S, tok, train_ids, val_ids):
    import torch
    from transformers import Qwen3_5ForCausalLM
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    V = tok.get_vocab_size(with_added_tokens=True)
    eot = tok.token_to_id(EOT)
    cfg = make_config(a, V, eot)
    torch.manual_seed(a.seed)
    model = Qwen3_5ForCausalLM(cfg)
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        model.tie_weights()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "embeddings not tied"
    model.to(device).train()
    n_params = count_params(model)
    n_embed = model.model.embed_tokens.weight.numel()
    log(f"model: {n_params:,} parameters ({n_embed:,} in the tied embedding)")
    S["params"] = {"total": n_params, "embedding": n_embed, "non_embedding": n_params - n_embed}

    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim >= 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    stream = torch.tensor(train_ids, dtype=torch.long)
    val_stream = torch.tensor(val_ids, dtype=torch.long)
    total = a.steps
    step0, rows, elapsed_before, reduced_from = 0, [], 0.0, None
    ckpt_path = os.path.join(a.work_dir, "ckpt.pt")
    if a.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step0, total, rows = ck["step"], ck["total_steps"], ck["rows"]
        elapsed_before, reduced_from = ck["elapsed_s"], ck.get("reduced_from")
        log(f"resumed from {ckpt_path} at step {step0}/{total}")

    def save_ckpt(step, elapsed):
        tmp = ckpt_path + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "total_steps": total,
                    "rows": rows, "elapsed_s": elapsed, "reduced_from": reduced_from, "args": vars(a)}, tmp)
        os.replace(tmp, ckpt_path)

    def write_csv():
        with open(os.path.join(a.out_dir, "train_log.csv"), "w") as f:
            f.write("step,tokens,lr,train_loss,grad_norm,val_loss,elapsed_s,tok_per_s\n")
            for r in rows:
                f.write(",".join("" if r.get(k) is None else (f"{r[k]:.6g}" if isinstance(r[k], float) else str(r[k]))
                                 for k in ["step", "tokens", "lr", "train_loss", "grad_norm", "val_loss",
                                           "elapsed_s", "tok_per_s"]) + "\n")

    tok_per_step = a.batch * a.ctx
    torch.cuda.synchronize()
    t_start = time.time() - elapsed_before
    t_mark, step_mark = None, None
    loss_acc = torch.zeros((), device=device)
    n_acc, t_log, tok_log = 0, time.time(), 0
    step = step0
    stopped_early = False
    while step < total:
        lr = lr_at(step, a, total)
        for gp in opt.param_groups:
            gp["lr"] = lr
        x = batch_at(step, stream, a, device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_acc += loss.detach()
        n_acc += 1
        tok_log += tok_per_step
        step += 1
        # throughput probe: fit the run into the time budget (only while still in warmup, so the
        # cosine schedule stays the one a plain `--steps N` run would use)
        if step == step0 + 3:
            torch.cuda.synchronize()
            t_mark, step_mark = time.time(), step
        if t_mark is not None and step == step_mark + 12 and step < a.warmup and a.time_budget_s > 0:
            torch.cuda.synchronize()
            per = (time.time() - t_mark) / (step - step_mark)
            el = time.time() - t_start
            n_val_evals = (total - step) // a.val_every + 1
            need = per * (total - step) * 1.04 + n_val_evals * 2.0
            log(f"throughput probe: {per:.3f} s/step, {tok_per_step / per:,.0f} tok/s; projected {el + need:.0f} s "
                f"for {total} steps (budget {a.time_budget_s:.0f} s)")
            if el + need > a.time_budget_s:
                new_total = int(step + (a.time_budget_s - el - n_val_evals * 2.0) / (per * 1.04))
                new_total = max(a.warmup + 1, new_total // 10 * 10)
                reduced_from = total if reduced_from is None else reduced_from
                log(f"WARNING: reducing steps {total} -> {new_total} to fit the time budget")
                total = new_total
        if step % a.log_every == 0 or step == total:
            torch.cuda.synchronize()
            now = time.time()
            rows.append({"step": step, "tokens": step * tok_per_step, "lr": lr,
                         "train_loss": (loss_acc / n_acc).item(), "grad_norm": float(gn), "val_loss": None,
                         "elapsed_s": round(now - t_start, 2), "tok_per_s": round(tok_log / (now - t_log))})
            loss_acc.zero_()
            n_acc, t_log, tok_log = 0, now, 0
            if step % (a.log_every * 4) == 0 or step == total:
                r = rows[-1]
                log(f"step {step}/{total} loss {r['train_loss']:.4f} lr {lr:.2e} gn {r['grad_norm']:.2f} "
                    f"{r['tok_per_s']:,} tok/s")
        if val_stream.numel() > a.ctx and (step % a.val_every == 0 or step == total):
            vl, _ = eval_loss(model, val_stream, a.ctx, device)
            if rows and rows[-1]["step"] == step:
                rows[-1]["val_loss"] = vl
            else:
                rows.append({"step": step, "tokens": step * tok_per_step, "lr": lr, "val_loss": vl,
                             "elapsed_s": round(time.time() - t_start, 2)})
            log(f"step {step}: val loss {vl:.4f} (ppl {math.exp(vl):.2f})")
            t_log, tok_log = time.time(), 0  # keep eval time out of the throughput column
        if step % a.ckpt_every == 0 and step < total:
            write_csv()
            save_ckpt(step, time.time() - t_start)
        if a.time_budget_s > 0 and time.time() - t_start > a.time_budget_s * a.hard_stop_factor and step < total:
            log(f"WARNING: hard time limit hit at step {step}/{total}; checkpointing, run again with --resume")
            stopped_early = True
            break
    torch.cuda.synchronize()
    wall = time.time() - t_start
    save_ckpt(step, wall)
    write_csv()
    S["train"] = {"steps": step, "planned_steps": total, "steps_reduced_from": reduced_from,
                  "completed": not stopped_early, "batch": a.batch, "ctx": a.ctx,
                  "tokens_per_step": tok_per_step, "tokens_seen": step * tok_per_step,
                  "epochs": round(step * tok_per_step / len(train_ids), 2), "wall_s": round(wall, 1),
                  "final_train_loss": next((r["train_loss"] for r in reversed(rows) if r.get("train_loss") is not None), None),
                  "final_val_loss": next((r["val_loss"] for r in reversed(rows) if r.get("val_loss") is not None), None),
                  "lr": a.lr, "min_lr_frac": a.min_lr_frac, "warmup": a.warmup, "weight_decay": a.wd,
                  "betas": [0.9, 0.95], "grad_clip": a.clip, "seed": a.seed,
                  "gpu": torch.cuda.get_device_name(0)}
    log("train done", S["train"])
    return model, cfg


def stage_export(a, S, tok, model):
    import copy
    import torch
    from transformers import GenerationConfig
    md = os.path.join(a.out_dir, MODEL_SUBDIR)
    if os.path.isdir(md):
        shutil.rmtree(md)
    os.makedirs(md)
    m16 = copy.deepcopy(model).to("cpu", dtype=torch.bfloat16)
    m16.generation_config = GenerationConfig(bos_token_id=None, eos_token_id=tok.token_to_id(EOT),
                                             pad_token_id=tok.token_to_id(EOT))
    m16.save_pretrained(md, max_shard_size="15MB")
    tok.save(os.path.join(md, "tokenizer.json"))
    with open(os.path.join(md, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(tok.token_to_id(EOT)), f, indent=2)
        f.write("\n")
    files = {fn: os.path.getsize(os.path.join(md, fn)) for fn in sorted(os.listdir(md))}
    S["export"] = {"dir": MODEL_SUBDIR, "files": files}
    log("exported", files)
    del m16


def load_shipped(a, device, attn="sdpa"):
    import torch
    from transformers import Qwen3_5ForCausalLM
    md = os.path.join(a.out_dir, MODEL_SUBDIR)
    m = Qwen3_5ForCausalLM.from_pretrained(md, dtype=torch.float32, attn_implementation=attn)
    return m.to(device).eval()


def stage_eval(a, S, tok, val_ids):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda")
    model = load_shipped(a, device)
    text = read_text(a.heldout)
    ids = tok.encode(text, add_special_tokens=False).ids
    t = time.time()
    nll, n = eval_loss(model, torch.tensor(ids, dtype=torch.long), a.ctx, device, batch=4, autocast=False)
    E = {"heldout_file": os.path.basename(a.heldout), "heldout_tokens": len(ids),
         "heldout_bytes": len(text.encode("utf-8")), "predicted_tokens": n, "window": a.ctx,
         "nll": nll, "ppl": math.exp(nll),
         "bits_per_byte": nll * n / math.log(2) / len(text.encode("utf-8")),
         "dtype": "float32 (bf16 weights upcast)", "s": round(time.time() - t, 1)}
    if len(val_ids) > 1:
        vl, vn = eval_loss(model, torch.tensor(val_ids, dtype=torch.long), a.ctx, device, batch=4, autocast=False)
        E["val_nll"], E["val_ppl"], E["val_tokens"] = vl, math.exp(vl), vn
    S["eval"] = E
    log("eval", E)
    # tokenizer round trip + transformers' loader agrees with `tokenizers`
    chk = {}
    chk["decode_roundtrip_heldout"] = tok.decode(ids) == text
    try:
        from transformers import AutoTokenizer
        ht = AutoTokenizer.from_pretrained(os.path.join(a.out_dir, MODEL_SUBDIR))
        probe = text[:5000] + "\n" + " ".join(SAMPLE_PROMPTS) + " café naïve 12345 <|endoftext|> x"
        chk["transformers_tokenizer_class"] = type(ht).__name__
        chk["transformers_encode_matches"] = ht.encode(probe, add_special_tokens=False) == tok.encode(
            probe, add_special_tokens=False).ids
        chk["eos_token_id"] = ht.eos_token_id
        chk["bos_token_id"] = ht.bos_token_id
    except Exception as e:  # report, do not fail the run
        chk["transformers_error"] = repr(e)
    S["tokenizer_checks"] = chk
    log("tokenizer checks", chk)


def stage_fixture(a, S, tok):
    import torch
    from safetensors.torch import save_file
    torch.set_num_threads(min(16, os.cpu_count() or 1))
    model = load_shipped(a, torch.device("cpu"), attn="eager")
    text = read_text(a.heldout)
    ids = tok.encode(text, add_special_tokens=False).ids[:a.fixture_tokens]
    x = torch.tensor([ids], dtype=torch.long)
    with torch.no_grad():
        prompt_logits = model(input_ids=x).logits[0].float().contiguous()
        gen_ids, gen_logits, cur = [], [], x
        for _ in range(a.gen_steps):  # full recompute each step: no cache involved
            lg = model(input_ids=cur).logits[0, -1].float()
            nxt = int(torch.argmax(lg))
            gen_logits.append(lg)
            gen_ids.append(nxt)
            cur = torch.cat([cur, torch.tensor([[nxt]])], dim=1)
    gen_logits = torch.stack(gen_logits).contiguous()
    fd = os.path.join(a.out_dir, FIXTURE_SUBDIR)
    os.makedirs(fd, exist_ok=True)
    tensors = {"prompt_ids": torch.tensor(ids, dtype=torch.int32), "prompt_logits": prompt_logits,
               "gen_ids": torch.tensor(gen_ids, dtype=torch.int32), "gen_logits": gen_logits}
    import transformers
    meta = {"model_dir": MODEL_SUBDIR, "source": "first tokens of wikitext2-test.txt",
            "dtype": "float32", "attn_implementation": "eager", "device": "cpu",
            "torch": torch.__version__, "transformers": transformers.__version__,
            "T": str(len(ids)), "V": str(prompt_logits.shape[1]), "gen_steps": str(a.gen_steps)}
    save_file(tensors, os.path.join(fd, "reference.safetensors"), metadata=meta)
    with open(os.path.join(fd, "model_dir.txt"), "w") as f:
        f.write(MODEL_SUBDIR.replace(os.sep, "/") + "\n")
    F = {"T": len(ids), "V": int(prompt_logits.shape[1]), "gen_ids": gen_ids,
         "gen_text": tok.decode(gen_ids), "prompt_text_tail": tok.decode(ids[-30:]),
         "row0_equals_last_prompt_row": float((gen_logits[0] - prompt_logits[-1]).abs().max()),
         "bytes": os.path.getsize(os.path.join(fd, "reference.safetensors"))}
    # cached generation (hybrid cache, recurrent GDN step) must agree with the full recompute
    try:
        with torch.no_grad():
            out = model.generate(x, max_new_tokens=a.gen_steps, min_new_tokens=a.gen_steps, do_sample=False,
                                 output_logits=True, return_dict_in_generate=True, pad_token_id=tok.token_to_id(EOT))
        cl = torch.stack([l[0].float() for l in out.logits])
        F["cached_generate_ids"] = out.sequences[0, x.shape[1]:].tolist()
        F["cached_vs_recompute_max_abs_logit_diff"] = float((cl - gen_logits).abs().max())
    except Exception as e:
        F["cached_generate_error"] = repr(e)
    meta.update({k: F[k] for k in ["row0_equals_last_prompt_row"]})
    with open(os.path.join(fd, "meta.json"), "w") as f:
        json.dump({**meta, **F, "prompt_text": tok.decode(ids)}, f, indent=1)
        f.write("\n")
    S["fixture"] = F
    log("fixture", F)


def stage_samples(a, S, tok):
    import torch
    device = torch.device("cuda")
    model = load_shipped(a, device)
    eot = tok.token_to_id(EOT)
    out = []
    for p in SAMPLE_PROMPTS:
        x = torch.tensor([tok.encode(p, add_special_tokens=False).ids], device=device)
        rec = {"prompt": p}
        with torch.no_grad():
            g = model.generate(x, max_new_tokens=a.sample_tokens, do_sample=False, pad_token_id=eot,
                               eos_token_id=eot)
            rec["greedy"] = tok.decode(g[0, x.shape[1]:].tolist())
            torch.manual_seed(a.seed)
            s = model.generate(x, max_new_tokens=a.sample_tokens, do_sample=True, temperature=0.8, top_k=50,
                               top_p=1.0, pad_token_id=eot, eos_token_id=eot)
            rec["t0.8_top50"] = tok.decode(s[0, x.shape[1]:].tolist())
        out.append(rec)
        log("sample", json.dumps(rec))
    with open(os.path.join(a.out_dir, "samples.json"), "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    S["samples"] = out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=["all", "tokenizer", "train", "eval"],
                    help="all: every stage; tokenizer: tokenizer + token counts only; train: tokenizer, train, "
                         "export; eval: eval + fixture + samples on an exported model in --out-dir")
    ap.add_argument("--train-dir", default="../shared/data/corpora/train")
    ap.add_argument("--heldout", default="../shared/data/corpora/heldout/wikitext2-test.txt")
    ap.add_argument("--out-dir", default="out/train")
    ap.add_argument("--work-dir", default="out/train-work", help="checkpoint + tokenizer cache")
    ap.add_argument("--resume", action="store_true", help="continue from --work-dir/ckpt.pt")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--val-frac", type=float, default=0.01)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--intermediate", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--full-attn-interval", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=256)
    ap.add_argument("--lin-k-heads", type=int, default=4)
    ap.add_argument("--lin-v-heads", type=int, default=8)
    ap.add_argument("--lin-head-dim", type=int, default=64)
    ap.add_argument("--max-pos", type=int, default=8192)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--log-every", type=int, default=5)
    ap.add_argument("--val-every", type=int, default=40)
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--time-budget-s", type=float, default=0,
                    help="if > 0, a throughput probe during warmup lowers --steps to fit this many seconds")
    ap.add_argument("--hard-stop-factor", type=float, default=1.15,
                    help="stop (checkpoint, resumable) once training exceeds budget x this")
    ap.add_argument("--fixture-tokens", type=int, default=200)
    ap.add_argument("--gen-steps", type=int, default=12)
    ap.add_argument("--sample-tokens", type=int, default=48)
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    os.makedirs(a.work_dir, exist_ok=True)
    spath = os.path.join(a.out_dir, "summary.json")
    S = {}
    if os.path.exists(spath) and a.stage == "eval":
        S = json.load(open(spath))
    S.setdefault("argv", []).append(sys.argv[1:])
    S["args"] = vars(a)

    def dump():
        with open(spath, "w") as f:
            json.dump(S, f, indent=1, ensure_ascii=False)

    def guarded(name, fn, *args):
        t = time.time()
        try:
            r = fn(*args)
            S.setdefault("stage_s", {})[name] = round(time.time() - t, 1)
            return r
        except Exception:
            import traceback
            S.setdefault("errors", {})[name] = traceback.format_exc()
            log(f"ERROR in stage {name}:\n" + traceback.format_exc())
            return None
        finally:
            dump()

    try:
        import torch
        import transformers
        S["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                         "tokenizers": __import__("tokenizers").__version__, "python": sys.version.split()[0]}
    except ImportError as e:
        if a.stage != "tokenizer":
            raise
        S["versions"] = {"error": repr(e)}
    t = time.time()
    tok, train_ids, val_ids = stage_tokenizer(a, S)
    S.setdefault("stage_s", {})["tokenizer"] = round(time.time() - t, 1)
    dump()
    if a.stage == "tokenizer":
        return
    if a.stage in ("all", "train"):
        t = time.time()
        model, _ = stage_train(a, S, tok, train_ids, val_ids)
        S["stage_s"]["train"] = round(time.time() - t, 1)
        dump()
        stage_export(a, S, tok, model)
        dump()
        del model
        import torch
        torch.cuda.empty_cache()
    if a.stage in ("all", "eval"):
        guarded("eval", stage_eval, a, S, tok, val_ids)
        guarded("fixture", stage_fixture, a, S, tok)
        guarded("samples", stage_samples, a, S, tok)
    S["total_s"] = round(time.time() - T0, 1)
    dump()
    log("done; summary at", spath)


if __name__ == "__main__":
    main()
