#!/usr/bin/python3
"""Independent check of a `kitchen quantize` output, in Python with numpy.

Usage (from the repository root; needs numpy, e.g. Debian's python3-numpy):

    /usr/bin/python3 tools/checkint8/check_int8.py INPUT.safetensors OUTPUT.safetensors

It reads both files with its own safetensors parser (struct + json, no
safetensors package), checks the output against the format's rules (8-byte
little-endian header length, JSON header, header padded with spaces to a
multiple of 8, contiguous data offsets covering the data exactly, sizes
matching dtype x shape), checks that every tensor starts at a multiple of its
element size, and then recomputes every int8_tensorwise layer from the
input weight following docs/CONTRACT.md with numpy float32 arithmetic,
comparing q and the scale bit for bit (one scale per row when the scale's
shape is [N, 1], as ComfyUI decides; one per tensor when it is []).
ConvRot layers are for tools/checkcomfy/check_comfy.py. Every other tensor must be a
byte-for-byte copy, and __metadata__ must be kept. Exits non-zero on the
first mismatch. CI does not run this (it needs Python); the Go test
TestTinyOutputGolden pins the hash of the output this script accepted.
"""

import json
import struct
import sys

import numpy as np

# Bits an element, as the safetensors format defines them: the fp4 and fp6
# types are packed, and a tensor of them must fill whole bytes.
BITS = {"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
        "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
        "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
        "I64": 64, "U64": 64, "F64": 64}
SIZES = {k: max(1, v // 8) for k, v in BITS.items()}  # bytes an element, for alignment


def nbytes(info):
    bits = BITS[info["dtype"]] * int(np.prod(info["shape"], dtype=np.int64))
    assert bits % 8 == 0, f"shape {info['shape']} of {info['dtype']} is not a whole number of bytes"
    return bits // 8


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", None)
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    end = 0
    for b, e, k in spans:
        assert b == end, f"{path}: {k} starts at {b}, previous ends at {end}"
        info = header[k]
        want = nbytes(info)
        assert e - b == want, f"{path}: {k} spans {e - b} bytes, needs {want}"
        end = e
    assert end == len(data), f"{path}: tensors cover {end} of {len(data)} data bytes"
    return n, meta, header, data


def raw(header, data, name):
    b, e = header[name]["data_offsets"]
    return data[b:e]


def bf16_round(x):
    """Round float32 values to bfloat16 (nearest, ties to even), as float32."""
    x = np.asarray(x, np.float32)
    u = np.atleast_1d(x).view(np.uint32).astype(np.uint64)
    u = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) & np.uint64(0xFFFF0000)
    return u.astype(np.uint32).view(np.float32).reshape(x.shape)


def to_f32(dtype, b, shape):
    if dtype == "BF16":
        return (np.frombuffer(b, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    if dtype == "F16":
        return np.frombuffer(b, "<f2").astype(np.float32).reshape(shape)
    return np.frombuffer(b, "<f4").reshape(shape)


def round_to(dtype, v):
    if dtype == "BF16":
        return bf16_round(v)
    if dtype == "F16":
        return v.astype(np.float16).astype(np.float32)
    return v.astype(np.float32)


TINY = {"BF16": np.float32(2.0 ** -126), "F16": np.float32(2.0 ** -14), "F32": np.float32(2.0 ** -126)}


def quantize(dtype, x, per_row):
    a = np.abs(x).max(axis=-1, keepdims=True) if per_row else np.abs(x).max()
    s = np.maximum(np.float32(a) / np.float32(127), np.float32(1e-30)).astype(np.float32)
    t = round_to(dtype, np.asarray(s, np.float32))
    t = np.where(t == 0, TINY[dtype], t).astype(np.float32)
    y = round_to(dtype, (x / t).astype(np.float32))
    q = np.clip(np.rint(y), -128, 127).astype(np.int8)
    return q, np.asarray(s, np.float32)


def main(inp, out):
    _, meta_in, hin, din = read(inp)
    n, meta_out, hout, dout = read(out)
    assert (8 + n) % 8 == 0, "header not padded to a multiple of 8"
    assert meta_in == meta_out, "__metadata__ changed"
    for k, info in hout.items():
        b = info["data_offsets"][0]
        assert (8 + n + b) % SIZES[info["dtype"]] == 0, f"{k} is not aligned"
    layers = 0
    for k, info in hin.items():
        base = k[: -len(".weight")] if k.endswith(".weight") else None
        cq = base + ".comfy_quant" if base else None
        if cq not in hout:
            assert raw(hin, din, k) == raw(hout, dout, k), f"{k}: copy differs"
            continue
        cfg = json.loads(raw(hout, dout, cq))
        assert cfg["format"] == "int8_tensorwise", cfg
        assert not cfg.get("convrot"), f"{cq}: ConvRot layers are checked by tools/checkcomfy/check_comfy.py"
        # As in ComfyUI, the scale's shape says whether scales are per row
        # (the legacy "per_row" key is ignored).
        per_row = hout[base + ".weight_scale"]["shape"] == [info["shape"][0], 1]
        x = to_f32(info["dtype"], raw(hin, din, k), info["shape"])
        q, s = quantize(info["dtype"], x, per_row)
        assert hout[k]["dtype"] == "I8" and hout[base + ".weight_scale"]["dtype"] == "F32"
        got_q = np.frombuffer(raw(hout, dout, k), np.int8).reshape(info["shape"])
        got_s = np.frombuffer(raw(hout, dout, base + ".weight_scale"), "<f4")
        assert np.array_equal(got_q, q), f"{k}: q differs at {np.argwhere(got_q != q)[:5]}"
        assert got_s.tobytes() == s.astype("<f4").tobytes(), f"{k}: scale differs"
        assert list(hout[base + ".weight_scale"]["shape"]) == ([info["shape"][0], 1] if per_row else [])
        layers += 1
    print(f"ok: {out}: {layers} int8_tensorwise layers recomputed and equal; "
          f"{len(hout)} tensors aligned and contiguous")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
