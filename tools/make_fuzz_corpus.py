#!/usr/bin/env python3
"""Writes the seed corpora of the libFuzzer targets, fuzz/corpus/<target>/, from real inputs:
the tiny Hugging Face fixtures (../shared/fixtures: config.json and friends, safetensors
headers), the Llama 3 tokenizer and chat templates, a tiny llama GGUF written by gguf-py (the
independent writer) and sample HTTP/OpenAI requests. Every seed is small (a few KB) so the
fuzzers mutate structure, not bulk. Run with the project's venv:  .venv/bin/python tools/make_fuzz_corpus.py
"""
import json
import os
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared")
FIXTURES = os.path.join(SHARED, "fixtures")
TOKENIZER_DIR = os.path.join(SHARED, "models", "llama3-tokenizer")
OUT = os.path.join(ROOT, "fuzz", "corpus")


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def read(path):
    with open(path, "rb") as f:
        return f.read()


def safetensors_bytes(tensors, metadata=None):
    """tensors: [(name, dtype, shape, raw bytes)] in file order."""
    header, off = {}, 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(t[3] for t in tensors)


def real_safetensors_header(path):
    n = struct.unpack("<Q", read(path)[:8])[0]
    return json.loads(read(path)[8:8 + n])


def safetensors_seeds():
    # Names, dtypes and metadata of the real tiny-llama32 checkpoint, shapes shrunk to a few
    # elements per tensor.
    real = real_safetensors_header(os.path.join(FIXTURES, "tiny-llama32", "model.safetensors"))
    meta = real.get("__metadata__", {"format": "pt"})
    names = sorted(k for k in real if k != "__metadata__")[:6]
    rng = np.random.default_rng(0)
    tensors = []
    for i, name in enumerate(names):
        shape = [2, 3] if real[name]["shape"] and len(real[name]["shape"]) == 2 else [4]
        raw = rng.standard_normal(int(np.prod(shape))).astype(np.float32).view(np.uint32)
        raw = (raw >> 16).astype(np.uint16).tobytes()  # bf16
        tensors.append((name, real[name]["dtype"], shape, raw))
    write("safetensors_fuzz", "tiny_llama32_bf16.safetensors", safetensors_bytes(tensors, meta))
    mixed = [("f32", "F32", [2, 2], np.arange(4, dtype=np.float32).tobytes()),
             ("f16", "F16", [3], np.ones(3, dtype=np.float16).tobytes()),
             ("i32", "I32", [2], np.array([7, -1], dtype=np.int32).tobytes()),
             ("fp8.weight", "F8_E4M3", [2, 4], bytes(range(8))),
             ("fp8.weight_scale", "F32", [2, 1], np.ones(2, dtype=np.float32).tobytes()),
             ("scalar", "F32", [], np.float32(0.5).tobytes()),
             ("empty", "F32", [0, 4], b"")]
    write("safetensors_fuzz", "mixed_dtypes.safetensors", safetensors_bytes(mixed, {"format": "pt"}))
    write("safetensors_fuzz", "no_tensors.safetensors", safetensors_bytes([], {"format": "pt"}))


