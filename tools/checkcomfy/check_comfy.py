#!/usr/bin/python3
"""Independent check that ComfyUI would load a `kitchen quantize` output as
the converter meant it, in Python with numpy (no kitchen code).

Usage (from the repository root; needs numpy, e.g. Debian's python3-numpy):

    /usr/bin/python3 tools/checkcomfy/check_comfy.py INPUT.safetensors OUTPUT.safetensors

It reads both files with its own safetensors parser (struct + json) and
follows ComfyUI's loader, as read from comfy/utils.py (convert_old_quants,
detect_layer_quantization) and comfy/ops.py (mixed_precision_ops: Linear and
Embedding _load_from_state_dict):

- `__metadata__["_quantization_metadata"]`, if present, is turned into
  markers the way convert_old_quants does (json.loads(...)["layers"], each
  config json.dumps'd over the layer's marker). kitchen writes none: the
  output's __metadata__ must be the input's, and hold none.
- Each `P.comfy_quant` is read as ComfyUI reads it: json.loads of the raw
  bytes, conf.get("format"), convrot = conf.get("convrot",
  params.get("convrot", False)), convrot_groupsize =
  int(conf.get("convrot_groupsize", params.get("convrot_groupsize", 256)))
  when convrot is truthy; an Embedding reads only the flat keys, so the
  keys must be flat. Its bytes must be exactly json.dumps of the config
  built in ComfyUI's save order ({"format": ...} then "convrot",
  "convrot_groupsize"), with nothing after them.
- `P.weight` must be int8 [N, K] (a 2-D weight: ComfyUI loads int8 only into
  Linear and Embedding layers), `P.weight_scale` float32 [N, 1] (or [] for
  one scale per tensor); ConvRot needs a power-of-4 group dividing K.
- q and the scale are recomputed from the input weight. Without ConvRot,
  following the contract (docs/CONTRACT.md), they must be equal bit for
  bit. With ConvRot, the weight is rotated as comfy-kitchen's eager backend
  does it: each group of G values multiplied by an explicit Hadamard
  MATRIX (kron of the 4x4 seed, divided by sqrt(G)) in float32, rounded
  once to the weight's dtype, then quantized row-wise by the contract. q
  must equal that reference or differ by one step (the counts are
  reported); each scale must be within one ulp of the weight's dtype of the
  reference row's scale.
- Each layer is dequantized as ComfyUI does (q * scale, then the matrix
  rotation back) and its relative RMS error against the input weight is
  reported (the worst is printed).
- The file follows the format: 8-byte header length, JSON header padded
  with spaces to a multiple of 8, contiguous offsets covering the data
  exactly, every tensor aligned to its element size; every other tensor
  is a byte-for-byte copy of the input's.

Exits non-zero on the first failure. CI does not run this (it needs
Python); the Go test TestTinyOutputGolden pins the hashes of the outputs it
accepted.
"""

import json
import os
import struct
import sys

import numpy as np

# The safetensors reader and the contract's scalar rules are check_int8's:
# the two checkers share them rather than keep two copies.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "checkint8"))
from check_int8 import SIZES, TINY, raw, read, bf16_round, round_to, to_f32, quantize  # noqa: E402,F401

ULP = {"BF16": 2.0 ** -8, "F16": 2.0 ** -11, "F32": 2.0 ** -24}  # unit roundoff


def hadamard(g):
    """comfy-kitchen's _build_hadamard: the regular Hadamard matrix of size g
    (a power of 4), the Kronecker power of the 4x4 seed, over sqrt(g), in
    float32."""
    h4 = np.array([[1, 1, 1, -1], [1, 1, -1, 1], [1, -1, 1, 1], [-1, 1, 1, 1]], np.float32)
    h = h4
    while h.shape[0] < g:
        h = np.kron(h, h4).astype(np.float32)
    return (h / np.float32(np.sqrt(g))).astype(np.float32)


