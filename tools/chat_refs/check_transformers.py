#!/usr/bin/env python3
"""Checks the committed reference renderings (tests/data/chat/expected/, made by make_refs.py with
a jinja2 set up as transformers does) against transformers' own apply_chat_template(tokenize=False).

Templates whose tokenizer directory exists (qwen3, llama3 under --tokenizers) are loaded with
AutoTokenizer.from_pretrained(dir) and rendered with the tokenizer's own chat_template; the
others (bare templates) use the shipped model's tokenizer.json through PreTrainedTokenizerFast
with the bos/eos strings of templates.json and chat_template=<the file>. strftime_now reads the
wall clock in transformers, so today's date is masked to make_refs.py's fixed date before
comparing. Prints one line per case and exits 1 on any mismatch.

Usage (where transformers is installed, e.g. the GPU machine):
  python3 tools/chat_refs/check_transformers.py [--tokenizers ../shared/data/tokenizers]
"""
import argparse
import json
import os
import sys
from datetime import datetime

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "chat")
FIXED_DATE = "2026-01-01"  # make_refs.py's FIXED_NOW as '%Y-%m-%d'


def load_tokenizer(name, spec, tokenizers_dir):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    tok_dir = os.path.join(tokenizers_dir, name)
    if os.path.isfile(os.path.join(tok_dir, "tokenizer_config.json")):
        tok = AutoTokenizer.from_pretrained(tok_dir)
        with open(os.path.join(ROOT, spec["path"]), encoding="utf-8", newline="") as f:
            if tok.chat_template != f.read():
                print(f"note: {name}: the tokenizer's template differs from {spec['path']}")
        return tok, None
    kwargs = {}
    if spec.get("bos_token"):
        kwargs["bos_token"] = spec["bos_token"]
    if spec.get("eos_token"):
        kwargs["eos_token"] = spec["eos_token"]
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(ROOT, "models", "weft-tiny-hybrid", "tokenizer.json"), **kwargs)
    with open(os.path.join(ROOT, spec["path"]), encoding="utf-8", newline="") as f:
        return tok, f.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizers", default=os.path.join(ROOT, "..", "shared", "data", "tokenizers"))
    args = ap.parse_args()
    import transformers
    print(f"transformers {transformers.__version__}")
    with open(os.path.join(DATA, "templates.json")) as f:
        templates = json.load(f)
    with open(os.path.join(DATA, "conversations.json")) as f:
        conversations = json.load(f)
    today = datetime.now().strftime("%Y-%m-%d")
    bad = 0
    for name, spec in templates.items():
        tok, template = load_tokenizer(name, spec, args.tokenizers)
        for conv in conversations:
            case = f"{name}__{conv['name']}"
            if not conv["messages"]:
                print(f"skip  {case}: transformers rejects an empty conversation before templating")
                continue
            base = os.path.join(DATA, "expected", case)
            try:
                got = tok.apply_chat_template(conv["messages"], tools=conv.get("tools"), tokenize=False,
                                              add_generation_prompt=conv.get("add_generation_prompt", True),
                                              chat_template=template, **conv.get("extra", {}))
                got = got.replace(f"[date={today}]", f"[date={FIXED_DATE}]")
                kind = ".txt"
            except Exception as e:  # the template refused the conversation (raise_exception, ...)
                got, kind = str(e), ".error"
            path = base + kind
            expected = open(path, encoding="utf-8", newline="").read() if os.path.exists(path) else None
            ok = expected == got if kind == ".txt" else (expected is not None and expected in got)
            print(f"{'ok   ' if ok else 'FAIL '} {case}{kind}")
            if not ok:
                bad += 1
                print(f"  expected: {expected!r}\n  got:      {got!r}")
    print(f"{bad} mismatch(es)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
