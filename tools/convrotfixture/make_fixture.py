#!/usr/bin/python3
"""Writes testdata/convrot-ck.safetensors, a small int8_tensorwise checkpoint
made the way comfy-kitchen's eager backend and ComfyUI's save path make one,
and testdata/convrot-ck-dequant.safetensors, the same layers dequantized the
way comfy-kitchen dequantizes them: the fixture of convert's
TestComfyKitchenFixture, which dequantizes the first with kitchen and
compares it with the second. Nothing here uses kitchen code.

Usage (from the repository root; needs PyTorch, e.g. Debian's python3-torch):

    /usr/bin/python3 tools/convrotfixture/make_fixture.py testdata

Quantization follows comfy_kitchen/backends/eager/quantization.py and
comfy_kitchen/tensor/int8_utils.py (comfy-kitchen 7d86acf):
- quantize_int8_convrot_weight: the Hadamard matrix is built in the
  weight's dtype (the Kronecker power of the 4x4 seed over sqrt(G)), each
  group of G input values is multiplied by its transpose with torch.matmul
  in that dtype, and the result is quantized row-wise;
- quantize_int8_rowwise / _tensorwise: scale = (amax.float() / 127)
  .clamp(min=1e-30), q = round(x / scale.to(x.dtype)).clamp(-128, 127);
- dequantize_int8_convrot_weight: (q.float() * scale) times the float32
  matrix; dequantize_int8_embedding gathers rows first, the same math for
  the whole table; dequantize_int8_simple: q.float() * scale.
Markers are json.dumps of the config in ComfyUI's order (flat keys), except
one layer written with the older nested "params" form, which ComfyUI's
Linear still reads. The file is laid out as safetensors' own serializer lays
it out: tensors sorted by dtype alignment (largest first), then by name;
compact JSON header padded with spaces to a multiple of 8; no __metadata__.
"""

import json
import os
import struct
import sys

import torch

DTYPES = {torch.float32: ("F32", 4), torch.bfloat16: ("BF16", 2), torch.int8: ("I8", 1), torch.uint8: ("U8", 1)}


def build_hadamard(size, dtype):
    h4 = torch.tensor([[1, 1, 1, -1], [1, 1, -1, 1], [1, -1, 1, 1], [-1, 1, 1, 1]], dtype=dtype)
    h = h4
    n = 4
    while n < size:
        h = torch.kron(h, h4)
        n *= 4
    return h / (size ** 0.5)


def rotate_weight(w, h, g):
    n, k = w.shape
    return torch.matmul(w.reshape(n, k // g, g), h.T.to(dtype=w.dtype)).reshape(n, k)


def scale_for_math(scale, x):
    scale = scale.to(dtype=x.dtype)
    return torch.where(scale == 0, torch.full_like(scale, torch.finfo(x.dtype).tiny), scale)


def quantize_rowwise(x):
    scale = (x.abs().amax(dim=-1, keepdim=True).float() / 127.0).clamp(min=1e-30)
    q = (x / scale_for_math(scale, x)).round().clamp(-128.0, 127.0).to(torch.int8)
    return q, scale


def quantize_tensorwise(x):
    scale = (x.abs().max().float() / 127.0).clamp(min=1e-30)
    q = (x / scale_for_math(scale, x)).round().clamp(-128.0, 127.0).to(torch.int8)
    return q, scale


def quantize_convrot(w, g):
    return quantize_rowwise(rotate_weight(w, build_hadamard(g, w.dtype), g))


def dequantize(q, scale, g):
    x = q.float() * scale
    if g:
        x = rotate_weight(x, build_hadamard(g, torch.float32), g)
    return x


def marker(conf):
    return torch.tensor(list(json.dumps(conf).encode("utf-8")), dtype=torch.uint8)


def save(path, tensors):
    """safetensors' layout: alignment descending, then name; compact header."""
    order = sorted(tensors, key=lambda n: (-DTYPES[tensors[n].dtype][1], n))
    header, off, blobs = {}, 0, []
    for n in order:
        t = tensors[n].contiguous()
        b = t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[n] = {"dtype": DTYPES[t.dtype][0], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main(outdir):
    torch.manual_seed(20261130)
    # name, shape, ConvRot group (0: none), per-tensor, nested "params"
    layers = [
        ("blocks.0.attn.qkv", (32, 256), 256, False, False),
        ("blocks.0.mlp.fc1", (64, 192), 64, False, False),  # a group below 256, as published files mix
        ("blocks.0.mlp.fc2", (32, 128), 16, False, True),  # the older nested form
        ("y_embedder.embedding_table", (40, 64), 64, False, False),  # an int8 embedding table
        ("blocks.0.proj", (32, 96), 0, False, False),  # per row, no rotation
        ("blocks.0.gate", (16, 64), 0, True, False),  # one scale
    ]
    quantized, dequantized = {}, {}
    for name, shape, g, per_tensor, nested in layers:
        w = (torch.randn(shape) / shape[1] ** 0.5).to(torch.bfloat16)
        w[0, 3] *= 40  # an outlier: what ConvRot is for
        if g:
            q, s = quantize_convrot(w, g)
        elif per_tensor:
            q, s = quantize_tensorwise(w)
        else:
            q, s = quantize_rowwise(w)
        conf = {"format": "int8_tensorwise"}
        if g and nested:
            conf["params"] = {"convrot": True, "convrot_groupsize": g}
        elif g:
            conf["convrot"] = True
            conf["convrot_groupsize"] = g
        quantized[name + ".weight"] = q
        quantized[name + ".weight_scale"] = s.float()
        quantized[name + ".comfy_quant"] = marker(conf)
        dequantized[name + ".weight"] = dequantize(q, s, g)
    quantized["blocks.0.attn.qkv.bias"] = torch.randn(32).to(torch.bfloat16)
    dequantized["blocks.0.attn.qkv.bias"] = quantized["blocks.0.attn.qkv.bias"]
    save(os.path.join(outdir, "convrot-ck.safetensors"), quantized)
    save(os.path.join(outdir, "convrot-ck-dequant.safetensors"), dequantized)


if __name__ == "__main__":
    main(sys.argv[1])
