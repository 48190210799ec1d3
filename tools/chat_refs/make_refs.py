#!/usr/bin/env python3
"""Renders every conversation in tests/data/chat/conversations.json through every template in
tests/data/chat/templates.json with Python's jinja2 set up exactly as transformers'
apply_chat_template does (utils/chat_template_utils.py: ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and the loopcontrols extension; its own tojson, raise_exception and
strftime_now; render(messages=..., tools=..., documents=None, add_generation_prompt=...,
**special_tokens, **extra)), and writes tests/data/chat/expected/<template>__<conversation>.txt,
or .error holding the exception text when the template refuses the conversation; and
tests/data/chat/snippets_expected.json from the one-feature snippets in snippets.py.

strftime_now reads a fixed clock (FIXED_NOW, also used by tests/chat_template_test.cpp) so that
the references do not depend on the day they were made. Usage: python3 tools/chat_refs/make_refs.py
"""
import json
import os
import sys
import time
from datetime import datetime, timezone

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "chat")
FIXED_NOW = 1767268800  # 2026-01-01 12:00:00 UTC: the same calendar date in every time zone within +-11h


class AssistantTracker(jinja2.ext.Extension):
    # transformers' {% generation %} block; rendering is unchanged by it.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def compile_template(source):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.fromtimestamp(FIXED_NOW).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def render(template, spec, conv):
    kwargs = {}
    if spec.get("bos_token"):
        kwargs["bos_token"] = spec["bos_token"]
    if spec.get("eos_token"):
        kwargs["eos_token"] = spec["eos_token"]
    kwargs.update(conv.get("extra", {}))
    return template.render(messages=conv["messages"], tools=conv.get("tools"), documents=None,
                           add_generation_prompt=conv.get("add_generation_prompt", True), **kwargs)


def main():
    os.environ["TZ"] = "UTC"  # strftime_now's fixed clock reads as UTC, here and in the C++ test
    time.tzset()
    with open(os.path.join(DATA, "templates.json")) as f:
        templates = json.load(f)
    with open(os.path.join(DATA, "conversations.json")) as f:
        conversations = json.load(f)
    out_dir = os.path.join(DATA, "expected")
    os.makedirs(out_dir, exist_ok=True)
    for old in os.listdir(out_dir):
        os.remove(os.path.join(out_dir, old))
    for name, spec in templates.items():
        with open(os.path.join(ROOT, spec["path"]), encoding="utf-8", newline="") as f:
            template = compile_template(f.read())
        for conv in conversations:
            base = os.path.join(out_dir, f"{name}__{conv['name']}")
            try:
                text, ext = render(template, spec, conv), ".txt"
            except jinja2.exceptions.TemplateError as e:
                text, ext = str(e), ".error"
            except (TypeError, ValueError, KeyError, IndexError) as e:
                text, ext = str(e), ".error"
            with open(base + ext, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            print(f"{name}__{conv['name']}{ext}: {len(text)} chars")
    # Snippets: one corner of the language each (tools/chat_refs/snippets.py).
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from snippets import SNIPPETS
    results = []
    for source, variables in SNIPPETS:
        entry = {"template": source, "variables": variables}
        try:
            entry["output"] = compile_template(source).render(**variables)
        except Exception as e:  # syntax or render error: weft must refuse it too
            entry["error"] = f"{type(e).__name__}: {e}"
        results.append(entry)
    with open(os.path.join(DATA, "snippets_expected.json"), "w", encoding="utf-8", newline="") as f:
        json.dump(results, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"snippets_expected.json: {len(results)} snippets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