def gguf_seeds():
    import gguf
    from gguf import GGMLQuantizationType as Q

    path = os.path.join(OUT, "gguf_fuzz", "tiny_llama.gguf")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(128)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(["<|begin_of_text|>", "a", "b", "ab", "Ġ"])
    w.add_token_types([3, 1, 1, 1, 1])
    w.add_token_merges(["a b"])
    w.add_bos_token_id(0)
    w.add_array("general.tags", [1, 2, 3])
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((5, 8)).astype(np.float32))
    w.add_tensor("output_norm.weight", np.ones(8, dtype=np.float16))
    for name, qt in [("blk.0.attn_q.weight", Q.Q8_0), ("blk.0.attn_k.weight", Q.Q4_0)]:
        q = gguf.quants.quantize(rng.standard_normal((1, 32)).astype(np.float32), qt)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qt)
    # gguf-py does not quantize these: one block each of small bytes (finite f16 scales).
    for name, qt in [("blk.0.attn_v.weight", Q.Q4_1), ("blk.0.ffn_up.weight", Q.Q4_K),
                     ("blk.0.ffn_down.weight", Q.Q6_K)]:
        nbytes = gguf.GGML_QUANT_SIZES[qt][1]
        w.add_tensor(name, rng.integers(0, 60, (1, nbytes), dtype=np.uint8), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def config_seeds():
    for d in sorted(os.listdir(FIXTURES)):
        p = os.path.join(FIXTURES, d, "config.json")
        if os.path.exists(p):
            write("hf_config_fuzz", "%s_config.json" % d, read(p))
    write("hf_config_fuzz", "generation_config.json", read(os.path.join(FIXTURES, "tiny-llama3", "generation_config.json")))
    cfg = json.loads(read(os.path.join(TOKENIZER_DIR, "tokenizer_config.json")))
    small = {k: cfg[k] for k in ("bos_token", "eos_token", "chat_template") if k in cfg}  # without the 256 added tokens
    write("hf_config_fuzz", "llama3_tokenizer_config.json", json.dumps(small, indent=1))
    fp8 = json.loads(read(os.path.join(FIXTURES, "tiny-llama3", "config.json")))
    fp8["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    write("hf_config_fuzz", "tiny-llama3_fp8_config.json", json.dumps(fp8, indent=1))


def template_seeds():
    cfg = json.loads(read(os.path.join(TOKENIZER_DIR, "tokenizer_config.json")))
    write("chat_template_fuzz", "llama3.jinja", cfg["chat_template"])
    write("chat_template_fuzz", "llama31_instruct.jinja",
          read(os.path.join(ROOT, "tests", "tokenizer", "data", "llama31_instruct_template.jinja")))
    write("chat_template_fuzz", "macros_loops.jinja",
          "{% macro show(m, i) %}{{ i }}:{{ m['role'] | upper }}={{ m.content | trim | tojson }}{% endmacro %}"
          "{%- for m in messages if m.role != 'system' -%}{{ show(m, loop.index) }}{% if not loop.last %},{% endif %}"
          "{%- endfor %}{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}"
          "{{ ns.n }}{{ messages | length }}{{ 'a,b' .split(',') | join('-') }}{{ messages[-1]['content'][:5] }}")
    write("chat_template_fuzz", "raise_and_dict.jinja",
          "{% if messages[0].role == 'tool' %}{{ raise_exception('no tools') }}{% endif %}"
          "{% set d = {'x': [1, 2.5, none, true], 'y': 'z'} %}{{ d | tojson }}{{ d.items() | list }}"
          "{{ (1 + 2) * 3 // 2 % 5 }}{{ 'abc' is string }}{{ bos_token ~ eos_token }}\n#messages\n"
          '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "text", "text": "yo"}]}]')


def tokenizer_seeds():
    # The real Llama 3 tokenizer.json, its vocabulary cut to the byte tokens and the merges
    # among them (plus two special tokens), so the seed stays a few KB.
    tok = json.loads(read(os.path.join(TOKENIZER_DIR, "tokenizer.json")))
    vocab = tok["model"]["vocab"]
    keep = {k: v for k, v in vocab.items() if v < 256}
    merges = []
    for m in tok["model"]["merges"]:
        a, b = m.split(" ") if isinstance(m, str) else m
        if a in keep and b in keep and a + b in vocab and len(merges) < 48:
            merges.append(m)
            keep[a + b] = vocab[a + b]
    tok["model"]["vocab"] = keep
    tok["model"]["merges"] = merges
    specials = [t for t in tok["added_tokens"] if t["content"] in ("<|begin_of_text|>", "<|eot_id|>")]
    tok["added_tokens"] = specials
    write("tokenizer_json_fuzz", "llama3_small.json", json.dumps(tok, ensure_ascii=False, separators=(",", ":")))


REQUESTS = {
    "get_health.http": "GET /health HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n\r\n",
    "post_chat.http": None,  # filled below (needs the body length)
    "pipelined.http": "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\nGET /health HTTP/1.1\r\nHost: localhost\r\n"
                      "Connection: close\r\n\r\n",
    "chunked.http": "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                    "Content-Type: application/json\r\n\r\n1a\r\n{\"messages\":[{\"role\":\"us\r\n"
                    "15\r\ner\",\"content\":\"hi\"}]}\r\n0\r\n\r\n",
    "preflight.http": "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nOrigin: https://app.example\r\n"
                      "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization\r\n\r\n",
    "expect_continue.http": "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n"
                            "Content-Length: 2\r\nContent-Type: application/json\r\n\r\n{}",
    "bad_length.http": "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\nabc",
    "rebinding_host.http": "GET /health HTTP/1.1\r\nHost: evil.example\r\n\r\n",
}


def request_seeds():
    chat = {"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
            "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "stop": ["\n"], "seed": 3, "logprobs": True,
            "top_logprobs": 2, "stream": True, "stream_options": {"include_usage": True}, "n": 2}
    completion = {"model": "m", "prompt": ["Hello", [1, 2, 3]], "max_tokens": 4, "echo": False, "logprobs": 1,
                  "presence_penalty": 0.5, "frequency_penalty": -0.5, "logit_bias": {"5": -100}, "min_tokens": 1,
                  "ignore_eos": True, "stop_token_ids": [2]}
    write("openai_request_fuzz", "chat.json", json.dumps(chat))
    write("openai_request_fuzz", "completion.json", json.dumps(completion))
    write("openai_request_fuzz", "tokenize.json", json.dumps({"model": "m", "prompt": "abc", "add_special_tokens": True}))
    write("openai_request_fuzz", "detokenize.json", json.dumps({"model": "m", "tokens": [1, 2, 3]}))
    body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
    REQUESTS["post_chat.http"] = ("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"
                                  "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    for name, text in REQUESTS.items():
        write("http_request_fuzz", name, text)


def structured_seeds():
    # One selector byte (mod 3: schema, regex, GBNF grammar), the spec, NUL, text to match.
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": -3, "maximum": 40},
                                               "b": {"enum": ["x", 1, None]}}, "required": ["a"]}
    write("structured_fuzz", "schema_object", "0" + json.dumps(schema, separators=(",", ":")) + "\0" + '{"a":12,"b":"x"}')
    write("structured_fuzz", "regex_digits", "1[0-9]{2,3}-(ab|c)+\\.\0" + "123-abcab.")
    grammar = ('root ::= list\nlist ::= "[" (item ("," item){0,3})? "]"\n'
               'item ::= [0-9] | list | [^\\n\\u4e00-\\u9fa5]+ "."\n')
    write("structured_fuzz", "gbnf_nested", "2" + grammar + "\0" + "[1,[2,[]],3]")


def main():
    if not os.path.isdir(FIXTURES):
        sys.exit("no fixtures at %s" % FIXTURES)
    safetensors_seeds()
    gguf_seeds()
    config_seeds()
    template_seeds()
    tokenizer_seeds()
    request_seeds()
    structured_seeds()


if __name__ == "__main__":
    main()