def rotate(x, g):
    """comfy-kitchen's _rotate_weight: each group of g values of each row
    times H^T, by matrix multiplication in float32."""
    n, k = x.shape
    h = hadamard(g)
    return np.matmul(x.reshape(n, k // g, g).astype(np.float32), h.T).astype(np.float32).reshape(n, k)


def comfy_conf(marker_bytes):
    """The config as ComfyUI's Linear loader reads it: (format, convrot,
    groupsize)."""
    conf = json.loads(marker_bytes)
    assert isinstance(conf, dict), "marker is not a JSON object"
    fmt = conf.get("format", None)
    params = conf.get("params", {})
    if not isinstance(params, dict):
        params = {}
    convrot = conf.get("convrot", params.get("convrot", False))
    group = int(conf.get("convrot_groupsize", params.get("convrot_groupsize", 256))) if convrot else 0
    return conf, fmt, bool(convrot), group


def comfy_marker(convrot, group):
    """The bytes ComfyUI's own save path writes for an int8 layer."""
    conf = {"format": "int8_tensorwise"}
    if convrot:
        conf["convrot"] = True
        conf["convrot_groupsize"] = group
    return json.dumps(conf).encode("utf-8")


def main(inp, out):
    _, meta_in, hin, din = read(inp)
    n, meta_out, hout, dout = read(out)
    assert (8 + n) % 8 == 0, "header not padded to a multiple of 8"
    for k, info in hout.items():
        b = info["data_offsets"][0]
        assert (8 + n + b) % SIZES[info["dtype"]] == 0, f"{k} is not aligned"
    assert meta_in == meta_out, "__metadata__ changed"
    assert "_quantization_metadata" not in (meta_out or {}), "output holds _quantization_metadata"

    # convert_old_quants: markers from _quantization_metadata (none here,
    # asserted above; kept to follow the loader).
    markers = {k: raw(hout, dout, k) for k in hout if k.endswith(".comfy_quant")}
    if meta_out and "_quantization_metadata" in meta_out:
        for name, conf in json.loads(meta_out["_quantization_metadata"])["layers"].items():
            markers[name + ".comfy_quant"] = json.dumps(conf).encode("utf-8")
    # detect_layer_quantization: any marker makes the model mixed_ops.
    assert markers, "no .comfy_quant marker: ComfyUI would load the int8 weights as plain numbers"
    first_marker = min(hout[k]["data_offsets"][0] for k in hout if k.endswith(".comfy_quant"))
    last_other = max(hout[k]["data_offsets"][1] for k in hout if not k.endswith(".comfy_quant"))
    assert first_marker >= last_other, "the markers are not after the other tensors"

    layers = convrot_layers = 0
    q_equal = q_off1 = q_total = 0
    s_equal = s_total = 0
    worst = (0.0, None)
    for key, mb in sorted(markers.items()):
        base = key[: -len(".comfy_quant")]
        conf, fmt, convrot, g = comfy_conf(mb)
        assert fmt == "int8_tensorwise", f"{key}: format {fmt!r}"
        assert hout[key]["dtype"] == "U8", f"{key}: dtype {hout[key]['dtype']}"
        assert "params" not in conf, f"{key}: nested params: ComfyUI's Embedding reads only flat keys"
        assert mb == comfy_marker(convrot, g), f"{key}: bytes {mb!r}, ComfyUI writes {comfy_marker(convrot, g)!r}"
        wname, sname = base + ".weight", base + ".weight_scale"
        assert sname in hout, f"{base}: no weight_scale (ComfyUI: Missing INT8 weight scale)"
        winfo, sinfo = hout[wname], hout[sname]
        assert winfo["dtype"] == "I8" and len(winfo["shape"]) == 2, f"{wname}: {winfo['dtype']} {winfo['shape']}"
        nr, k = winfo["shape"]
        iinfo = hin[wname]
        assert iinfo["shape"] == [nr, k], f"{wname}: shape {winfo['shape']} from {iinfo['shape']}"
        assert sinfo["dtype"] == "F32", f"{sname}: dtype {sinfo['dtype']}"
        per_row = sinfo["shape"] == [nr, 1]
        assert per_row or sinfo["shape"] == [], f"{sname}: shape {sinfo['shape']}"
        got_q = np.frombuffer(raw(hout, dout, wname), np.int8).reshape(nr, k)
        got_s = np.frombuffer(raw(hout, dout, sname), "<f4").reshape(sinfo["shape"])
        dt = iinfo["dtype"]
        x = to_f32(dt, raw(hin, din, wname), [nr, k])
        if convrot:
            assert g >= 4 and (g & (g - 1)) == 0 and (g.bit_length() - 1) % 2 == 0, f"{key}: group {g} is not a power of 4"
            assert k % g == 0, f"{key}: group {g} does not divide K = {k}"
            assert per_row, f"{sname}: ConvRot scales are per row"
            ref = round_to(dt, rotate(x, g))
            q, s = quantize(dt, ref, True)
            d = np.abs(got_q.astype(np.int32) - q.astype(np.int32))
            assert d.max() <= 1, f"{wname}: q differs from the float32-matrix reference by {d.max()} steps"
            q_equal += int((d == 0).sum())
            q_off1 += int((d == 1).sum())
            q_total += d.size
            # One ulp of the weight's dtype at the row's abs-max, over 127.
            tol = np.abs(s) * np.float32(2 * ULP[dt]) + np.float32(1e-45)
            assert (np.abs(got_s - s) <= tol).all(), f"{sname}: scales differ from the reference by more than an ulp"
            s_equal += int((got_s == s).sum())
            s_total += s.size
            back = rotate(got_q.astype(np.float32) * got_s, g)  # H symmetric: rotating undoes it
            convrot_layers += 1
        else:
            q, s = quantize(dt, x, per_row)
            assert np.array_equal(got_q, q), f"{wname}: q differs at {np.argwhere(got_q != q)[:5]}"
            assert got_s.tobytes() == s.astype("<f4").reshape(sinfo["shape"]).tobytes(), f"{sname}: scale differs"
            back = got_q.astype(np.float32) * got_s
        err = float(np.sqrt(((back.astype(np.float64) - x) ** 2).sum() / max((x.astype(np.float64) ** 2).sum(), 1e-300)))
        if err > worst[0]:
            worst = (err, base)
        layers += 1
    for k in hin:
        base = k[: -len(".weight")] if k.endswith(".weight") else None
        if base is None or base + ".comfy_quant" not in markers:
            assert hout[k]["dtype"] == hin[k]["dtype"] and hout[k]["shape"] == hin[k]["shape"], f"{k}: copy changed"
            assert raw(hin, din, k) == raw(hout, dout, k), f"{k}: copy differs"
    extra = set(hout) - set(hin) - {b + s for b in (m[: -len(".comfy_quant")] for m in markers)
                                   for s in (".weight_scale", ".comfy_quant")}
    assert not extra, f"tensors that are neither copies nor layer parts: {sorted(extra)[:5]}"
    print(f"ok: {out}: {layers} int8_tensorwise layers as ComfyUI loads them ({convrot_layers} ConvRot); "
          f"markers byte-identical to json.dumps, after the other tensors; no _quantization_metadata; "
          f"{len(hout)} tensors aligned and contiguous")
    if q_total:
        print(f"    ConvRot q against the float32-matrix reference: {q_equal} of {q_total} equal, "
              f"{q_off1} one step apart; scales: {s_equal} of {s_total} equal, the rest within an ulp")
    print(f"    worst relative RMS error of a dequantized weight: {worst[0]:.5f} ({worst[1]})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
