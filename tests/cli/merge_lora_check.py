"""`lancet merge-lora` against numpy: writes a PEFT-layout LoRA adapter for a fixture checkpoint
(its own safetensors writer, not lancet's), merges it with the lancet binary, and checks every
tensor of the result: adapted weights equal bf16(W + alpha/r * B @ A) computed here in float64
(at most one bf16 ulp apart, for rounding ties of a different summation order), all others
byte-identical; the merged model generates; rslora scales by alpha/sqrt(r); and adapters that
cannot be merged as written (DoRA, a module the base lacks, a rank that contradicts r, a pickle
file) are errors naming the cause; --dtype float32 keeps the adapted weights' exact sum in F32. Prints one "ok:" line per check; exits 1 on the first failure.

  python merge_lora_check.py LANCET BASE_DIR WORK_DIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

LANCET, BASE, WORK = sys.argv[1], sys.argv[2], sys.argv[3]


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        sys.exit(1)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[b:e])
    return out


def to_f64(dtype, shape, raw):
    if dtype == "BF16":
        bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64).reshape(shape)
    if dtype == "F32":
        return np.frombuffer(raw, dtype=np.float32).astype(np.float64).reshape(shape)
    raise ValueError(dtype)


def bf16_bits(x):
    """Round-to-nearest-even float32 -> bf16 bit patterns."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_adapter(path, factors, config):
    os.makedirs(path, exist_ok=True)
    cfg = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"],
           "bias": "none", "fan_in_fan_out": False, "use_rslora": False, "use_dora": False,
           "modules_to_save": None, "rank_pattern": {}, "alpha_pattern": {}}
    cfg.update(config)
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump(cfg, f)
    tensors = {}
    for module, (a, b) in factors.items():
        tensors[f"base_model.model.{module}.lora_A.weight"] = a
        tensors[f"base_model.model.{module}.lora_B.weight"] = b
    write_safetensors(os.path.join(path, "adapter_model.safetensors"), tensors)


def merge(adapter, out, *flags):
    shutil.rmtree(out, ignore_errors=True)
    return subprocess.run([LANCET, "merge-lora", BASE, adapter, out, *flags], capture_output=True, text=True,
                          timeout=120)


base = read_safetensors(os.path.join(BASE, "model.safetensors"))
rng = np.random.default_rng(11)
r = 4
modules = ["model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj", "model.layers.2.mlp.down_proj"]
factors = {}
for m in modules:
    out_dim, in_dim = base[m + ".weight"][1]
    # B large enough that the merge moves most weights by many bf16 ulps.
    # (Rounded to float32 here, as the adapter file stores them.)
    factors[m] = tuple((rng.standard_normal(s) * 0.5).astype(np.float32).astype(np.float64)
                       for s in ((r, in_dim), (out_dim, r)))


def expect_merged(out_dir, scale, what):
    merged = read_safetensors(os.path.join(out_dir, "model.safetensors"))
    check(sorted(merged) == sorted(base), f"{what}: the same tensor names as the base")
    worst, moved, adapted, unchanged = 0, 0, 0, 0
    for name, (dtype, shape, raw) in base.items():
        mdtype, mshape, mraw = merged[name]
        check(mdtype == dtype and mshape == shape, f"{what}: {name} keeps dtype and shape")
        module = name[: -len(".weight")] if name.endswith(".weight") else name
        if module not in factors:
            check(mraw == raw, f"{what}: {name} is byte-identical to the base")
            unchanged += 1
            continue
        a, b = factors[module]
        want = bf16_bits(to_f64(dtype, shape, raw) + scale * (b @ a))
        got = np.frombuffer(mraw, dtype=np.uint16).reshape(shape)
        worst = max(worst, int(np.abs(want.astype(np.int32) - got.astype(np.int32)).max()))
        moved += int(np.count_nonzero(got != np.frombuffer(raw, dtype=np.uint16).reshape(shape)))
        adapted += got.size
    check(unchanged == len(base) - len(factors), f"{what}: the {unchanged} other tensors are unchanged")
    check(worst <= 1, f"{what}: adapted weights equal bf16(W + {scale:g} * B @ A) within one bf16 ulp (max {worst})")
    check(moved > 0.9 * adapted, f"{what}: the merge moved {moved} of {adapted} adapted weights")


