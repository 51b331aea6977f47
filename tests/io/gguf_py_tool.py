"""GGUF cross-checks with the PyPI `gguf` package (gguf-py), used by gguf_test.cc.

  gguf_py_tool.py write OUT.gguf MANIFEST.json
      Writes a GGUF with gguf-py's GGUFWriter (metadata of every type, arrays, nested arrays,
      tensors of several types, alignment 64) and a manifest of what it wrote.
  gguf_py_tool.py check IN.gguf MANIFEST.json
      Reads IN.gguf with gguf-py's GGUFReader and compares it with the manifest (written by the
      C++ side); exits 1 and prints the differences on mismatch.
  gguf_py_tool.py dump MODEL.gguf OUT.json
      Writes llama geometry, tensor table and a few dequantized rows of MODEL.gguf.

Manifest: {"alignment": int, "kv": [{"key", "type", "value", "elem"?}],
           "tensors": [{"name", "ggml_type", "ne", "sha256"}]}; type names are u8 .. f64,
bool, string, array; nested arrays have elem "array" and list values.
"""
import hashlib
import json
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

TYPE_NAMES = {V.UINT8: "u8", V.INT8: "i8", V.UINT16: "u16", V.INT16: "i16", V.UINT32: "u32",
              V.INT32: "i32", V.FLOAT32: "f32", V.BOOL: "bool", V.STRING: "string",
              V.ARRAY: "array", V.UINT64: "u64", V.INT64: "i64", V.FLOAT64: "f64"}
BY_NAME = {v: k for k, v in TYPE_NAMES.items()}


def f32(x):
    return float(np.float32(x))


def write(out_path, manifest_path):
    rng = np.random.default_rng(5)
    w = gguf.GGUFWriter(out_path, "llama")  # adds general.architecture first
    w.add_custom_alignment(64)
    kv = [
        ("general.architecture", "string", "llama"),
        ("general.alignment", "u32", 64),
        ("test.u8", "u8", 200), ("test.i8", "i8", -100), ("test.u16", "u16", 60000),
        ("test.i16", "i16", -30000), ("test.u32", "u32", 4000000000), ("test.i32", "i32", -2000000000),
        ("test.f32", "f32", f32(3.14159)), ("test.bool", "bool", True), ("test.bool_false", "bool", False),
        ("test.string", "string", "héllo wörld ✓"), ("test.empty_string", "string", ""),
        ("test.u64", "u64", 2**63 + 12345), ("test.i64", "i64", -(2**62) - 7), ("test.f64", "f64", 2.718281828459045),
    ]
    for key, t, val in kv[2:]:
        w.add_key_value(key, val, BY_NAME[t])
    arrays = [
        ("test.arr_u8", "u8", [0, 1, 255]),
        ("test.arr_i32", "i32", [-1, 0, 7, 2**31 - 1]),
        ("test.arr_f32", "f32", [f32(0.1), f32(-2.5), f32(1e-7)]),
        ("test.arr_string", "string", ["a", "", "<|begin_of_text|>", "Ġthe"]),
        ("test.arr_bool", "bool", [True, False, True]),
        ("test.arr_u64", "u64", [2**64 - 1, 0]),
        ("test.arr_f64", "f64", [1.0 / 3.0]),
    ]
    for key, t, val in arrays:
        w.add_key_value(key, val, V.ARRAY, sub_type=BY_NAME[t])
    # Nested: an array of arrays of i32 (element type found by gguf-py from the values).
    nested = [[1, 2, 3], [4], [-5, 6]]
    w.add_key_value("test.arr_nested", [np.array(x, dtype=np.int32).tolist() for x in nested], V.ARRAY)

    manifest_kv = [{"key": k, "type": t, "value": v} for k, t, v in kv]
    manifest_kv += [{"key": k, "type": "array", "elem": t, "value": v} for k, t, v in arrays]
    # gguf-py types Python ints as i32 when they fit.
    manifest_kv.append({"key": "test.arr_nested", "type": "array", "elem": "array", "inner": "i32", "value": nested})

    tensors = []

    def add(name, arr, raw_dtype=None, ggml_type=None, ne=None):
        w.add_tensor(name, arr, raw_dtype=raw_dtype)
        tensors.append({"name": name, "ggml_type": int(ggml_type), "ne": ne,
                        "sha256": hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()})

    a = rng.standard_normal((3, 64)).astype(np.float32)
    add("t.f32", a, ggml_type=Q.F32, ne=[64, 3])
    add("t.f16_1d", rng.standard_normal(100).astype(np.float16), ggml_type=Q.F16, ne=[100])
    add("t.i32_3d", rng.integers(-1000, 1000, size=(2, 3, 5)).astype(np.int32), ggml_type=Q.I32, ne=[5, 3, 2])
    bf = gguf.quants.quantize(rng.standard_normal((2, 32)).astype(np.float32), Q.BF16)
    add("t.bf16", bf, raw_dtype=Q.BF16, ggml_type=Q.BF16, ne=[32, 2])
    q8 = gguf.quants.quantize(rng.standard_normal((4, 64)).astype(np.float32), Q.Q8_0)
    add("t.q8_0", q8, raw_dtype=Q.Q8_0, ggml_type=Q.Q8_0, ne=[64, 4])
    q41 = gguf.quants.quantize(rng.standard_normal((2, 96)).astype(np.float32), Q.Q4_1)
    add("t.q4_1", q41, raw_dtype=Q.Q4_1, ggml_type=Q.Q4_1, ne=[96, 2])
    q4k = rng.integers(0, 256, size=(2, 144), dtype=np.uint8)
    add("t.q4_k", q4k, raw_dtype=Q.Q4_K, ggml_type=Q.Q4_K, ne=[256, 2])
    q6k = rng.integers(0, 256, size=(1, 2 * 210), dtype=np.uint8)
    add("t.q6_k", q6k, raw_dtype=Q.Q6_K, ggml_type=Q.Q6_K, ne=[512, 1])

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(manifest_path, "w") as f:
        json.dump({"alignment": 64, "kv": manifest_kv, "tensors": tensors}, f)


