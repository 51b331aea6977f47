#!/usr/bin/env python3
"""Reference renderings of chat templates by the PyPI `jinja2` package, configured the way
transformers' apply_chat_template configures it (ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension, tojson = json.dumps with
ensure_ascii=False and key order kept, raise_exception, strftime_now).

  chat_template_reference.py JOBS_JSON OUT_JSON

JOBS_JSON: {"gguf": {"NAME": "path.gguf", ...},            (optional)
            "jobs": [{"template": "..." | "gguf:NAME", "context": {...}}, ...]}
OUT_JSON:  {"templates": {"NAME": "<tokenizer.chat_template of that GGUF>"},
            "results": [{"ok": true, "text": "..."} | {"ok": false, "error": "..."}]}
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def gguf_template(path):
    import gguf
    reader = gguf.GGUFReader(path)
    field = reader.fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def main():
    spec = json.load(open(sys.argv[1], encoding="utf-8"))
    templates = {name: gguf_template(path) for name, path in spec.get("gguf", {}).items()}
    env = make_env()
    results = []
    for job in spec["jobs"]:
        source = job["template"]
        if source.startswith("gguf:"):
            source = templates[source[5:]]
        try:
            text = env.from_string(source).render(**job["context"])
            results.append({"ok": True, "text": text})
        except Exception as e:  # the C++ side only checks that it fails too
            results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump({"templates": templates, "results": results}, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