# 1. alpha / r
adapter = os.path.join(WORK, "adapter")
make_adapter(adapter, factors, {})
out = os.path.join(WORK, "merged")
p = merge(adapter, out)
check(p.returncode == 0, "merge-lora exits 0: " + p.stderr[-400:])
expect_merged(out, 8 / 4, "alpha/r")
for side in ("config.json", "generation_config.json"):
    if os.path.exists(os.path.join(BASE, side)):
        check(open(os.path.join(out, side)).read() == open(os.path.join(BASE, side)).read(), f"{side} copied")
g = subprocess.run([LANCET, "generate", "--model", out, "--prompt-ids", "5,6,7,8", "--max-tokens", "4",
                    "--ignore-eos", "--json", "--quiet"], capture_output=True, text=True, timeout=120)
check(g.returncode == 0 and len(json.loads(g.stdout.strip().splitlines()[-1])["ids"]) == 4,
      "the merged checkpoint generates: " + g.stderr[-300:])

# 2. rslora: alpha / sqrt(r)
make_adapter(adapter, factors, {"use_rslora": True})
p = merge(adapter, out)
check(p.returncode == 0, "rslora merge exits 0: " + p.stderr[-400:])
expect_merged(out, 8 / 2, "rslora")

# 2b. --dtype float32: the adapted weights are the exact sum in F32 (within one float32 ulp of
# the float64 one); the others stay byte-identical in the base's dtype.
p = merge(adapter, out, "--dtype", "float32")
check(p.returncode == 0, "float32 merge exits 0: " + p.stderr[-400:])
merged = read_safetensors(os.path.join(out, "model.safetensors"))
for name, (dtype, shape, raw) in base.items():
    mdtype, mshape, mraw = merged[name]
    module = name[: -len(".weight")]
    if module not in factors:
        check(mdtype == dtype and mraw == raw, f"float32 merge: {name} is byte-identical to the base")
        continue
    a, b = factors[module]
    want = (to_f64(dtype, shape, raw) + 4.0 * (b @ a)).astype(np.float32)
    got = np.frombuffer(mraw, dtype=np.float32).reshape(shape)
    ulps = np.abs(want.view(np.int32).astype(np.int64) - got.view(np.int32).astype(np.int64)).max()
    check(mdtype == "F32" and mshape == shape and ulps <= 1,
          f"float32 merge: {name} is F32 and equals W + 4 * B @ A within one f32 ulp (max {ulps})")

# 3. adapters that cannot be merged as written
bad_cases = [
    ("DoRA", {"use_dora": True}, factors, "use_dora"),
    ("a module the base lacks", {}, {"model.layers.9.self_attn.q_proj": factors[modules[0]]}, "model.layers.9"),
    ("rank contradicting r", {"r": 8}, factors, "r = 8"),
    ("embedding adapter", {}, {"model.embed_tokens": factors[modules[0]]}, "embed_tokens"),
]
for what, config, fac, needle in bad_cases:
    bad = os.path.join(WORK, "bad")
    shutil.rmtree(bad, ignore_errors=True)
    make_adapter(bad, fac, config)
    p = merge(bad, os.path.join(WORK, "bad_out"))
    check(p.returncode == 1 and needle in p.stderr, f"{what}: exit 1 naming '{needle}': {p.stderr.strip()[-300:]}")
os.remove(os.path.join(bad, "adapter_model.safetensors"))
open(os.path.join(bad, "adapter_model.bin"), "wb").write(b"\x80\x02")
p = merge(bad, os.path.join(WORK, "bad_out"))
check(p.returncode == 1 and "adapter_model.bin" in p.stderr, f"a pickle adapter is refused: {p.stderr.strip()[-200:]}")
print("merge_lora_check: all checks passed")