def check(in_path, manifest_path):
    with open(manifest_path) as f:
        m = json.load(f)
    r = gguf.GGUFReader(in_path)
    errors = []
    fields = {k: v for k, v in r.fields.items() if not k.startswith("GGUF.")}
    want_keys = [e["key"] for e in m["kv"]]
    if list(fields.keys()) != want_keys:
        errors.append(f"keys differ: {list(fields.keys())} vs {want_keys}")
    for e in m["kv"]:
        fld = fields.get(e["key"])
        if fld is None:
            continue
        t = TYPE_NAMES[fld.types[0]]
        if t != e["type"]:
            errors.append(f"{e['key']}: type {t} vs {e['type']}")
            continue
        want = e["value"]
        if t == "array":
            if TYPE_NAMES[fld.types[1]] != e["elem"]:
                errors.append(f"{e['key']}: elem {fld.types[1]} vs {e['elem']}")
            if e["elem"] == "array":
                # gguf-py's reader flattens nested arrays: compare the flattened values.
                if TYPE_NAMES[fld.types[-1]] != e["inner"]:
                    errors.append(f"{e['key']}: inner {fld.types[-1]} vs {e['inner']}")
                want = [x for sub in want for x in sub]
        val = fld.contents()
        if val != want:
            errors.append(f"{e['key']}: value {val!r} vs {e['value']!r}")
    if r.alignment != m["alignment"]:
        errors.append(f"alignment {r.alignment} vs {m['alignment']}")
    got_t = {t.name: t for t in r.tensors}
    if [t.name for t in r.tensors] != [t["name"] for t in m["tensors"]]:
        errors.append("tensor names/order differ")
    for e in m["tensors"]:
        t = got_t.get(e["name"])
        if t is None:
            continue
        if int(t.tensor_type) != e["ggml_type"]:
            errors.append(f"{e['name']}: type {int(t.tensor_type)} vs {e['ggml_type']}")
        if [int(x) for x in t.shape] != e["ne"]:
            errors.append(f"{e['name']}: ne {list(t.shape)} vs {e['ne']}")
        if t.data_offset % r.alignment != 0:
            errors.append(f"{e['name']}: data offset {t.data_offset} not aligned")
        digest = hashlib.sha256(np.ascontiguousarray(t.data).tobytes()).hexdigest()
        if digest != e["sha256"]:
            errors.append(f"{e['name']}: data differs")
    if errors:
        print("\n".join(errors))
        sys.exit(1)
    print("ok")


def dump(model_path, out_path):
    r = gguf.GGUFReader(model_path)

    def val(key):
        f = r.fields.get(key)
        return None if f is None else f.contents()

    out = {k: val("llama." + k) for k in (
        "embedding_length", "block_count", "attention.head_count", "attention.head_count_kv",
        "feed_forward_length", "vocab_size", "context_length", "attention.layer_norm_rms_epsilon",
        "rope.freq_base", "rope.dimension_count")}
    out["bos"] = val("tokenizer.ggml.bos_token_id")
    out["eos"] = val("tokenizer.ggml.eos_token_id")
    out["n_tokens"] = len(r.fields["tokenizer.ggml.tokens"].data)
    out["chat_template"] = val("tokenizer.chat_template")
    out["tensors"] = [{"name": t.name, "ggml_type": int(t.tensor_type), "ne": [int(x) for x in t.shape]}
                      for t in r.tensors]
    rows = {}
    for t in r.tensors:
        if t.name in ("blk.0.attn_q.weight", "token_embd.weight", "blk.29.ffn_down.weight"):
            deq = gguf.quants.dequantize(t.data[1:2], t.tensor_type)
            rows[t.name] = {"row": 1, "values": [float(x) for x in deq[0]]}
    out["rows"] = rows
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    {"write": write, "check": check, "dump": dump}[sys.argv[1]](*sys.argv[2:])
