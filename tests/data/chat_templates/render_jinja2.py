#!/usr/bin/python3
"""Renders every (template, conversation) of conversations.json as Hugging Face's
apply_chat_template does, with Debian's python3-jinja2, into expected.json; with --check,
compares instead and exits 1 on any difference.

HF's settings (transformers' chat template utilities): a sandboxed Environment with
trim_blocks=True, lstrip_blocks=True and the loopcontrols extension; a tojson filter that is
json.dumps with ensure_ascii=False (indent / separators / sort_keys passed through); the
globals raise_exception (raises TemplateError with the message) and strftime_now. The
template's variables are the conversation's messages, tools (when given),
add_generation_prompt, the template's bos_token / eos_token, the template's "extra" keys
(llama3.2's fixed date_string) and the conversation's "extra" keys (e.g. enable_thinking).

  /usr/bin/python3 tests/data/chat_templates/render_jinja2.py [--check]
"""
import datetime
import json
import sys
from pathlib import Path

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = Path(__file__).resolve().parent


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env


def context(template, conv):
    ctx = {"messages": conv["messages"]}
    if "tools" in conv:
        ctx["tools"] = conv["tools"]
    ctx["add_generation_prompt"] = conv["add_generation_prompt"]
    ctx["bos_token"] = template["bos_token"]
    ctx["eos_token"] = template["eos_token"]
    ctx.update(template.get("extra", {}))
    ctx.update(conv.get("extra", {}))
    return ctx


def render_all():
    spec = json.loads((HERE / "conversations.json").read_text(encoding="utf-8"))
    env = environment()
    out = {}
    for tname, template in spec["templates"].items():
        compiled = env.from_string((HERE / template["file"]).read_text(encoding="utf-8"))
        for conv in spec["conversations"]:
            if "only" in conv and tname not in conv["only"]:
                continue
            key = tname + "/" + conv["name"]
            try:
                out[key] = {"output": compiled.render(**context(template, conv))}
            except jinja2.exceptions.TemplateError as e:
                out[key] = {"error": str(e)}
    return out


def main():
    rendered = render_all()
    path = HERE / "expected.json"
    text = json.dumps(rendered, ensure_ascii=False, indent=1) + "\n"
    if "--check" in sys.argv[1:]:
        if path.read_text(encoding="utf-8") != text:
            print("expected.json differs from what jinja2 renders now (rerun without --check)")
            return 1
        print(f"{len(rendered)} renderings match jinja2 {jinja2.__version__}")
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {len(rendered)} renderings (jinja2 {jinja2.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
