"""Reference data for gguf_blocks_test.cc, computed by the PyPI `gguf` package (gguf-py).

Usage: gguf_blocks_ref.py OUT_DIR

For each block type writes OUT_DIR/<name>.blocks (random block bytes whose f16 scale fields
hold random finite values) and OUT_DIR/<name>.deq (gguf.quants.dequantize of them, float32).
Also writes OUT_DIR/input.f32 (random floats) and OUT_DIR/<name>.quant
(gguf.quants.quantize of the input) for every type gguf-py can quantize.
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES

# Byte offsets of the f16 fields inside one block.
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
N_BLOCKS = 64


def random_finite_f16(rng, n):
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    # Exponent 31 is inf/NaN: replace by a random normal exponent.
    bad = (bits & 0x7C00) == 0x7C00
    bits[bad] = (bits[bad] & 0x83FF) | (rng.integers(0, 31, size=int(bad.sum())).astype(np.uint16) << 10)
    return bits


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(1234)
    for qt, fields in F16_FIELDS.items():
        _, type_size = GGML_QUANT_SIZES[qt]
        blocks = rng.integers(0, 256, size=(N_BLOCKS, type_size), dtype=np.uint8)
        for off in fields:
            blocks[:, off:off + 2] = random_finite_f16(rng, N_BLOCKS).view(np.uint8).reshape(N_BLOCKS, 2)
        deq = quants.dequantize(blocks.reshape(-1), qt).astype(np.float32)
        blocks.tofile(os.path.join(out, qt.name + ".blocks"))
        deq.tofile(os.path.join(out, qt.name + ".deq"))

    # Quantization input: rows of different scales, with exact ties and zero blocks mixed in.
    x = rng.standard_normal(4096).astype(np.float32)
    x[:1024] *= 0.02
    x[1024:2048] *= 30.0
    x[2048:2080] = 0.0                       # an all-zero block
    x[2080:2112] = np.arange(32) - 16.0      # values that land exactly on .5 boundaries
    x[2112:2144] = 1.0                       # constant block
    x.tofile(os.path.join(out, "input.f32"))
    for qt in (T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.BF16, T.F16):
        q = quants.quantize(x.reshape(4, -1), qt)
        np.ascontiguousarray(q).tofile(os.path.join(out, qt.name + ".quant"))


if __name__ == "__main__":
    main()
