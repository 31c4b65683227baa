#!/usr/bin/python3
"""Golden-vector generator for the ConvRot operations of the INT8 contract.

What it is
    An independent PyTorch reference for the five ConvRot operations of
    docs/CONTRACT.md ("The INT8 family beyond Q/DQ"):
        quantize_int8_convrot_weight(W [N,K], G, stochastic_rounding)
        quantize_and_rotate_rowwise(x [..., K], G, stochastic_rounding)
        dequantize_int8_convrot_weight(q, scale, G)              -> float32
        dequantize_int8_convrot_weight_dtype(q, scale, G, out)   -> out
        dequantize_int8_embedding(q [V,D], scale, indices, G, out)
    computed the way PyTorch users write them: the rotation is a float32
    matrix product of each group of G consecutive values with the explicit
    matrix H_G (H_4 = [[1,1,1,-1],[1,1,-1,1],[1,-1,1,1],[-1,1,1,1]],
    kron(h, H_4) repeated, divided by sqrt(G)), rounded once to the dtype the
    result is stored in.  The row-wise quantization after it (including
    stochastic rounding, whose noise index is the element's flat row-major
    index in the rotated tensor) and the q * scale product before a
    dequantizing rotation are gen_golden.py's own functions, imported, not
    copied.  Inputs are fixed (fixed seeds, explicit tensors); inputs and
    outputs are written as hex-encoded little-endian bytes to a JSON file.

How to run it (from the repository root)
    /usr/bin/python3 tools/golden/gen_convrot.py testdata/golden/convrot.json

    It needs Debian's python3-torch (written against torch 1.13) and numpy,
    and gen_golden.py next to it.  CI never runs it: the JSON is committed and
    the Go tests only read it.

Matrix product versus kitchen's butterfly
    PyTorch sums x_group @ H_G in whatever order its BLAS chooses (this
    script pins one thread; the order may still differ on another BLAS or
    CPU, so re-running it elsewhere can change a few "out"/"q" bytes, never
    the butterfly fields).  kitchen fixes one order instead, and this script
    also computes it, separately and in numpy float32, so that each case
    carries kitchen's exact answer next to PyTorch's:

      * radix-4 fast transform over each group of G = 4^n values, n stages;
      * STAGE ORDER: the first stage combines the finest 4 consecutive
        elements (stride 1: the LAST Kronecker factor of H_G), each later
        stage 4 elements 4 times further apart (strides 1, 4, 16, ...,
        G/4), i.e. the coarsest (first) Kronecker factor is applied last;
      * each butterfly maps (a, b, c, d), the elements at j, j+stride,
        j+2*stride, j+3*stride, to (s-2d, s-2c, s-2b, s-2a) with
        s = ((a+b)+c)+d, every operation a float32 operation rounded to
        nearest even (2*v is exact);
      * after the last stage every value is multiplied by 2^-n (exact but
        for subnormal results), then rounded once to the stored dtype.

    The per-case field "butterfly_equal" (whether the float32 rotated
    values, before the rounding to the stored dtype, are bit-identical
    between the two) and the butterfly results themselves
    ("q_butterfly"/"scale_butterfly" for quantize cases, "out_butterfly"
    for dequantize cases) let the Go tests check kitchen exactly against
    the butterfly and within a bound against the matrix.  The script prints
    how often and by how much the two differ.  Measure that difference
    against the row's magnitude, not the element's: an output that cancels
    to near zero can differ by many of its own ulps (even in sign), while
    the difference stays within a few ulps of the row's largest value.

Notes
  * Every case is a valid input; the Go suite has its own bad-input table.
  * Inputs stay far from float32 overflow: the butterfly's unscaled sums
    are up to sqrt(G) times larger than the matrix's partial sums, so a
    near-FLT_MAX input can overflow in one and not the other.
"""

import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_golden as gg  # noqa: E402  (the Q/DQ reference: quantize, SR noise, encoding)

DTYPES = gg.DTYPES
NAME_OF = gg.NAME_OF
BITS_VIEW = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}
GROUPS = [4, 16, 64, 256]


# --------------------------------------------------------------------------
# The rotation, as PyTorch users write it: an explicit matrix
# --------------------------------------------------------------------------

_H = {}


def hadamard(g):
    """Normalized regular Hadamard matrix H_g, float32."""
    if g not in _H:
        h4 = torch.tensor([[1, 1, 1, -1], [1, 1, -1, 1], [1, -1, 1, 1], [-1, 1, 1, 1]], dtype=torch.float32)
        h = h4
        while h.shape[0] < g:
            h = torch.kron(h, h4)
        assert h.shape[0] == g, g
        _H[g] = h / math.sqrt(g)
    return _H[g]


def rotate_matrix(x, g):
    """float32 x_group @ H_g over the last dimension; float32 result, same shape."""
    k = x.shape[-1]
    assert k % g == 0
    groups = x.float().reshape(-1, k // g, g)
    return torch.matmul(groups, hadamard(g)).reshape(x.shape)


# --------------------------------------------------------------------------
# kitchen's summation order (for the comparison only), numpy float32
# --------------------------------------------------------------------------

def rotate_butterfly(x, g):
    """Radix-4 fast transform, finest stage first; float32 tensor result."""
    v = x.float().numpy().astype(np.float32).reshape(-1, x.shape[-1])
    rows, k = v.shape
    assert k % g == 0
    two = np.float32(2)
    stride, n = 1, 0
    while stride < g:
        blk = v.reshape(rows, k // (4 * stride), 4, stride)
        a, b, c, d = blk[:, :, 0, :], blk[:, :, 1, :], blk[:, :, 2, :], blk[:, :, 3, :]
        s = ((a + b) + c) + d
        v = np.stack([s - two * d, s - two * c, s - two * b, s - two * a], axis=2).reshape(rows, k)
        assert v.dtype == np.float32
        stride *= 4
        n += 1
    v = v * np.float32(2.0 ** -n)
    assert v.dtype == np.float32
    return torch.from_numpy(np.ascontiguousarray(v)).reshape(x.shape)


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------

def bits(t):
    return t.contiguous().view(BITS_VIEW[t.dtype]).reshape(-1).long()


def bit_equal(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    return bool(torch.equal(bits(a), bits(b)))


def ordered(t):
    """Float bits mapped to integers that order like the values (+0 == -0)."""
    w = 32 if t.dtype == torch.float32 else 16
    bb = bits(t) & ((1 << w) - 1)
    sign = bb >> (w - 1)
    mag = bb & ((1 << (w - 1)) - 1)
    return torch.where(sign == 1, -mag, mag)


def ulp_distance(a, b):
    if a.numel() == 0:
        return 0
    return int((ordered(a) - ordered(b)).abs().max().item())


def shape_str(shape):
    return "x".join(str(d) for d in shape) if shape else "scalar"


def seed_str(seed):
    return "rne" if seed == 0 else "sr%d" % seed


CASES = []
NAMES = set()
STATS = {}


def add(case, stat):
    assert case["name"] not in NAMES, case["name"]
    NAMES.add(case["name"])
    CASES.append(case)
    key = (case["op"], case.get("dtype") or case["out_dtype"])
    s = STATS.setdefault(key, {
        "cases": 0, "cases_f32_diff": 0, "cases_stored_diff": 0, "cases_q_diff": 0, "cases_scale_diff": 0,
        "elems": 0, "elems_f32_diff": 0, "elems_stored_diff": 0, "elems_q_diff": 0,
        "max_ulp_stored": 0, "max_q_step": 0, "max_rowulp_f32": 0.0, "max_rowulp_stored": 0.0})
    s["cases"] += 1
    for k, v in stat.items():
        if k.startswith("max_"):
            s[k] = max(s[k], v)
        else:
            s[k] += v


MANT_BITS = {torch.float32: 23, torch.float16: 10, torch.bfloat16: 7}
MIN_EXP = {torch.float32: -126, torch.float16: -14, torch.bfloat16: -126}


def row_ulps(m, b):
    """max |m - b| in ulps of the row's largest |value| (of m's dtype): the
    error measure that suits a sum, whose terms can cancel to near zero."""
    dt = m.dtype
    k = m.shape[-1] if m.dim() else 1
    m64, b64 = m.double().reshape(-1, k), b.double().reshape(-1, k)
    same = bits(m).reshape(-1, k) == bits(b).reshape(-1, k)
    diff = torch.where(same, torch.zeros_like(m64), (m64 - b64).abs())
    rowmax = m64.abs().amax(-1, keepdim=True)
    e = torch.floor(torch.log2(rowmax.clamp(min=1e-300))).clamp(min=MIN_EXP[dt])
    ulp = torch.pow(2.0, e - MANT_BITS[dt])
    return float((diff / ulp).max().item()) if diff.numel() else 0.0


def compare(rot32_m, rot32_b, stored_m, stored_b):
    f32_diff = int((bits(rot32_m) != bits(rot32_b)).sum().item())
    stored_diff = int((bits(stored_m) != bits(stored_b)).sum().item())
    return {
        "elems": rot32_m.numel(),
        "elems_f32_diff": f32_diff,
        "elems_stored_diff": stored_diff,
        "cases_f32_diff": int(f32_diff > 0),
        "cases_stored_diff": int(stored_diff > 0),
        "max_ulp_stored": ulp_distance(stored_m, stored_b),
        "max_rowulp_f32": row_ulps(rot32_m, rot32_b),
        "max_rowulp_stored": row_ulps(stored_m, stored_b),
    }


# --------------------------------------------------------------------------
# Case builders
# --------------------------------------------------------------------------

QUANT_OPS = {"weight": "quantize_int8_convrot_weight", "act": "quantize_and_rotate_rowwise"}


def add_quantize(kind, name, x, g, seed):
    """kind "weight" (2-D W) or "act" (x of any rank)."""
    op = QUANT_OPS[kind]
    if kind == "weight":
        assert x.dim() == 2
    assert torch.isfinite(x.float()).all()
    dt = x.dtype
    rot32_m = rotate_matrix(x, g)
    rot32_b = rotate_butterfly(x, g)
    rot_m, rot_b = rot32_m.to(dt), rot32_b.to(dt)
    assert torch.isfinite(rot_m.float()).all() and torch.isfinite(rot_b.float()).all()
    q, s = gg.quantize_int8_rowwise(rot_m, seed)
    qb, sb = gg.quantize_int8_rowwise(rot_b, seed)
    assert q.shape == x.shape and tuple(s.shape) == tuple(x.shape[:-1]) + (1,)
    q_step = int((q.int() - qb.int()).abs().max().item())
    assert q_step <= 1, (name, q_step)  # the contract's bound
    stat = compare(rot32_m, rot32_b, rot_m, rot_b)
    stat.update({
        "elems_q_diff": int((q != qb).sum().item()),
        "cases_q_diff": int(not torch.equal(q, qb)),
        "cases_scale_diff": int(not bit_equal(s, sb)),
        "max_q_step": q_step,
    })
    add({
        "name": "%s/%s/G%d/%s/%s/%s" % ("convrot_weight" if kind == "weight" else "rotate_rowwise",
                                        NAME_OF[dt], g, name, shape_str(list(x.shape)), seed_str(seed)),
        "op": op,
        "dtype": NAME_OF[dt],
        "shape": list(x.shape),
        "x": gg.hexbytes(x),
        "group": g,
        "seed": seed,
        "q": gg.hexbytes(q),
        "q_shape": list(q.shape),
        "scale": gg.hexbytes(s.float()),
        "scale_dtype": "float32",
        "scale_shape": list(s.shape),
        "butterfly_equal": stat["elems_f32_diff"] == 0,
        "q_butterfly": gg.hexbytes(qb),
        "scale_butterfly": gg.hexbytes(sb.float()),
    }, stat)


def add_dequant(name, q, scale, g, out_dtype=None):
    """dequantize_int8_convrot_weight (out_dtype None: float32) or its _dtype form."""
    assert q.dim() == 2 and q.dtype == torch.int8
    y = gg.dequantize_int8_simple_dtype(q, scale, torch.float32)  # f32(q) * f32(scale_b)
    odt = torch.float32 if out_dtype is None else out_dtype
    rot32_m = rotate_matrix(y, g)
    rot32_b = rotate_butterfly(y, g)
    out_m, out_b = rot32_m.to(odt), rot32_b.to(odt)
    op = "dequantize_int8_convrot_weight" if out_dtype is None else "dequantize_int8_convrot_weight_dtype"
    add({
        "name": "%s/%s->%s/G%d/%s/q%s/s%s" % ("dequant_convrot" if out_dtype is None else "dequant_convrot_dtype",
                                             NAME_OF[scale.dtype], NAME_OF[odt], g, name,
                                             shape_str(list(q.shape)), shape_str(list(scale.shape))),
        "op": op,
        "group": g,
        "q": gg.hexbytes(q),
        "q_shape": list(q.shape),
        "scale": gg.hexbytes(scale),
        "scale_dtype": NAME_OF[scale.dtype],
        "scale_shape": list(scale.shape),
        "out_dtype": NAME_OF[odt],
        "out": gg.hexbytes(out_m),
        "out_shape": list(out_m.shape),
        "butterfly_equal": bool(torch.equal(bits(rot32_m), bits(rot32_b))),
        "out_butterfly": gg.hexbytes(out_b),
    }, compare(rot32_m, rot32_b, out_m, out_b))


def add_embedding(name, q, scale, indices, g, out_dtype):
    assert q.dim() == 2 and q.dtype == torch.int8
    assert indices.dtype in (torch.int32, torch.int64)
    v, d = q.shape
    assert scale.numel() == 1 or tuple(scale.shape) == (v, 1)
    # gather first, then f32(q_row) * f32(scale_row), as users write it
    rows = torch.nn.functional.embedding(indices, q)
    srows = scale.reshape(()) if scale.numel() == 1 else torch.nn.functional.embedding(indices, scale)
    y = gg.dequantize_int8_simple_dtype(rows, srows, torch.float32)
    if g > 0:
        rot32_m = rotate_matrix(y, g)
        rot32_b = rotate_butterfly(y, g)
    else:
        rot32_m = rot32_b = y
    out_m, out_b = rot32_m.to(out_dtype), rot32_b.to(out_dtype)
    assert tuple(out_m.shape) == tuple(indices.shape) + (d,)
    add({
        "name": "embedding/%s->%s/G%d/%s/q%s/s%s/%s%s" % (
            NAME_OF[scale.dtype], NAME_OF[out_dtype], g, name, shape_str([v, d]),
            shape_str(list(scale.shape)), "i32_" if indices.dtype == torch.int32 else "i64_",
            shape_str(list(indices.shape))),
        "op": "dequantize_int8_embedding",
        "group": g,
        "q": gg.hexbytes(q),
        "q_shape": [v, d],
        "scale": gg.hexbytes(scale),
        "scale_dtype": NAME_OF[scale.dtype],
        "scale_shape": list(scale.shape),
        "indices": gg.hexbytes(indices),
        "indices_dtype": "int32" if indices.dtype == torch.int32 else "int64",
        "indices_shape": list(indices.shape),
        "out_dtype": NAME_OF[out_dtype],
        "out": gg.hexbytes(out_m),
        "out_shape": list(out_m.shape),
        "butterfly_equal": bool(torch.equal(bits(rot32_m), bits(rot32_b))),
        "out_butterfly": gg.hexbytes(out_b),
    }, compare(rot32_m, rot32_b, out_m, out_b))


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------

def dit_like(shape, dt, n_outliers=3, gen=None):
    """randn with a few outlier channels (the same columns in every row),
    30-300x larger, and rows of varied magnitude: what DiT activations and
    weights look like."""
    k = shape[-1]
    x = torch.randn(shape, generator=gen)
    cols = torch.randperm(k, generator=gen)[:n_outliers]
    mags = 30 + 270 * torch.rand(n_outliers, generator=gen)
    x[..., cols] *= mags
    x = x * torch.exp(torch.randn(tuple(shape[:-1]) + (1,), generator=gen))
    return x.to(dt)


def exact_in(x64, dt):
    t = x64.to(torch.float32)
    return bool(torch.equal(t.double(), x64)) and bool(torch.equal(t.to(dt).double(), x64))


def tie_rows(dt, g, k, nrows, gen):
    """Rows whose rotation is exact and hits ties: the rotated row r has
    max |r| = 127 t (t a power of 2, so the scale is exactly t) and other
    entries at half-integer multiples of t; x = r rotated (the rotation is
    an involution), kept only when x is exact in dt and rotating it back
    gives r exactly in float32 on both summation orders."""
    mults = [0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, 126.5, -126.5, 64.5, -64.5, 11.5, -12.5, 100.5, 1.0, -3.0]
    h64 = hadamard(g).double()
    rows, tries = [], 0
    while len(rows) < nrows:
        tries += 1
        assert tries < 200000, "no exact tie rows for %s G=%d" % (dt, g)
        t = 2.0 ** [0, -3, 5, -10][len(rows) % 4]
        r = torch.zeros(k, dtype=torch.float64)
        pos = torch.randperm(k, generator=gen)
        r[pos[0]] = 127 * t * (1 if torch.rand(1, generator=gen).item() < 0.5 else -1)
        n_ties = 1 + int(torch.randint(0, 3 if g <= 16 else 2, (1,), generator=gen).item())
        for i in range(n_ties):
            r[pos[1 + i]] = mults[int(torch.randint(0, len(mults), (1,), generator=gen).item())] * t
        x64 = torch.matmul(r.reshape(-1, g), h64).reshape(k)
        if not exact_in(x64, dt):
            continue
        x = x64.to(dt)
        if not (torch.equal(rotate_matrix(x, g).double(), r) and torch.equal(rotate_butterfly(x, g).double(), r)):
            continue
        rows.append(x)
    return torch.stack(rows)


# --------------------------------------------------------------------------
# Case list
# --------------------------------------------------------------------------

def quantize_cases():
    gen = torch.Generator().manual_seed(20250101)
    for dname, dt in DTYPES.items():
        for g in GROUPS:
            rows = {4: 5, 16: 4, 64: 3, 256: 3}[g]
            # K = G
            add_quantize("weight", "randn", torch.randn(rows, g, generator=gen).to(dt), g, 0)
            add_quantize("act", "randn", torch.randn(rows, g, generator=gen).to(dt), g, 0)
            # K = several groups, round-half-even and stochastic rounding
            ng = {4: 6, 16: 5, 64: 3, 256: 2}[g]
            w = torch.randn(rows, ng * g, generator=gen).to(dt)
            for seed in (0, 42):
                add_quantize("weight", "randn", w, g, seed)
            x = torch.randn(rows + 1, ng * g, generator=gen).to(dt)
            for seed in (0, 1):
                add_quantize("act", "randn", x, g, seed)
            # DiT-like outlier channels
            w = dit_like([rows + 2, 2 * g], dt, gen=gen)
            add_quantize("weight", "dit", w, g, 0)
            add_quantize("weight", "dit", w, g, 2**32 - 3)
            x = dit_like([2, 3, 2 * g] if g <= 64 else [2, 2, g], dt, gen=gen)  # 3-D activations
            add_quantize("act", "dit", x, g, 0)
            add_quantize("act", "dit", x, g, 42)
            # 1-D x (one row)
            x = dit_like([3 * g if g <= 64 else g], dt, gen=gen)
            add_quantize("act", "dit", x, g, 0)
            add_quantize("act", "randn", torch.randn(g, generator=gen).to(dt), g, 7)
        # all-zero rows (one of them -0) among non-zero rows
        for g in (4, 16):
            w = torch.randn(5, 2 * g, generator=gen).to(dt)
            w[1] = 0
            w[3] = -0.0
            w[4, :g] = 0  # a zero group in a non-zero row
            add_quantize("weight", "zero_rows", w, g, 0)
            add_quantize("weight", "zero_rows", w, g, 42)
            x = torch.zeros(2, 2, g, dtype=dt)
            x[1, 0] = torch.randn(g, generator=gen).to(dt)
            add_quantize("act", "zero_rows", x, g, 0)
            add_quantize("act", "zero_rows", torch.zeros(g, dtype=dt), g, 1)
        # exact ties after the rotation
        for g, k in ((4, 8), (16, 16), (64, 64)):
            x = tie_rows(dt, g, k, 4, gen)
            for seed in (0, 1):
                add_quantize("weight", "ties", x, g, seed)
            add_quantize("act", "ties", x.reshape(2, 2, k), g, 0)
        # integers and exact dyadics: every sum exact, both orders agree
        w = torch.randint(-8, 9, (4, 32), generator=gen).to(dt)
        add_quantize("weight", "small_ints", w, 16, 0)
        # rows of very different magnitudes
        x = (torch.randn(6, 64, generator=gen) * torch.exp(torch.randn(6, 1, generator=gen) * 5)).to(dt)
        add_quantize("act", "rowmag", x, 16, 0)
        add_quantize("weight", "rowmag", x, 64, 0)
    # tiny float32 values (products subnormal in the matrix form; q is 0 either way)
    x = (torch.randn(3, 16, generator=gen) * 1e-38).to(torch.float32)
    add_quantize("weight", "f32_tiny", x, 16, 0)
    # float16 values near the bottom of its range
    x = (torch.randn(3, 64, generator=gen) * 2.0**-14).to(torch.float16)
    add_quantize("act", "f16_tiny", x, 64, 0)
    add_quantize("act", "f16_tiny", x, 16, 42)
    # the 1024 group, one case per op
    add_quantize("weight", "dit", dit_like([3, 2048], torch.float32, gen=gen), 1024, 0)
    add_quantize("act", "dit", dit_like([2, 1, 1024], torch.bfloat16, gen=gen), 1024, 42)


def realistic_q(rows, k, g, gen, dit=False):
    """q and float32 scale from this script's own ConvRot weight quantization."""
    w = dit_like([rows, k], torch.float32, gen=gen) if dit else torch.randn(rows, k, generator=gen)
    q, s = gg.quantize_int8_rowwise(rotate_matrix(w, g), 0)
    return q, s


def arbitrary_q(rows, k, gen):
    q = torch.randint(-128, 128, (rows, k), generator=gen, dtype=torch.int16).to(torch.int8)
    q[0, :3] = -128
    if rows > 2:
        q[1] = -128  # a constant row: rotation of a constant group
        q[2] = 127
    return q


def dequant_cases():
    gen = torch.Generator().manual_seed(777)
    for sname, sdt in DTYPES.items():
        for g in GROUPS:
            ng = {4: 4, 16: 3, 64: 2, 256: 2}[g]
            rows = {4: 5, 16: 4, 64: 3, 256: 3}[g]
            qr, sr = realistic_q(rows, ng * g, g, gen)
            qd, sd = realistic_q(rows, g, g, gen, dit=True)
            qa = arbitrary_q(rows, g * (2 if g <= 64 else 1), gen)
            sa = (torch.rand(rows, 1, generator=gen) * 0.05 + 1e-4)
            # float32 form
            add_dequant("randn", qr, sr.to(sdt), g)
            add_dequant("dit", qd, sd.to(sdt), g)
            add_dequant("arbitrary", qa, sa.to(sdt), g)
            # every output dtype
            for oname, odt in DTYPES.items():
                add_dequant("randn", qr, sr.to(sdt), g, odt)
                add_dequant("arbitrary", qa, sa.to(sdt), g, odt)
                if g in (16, 256):
                    add_dequant("dit", qd, sd.to(sdt), g, odt)
        # single-value scales ([] and [1]) and a full-shape scale
        qa = arbitrary_q(4, 32, gen)
        add_dequant("arbitrary", qa, gg.T(0.0123, sdt), 16)
        add_dequant("arbitrary", qa, gg.T([1.7], sdt), 4, torch.bfloat16)
        add_dequant("arbitrary", qa, gg.T([[0.003]], sdt, [1, 1]), 16, torch.float16)
        add_dequant("arbitrary_fullscale", qa, (torch.rand(4, 32, generator=gen) * 0.1).to(sdt), 16)
        add_dequant("arbitrary_fullscale", qa, (torch.rand(4, 32, generator=gen) * 0.1).to(sdt), 4, torch.float16)
        # output overflow / underflow in float16
        add_dequant("overflow", qa, gg.T([[600.0], [515.0], [2000.0], [1.0]], sdt), 16, torch.float16)
        add_dequant("tiny", qa, gg.T([[2.0**-24], [3e-8], [1e-6], [2.0**-14]], sdt), 4, torch.float16)
    # the 1024 group
    q, s = realistic_q(2, 2048, 1024, gen, dit=True)
    add_dequant("dit", q, s, 1024)
    add_dequant("dit", q, s.to(torch.bfloat16), 1024, torch.bfloat16)


def embedding_cases():
    gen = torch.Generator().manual_seed(4242)
    V = 10
    idx_sets = [
        ("rep", [3, 3, 0, 9, 3, 1]),                 # repeated indices, 1-D
        ("2d", [[2, 7, 7], [0, 9, 2]]),              # 2-D index tensor
    ]
    for d, groups in ((16, (0, 4, 16)), (64, (0, 16, 64)), (256, (0, 256))):
        # a realistic table: this script's own ConvRot quantization of a DiT-like table
        q_by_g = {}
        for g in groups:
            w = dit_like([V, d], torch.float32, gen=gen)
            if g > 0:
                q_by_g[g] = gg.quantize_int8_rowwise(rotate_matrix(w, g), 0)
            else:
                q_by_g[g] = gg.quantize_int8_rowwise(w, 0)
        qa = arbitrary_q(V, d, gen)
        dts = list(DTYPES.values())
        for si, sdt in enumerate(dts):
            # every scale dtype with every output dtype across the three table sizes
            odt = dts[(si + d.bit_length()) % 3]
            for gi, g in enumerate(groups):
                q, s = q_by_g[g]
                for ii, (iname, ivals) in enumerate(idx_sets):
                    idt = torch.int32 if (si + gi + ii) % 2 == 0 else torch.int64
                    add_embedding(iname, q, s.to(sdt), torch.tensor(ivals, dtype=idt), g, odt)
            # arbitrary int8 table, single-value scales, both index types, 0-D index
            g = groups[-1]
            add_embedding("arbitrary", qa, gg.T(0.02, sdt), torch.tensor([9, 0, 1, 1], dtype=torch.int64), g,
                          torch.bfloat16)
            add_embedding("arbitrary", qa, gg.T([0.5], sdt), torch.tensor([[4], [4]], dtype=torch.int32), g,
                          torch.float32)
            add_embedding("arbitrary_noG", qa, (torch.rand(V, 1, generator=gen) * 0.1).to(sdt),
                          torch.tensor([5, 2, 5], dtype=torch.int32), 0, torch.float16)
            add_embedding("scalar_index", qa, (torch.rand(V, 1, generator=gen) * 0.1).to(sdt),
                          torch.tensor(7, dtype=torch.int64), g, torch.float32)
    # a one-row table with a [1,1] scale
    q1 = arbitrary_q(1, 16, gen)
    add_embedding("one_row", q1, gg.T([[0.25]], torch.float32, [1, 1]),
                  torch.tensor([0, 0, 0], dtype=torch.int32), 4, torch.float32)
    # the 1024 group
    w = dit_like([4, 1024], torch.float32, gen=gen)
    q, s = gg.quantize_int8_rowwise(rotate_matrix(w, 1024), 0)
    add_embedding("dit", q, s, torch.tensor([[3, 0], [3, 1]], dtype=torch.int64), 1024, torch.bfloat16)


# --------------------------------------------------------------------------
# Self-checks
# --------------------------------------------------------------------------

def self_check():
    gg.self_check()
    gen = torch.Generator().manual_seed(1)
    for g in GROUPS + [1024]:
        h = hadamard(g).double()
        # symmetric, orthogonal, entries exactly +-2^-log4(g)
        assert torch.equal(h, h.T)
        assert torch.equal(h @ h, torch.eye(g, dtype=torch.float64))
        assert torch.equal(h.abs(), torch.full_like(h, 1 / math.sqrt(g)))
        # the butterfly is the same linear map: exact on small integers ...
        x = torch.randint(-50, 51, (3, 2 * g), generator=gen).float()
        want = torch.matmul(x.double().reshape(3, 2, g), h).reshape(3, 2 * g)
        assert torch.equal(rotate_butterfly(x, g).double(), want), g
        assert torch.equal(rotate_matrix(x, g).double(), want), g
        # ... and close on random values; rotating twice is about the identity
        x = torch.randn(4, 2 * g, generator=gen)
        want = torch.matmul(x.double().reshape(4, 2, g), h).reshape(4, 2 * g)
        assert (rotate_butterfly(x, g).double() - want).abs().max() < 1e-5
        assert (rotate_butterfly(rotate_butterfly(x, g), g) - x).abs().max() < 1e-5
    # a hand-worked butterfly: (a,b,c,d) -> (s-2d, s-2c, s-2b, s-2a)/2
    x = torch.tensor([1.0, 2.0, 4.0, 8.0])
    assert rotate_butterfly(x, 4).tolist() == [(15 - 16) / 2, (15 - 8) / 2, (15 - 4) / 2, (15 - 2) / 2]
    # stage order: rotate_butterfly must equal a plain element-by-element
    # loop with strides 1, 4, 16, ... (finest first); the reverse order is a
    # different rounding, so the choice matters (checked on random data)
    x = torch.randn(8, 256, generator=gen)
    fine_first = butterfly_loop(x, 256, [1, 4, 16, 64])
    coarse_first = butterfly_loop(x, 256, [64, 16, 4, 1])
    assert np.array_equal(rotate_butterfly(x, 256).numpy().view(np.uint32), fine_first.view(np.uint32))
    assert not np.array_equal(fine_first.view(np.uint32), coarse_first.view(np.uint32))


def butterfly_loop(x, g, strides):
    """Scalar float32 butterfly with the given stage order (self-check only)."""
    v = x.float().numpy().astype(np.float32).reshape(-1).copy()
    two = np.float32(2)
    for stride in strides:
        out = v.copy()
        for base in range(0, v.size, 4 * stride):
            for j in range(base, base + stride):
                a, b, c, d = v[j], v[j + stride], v[j + 2 * stride], v[j + 3 * stride]
                s = np.float32(np.float32(np.float32(a + b) + c) + d)
                out[j], out[j + stride] = s - two * d, s - two * c
                out[j + 2 * stride], out[j + 3 * stride] = s - two * b, s - two * a
        v = out
    return (v * np.float32(2.0 ** -len(strides))).reshape(x.shape)


# --------------------------------------------------------------------------

def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata", "golden", "convrot.json")
    torch.set_flush_denormal(False)
    torch.set_num_threads(1)
    self_check()
    quantize_cases()
    dequant_cases()
    embedding_cases()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write('{"generator": %s, "torch": %s,\n "rotation": %s,\n "butterfly": %s,\n "cases": [\n' % (
            json.dumps("tools/golden/gen_convrot.py"), json.dumps(torch.__version__),
            json.dumps("float32 torch.matmul(x_groups, H_G), one thread, rounded once to the stored dtype"),
            json.dumps("radix-4, stride 1 first then 4, 16, ...; (a,b,c,d) -> s-2d, s-2c, s-2b, s-2a, "
                       "s=((a+b)+c)+d; then * 2^-log4(G); rounded once to the stored dtype")))
        for i, c in enumerate(CASES):
            f.write("  " + json.dumps(c, allow_nan=False) + (",\n" if i + 1 < len(CASES) else "\n"))
        f.write(" ]}\n")
    print("matrix (PyTorch) vs butterfly (kitchen).  f32: the float32 rotated values; stored: after the")
    print("rounding to the stored dtype; row-ulps: max |difference| in ulps of the row's largest |value|.")
    hdr = "%-38s %-9s %5s | %-27s | %-27s | %-17s | %s"
    print(hdr % ("op", "dtype", "cases", "f32 differ: cases, elems", "stored differ: cases, elems",
                 "q differ: c, elems", "row-ulps f32/stored, max elem-ulps, q step"))
    tot = {}
    for key in sorted(STATS):
        op, dt = key
        s = STATS[key]
        for k, v in s.items():
            tot[k] = max(tot.get(k, 0), v) if k.startswith("max_") else tot.get(k, 0) + v
        quant = op in QUANT_OPS.values()
        print("%-38s %-9s %5d | %3d (%5.1f%%) %6d/%-7d | %3d (%5.1f%%) %6d (%6.3f%%) | %s | %.2f / %.2f, %d, %s" % (
            op, dt, s["cases"], s["cases_f32_diff"], 100.0 * s["cases_f32_diff"] / s["cases"],
            s["elems_f32_diff"], s["elems"], s["cases_stored_diff"], 100.0 * s["cases_stored_diff"] / s["cases"],
            s["elems_stored_diff"], 100.0 * s["elems_stored_diff"] / s["elems"],
            "%3d %5d (%d scale)" % (s["cases_q_diff"], s["elems_q_diff"], s["cases_scale_diff"]) if quant else "-" * 17,
            s["max_rowulp_f32"], s["max_rowulp_stored"], s["max_ulp_stored"], s["max_q_step"] if quant else "-"))
    print("all: %d cases; f32 values differ in %d cases (%.1f%%), %d of %d elements (%.2f%%); stored values differ "
          "in %d cases (%.1f%%), %d elements (%.2f%%); q differs in %d elements; max row-ulps %.2f / %.2f" % (
              tot["cases"], tot["cases_f32_diff"], 100.0 * tot["cases_f32_diff"] / tot["cases"],
              tot["elems_f32_diff"], tot["elems"], 100.0 * tot["elems_f32_diff"] / tot["elems"],
              tot["cases_stored_diff"], 100.0 * tot["cases_stored_diff"] / tot["cases"],
              tot["elems_stored_diff"], 100.0 * tot["elems_stored_diff"] / tot["elems"],
              tot["elems_q_diff"], tot["max_rowulp_f32"], tot["max_rowulp_stored"]))
    print("total cases: %d, bytes: %d -> %s" % (len(CASES), os.path.getsize(out), out))


if __name__ == "__main__":
    main()
