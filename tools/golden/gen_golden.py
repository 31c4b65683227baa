#!/usr/bin/python3
"""Golden-vector generator for the INT8 quantize/dequantize contract.

What it is
    An independent PyTorch reference implementation of the operations in
    docs/CONTRACT.md (quantize_int8_rowwise, quantize_int8_tensorwise,
    dequantize_int8_simple_dtype, including stochastic rounding), written
    the way PyTorch users write them.  It builds a fixed, deterministic set
    of inputs (fixed seeds, explicit tensors), runs them through torch on
    the CPU and writes inputs and outputs as hex-encoded little-endian bytes
    to a JSON file that the Go tests compare against bit for bit.

How to run it (from the repository root)
    /usr/bin/python3 tools/golden/gen_golden.py testdata/golden/int8.json

    It needs Debian's python3-torch (apt-get install python3-torch; it was
    written against torch 1.13) and numpy.  The output path defaults to
    testdata/golden/int8.json relative to the repository root.

CI never runs this script: the generated JSON is committed, and the Go tests
only read it.  Re-run it by hand only when the case list changes.

Notes on how the contract maps onto torch (CPU):
  * float16/bfloat16 elementwise ops (division, addition) are computed in
    float32 and rounded once to the input dtype, which is exactly
    rT(f32(a) op f32(b)).  The script checks this at start-up and refuses to
    run if it does not hold for the installed torch.
  * torch.round is round-half-even; float32 -> float16/bfloat16 conversion
    is round-to-nearest-even.
  * The PCG hash is computed in int64 tensors, masking every uint32 result
    with 0xFFFFFFFF.  The products fit in int64 before masking
    (2^32 * 747796405 < 2^62, 2^32 * 277803737 < 2^61).
"""

import json
import math
import os
import sys

import numpy as np
import torch

M32 = 0xFFFFFFFF
DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
NAME_OF = {v: k for k, v in DTYPES.items()}
SEEDS = [0, 1, 42, 2**40 + 7, 2**32 - 3]


# --------------------------------------------------------------------------
# Reference implementation
# --------------------------------------------------------------------------

def tiny_of(dtype):
    # smallest positive normal: float16 2^-14, bfloat16/float32 2^-126
    return torch.finfo(dtype).tiny


def pcg_hash(x):
    """PCG hash of the contract on an int64 tensor holding uint32 values."""
    state = (x * 747796405 + 2891336453) & M32
    shift = (state >> 28) + 4
    word = (((state >> shift) ^ state) * 277803737) & M32
    return ((word >> 22) ^ word) & M32


def stochastic_u(numel, seed):
    """u[i] (float32) for flat row-major index i."""
    k = torch.arange(numel, dtype=torch.int64) + seed  # uint64(i)+uint64(seed); no wrap for our seeds
    assert seed + numel < 2**63
    lo = k & M32
    hi = (k >> 32) & M32
    h = pcg_hash(lo ^ hi)
    return (h >> 8).to(torch.float32) * 2.0**-24


def round_to_int8(y, seed):
    """Step 5 of the contract; y is already in the input dtype."""
    if seed > 0:
        u = stochastic_u(y.numel(), seed).reshape(y.shape)
        z = (y.float() + u.to(y.dtype).float()).to(y.dtype)
        # floor/round of a T value is exact in float32 (torch 1.13 has no CPU Half round)
        return torch.floor(z.float()).clamp(-128, 127).to(torch.int8)
    return y.float().round().clamp(-128, 127).to(torch.int8)


def divide_by_t(x, s):
    """Steps 3-4: t = rT(s) (tinyT if 0); y = rT(f32(x) / f32(t))."""
    t = s.to(x.dtype)
    t = torch.where(t == 0, torch.tensor(tiny_of(x.dtype), dtype=x.dtype), t)
    return x / t


def quantize_int8_rowwise(x, seed=0):
    a = x.abs().amax(-1, keepdim=True)
    s = torch.clamp(a.float() / 127, min=1e-30)
    q = round_to_int8(divide_by_t(x, s), seed)
    return q, s


def quantize_int8_tensorwise(x, scale=None, seed=0):
    if scale is None or (isinstance(scale, str) and scale == "recalculate"):
        a = x.abs().amax()
        s = torch.clamp(a.float() / 127, min=1e-30)
    else:
        if isinstance(scale, torch.Tensor):
            s = scale.float().reshape(())
        else:
            s = torch.tensor(scale, dtype=torch.float32)
        assert torch.isfinite(s) and s > 0
    q = round_to_int8(divide_by_t(x, s), seed)
    return q, s


def dequantize_int8_simple_dtype(q, scale, out_dtype):
    if scale.numel() == 1:
        sb = scale.reshape(())
    elif tuple(scale.shape) == tuple(q.shape[:-1]) + (1,) or tuple(scale.shape) == tuple(q.shape):
        sb = scale
    else:
        raise ValueError("bad scale shape")
    out = (q.float() * sb.float()).to(out_dtype)
    assert tuple(out.shape) == tuple(q.shape)
    return out


# --------------------------------------------------------------------------
# Self-checks of torch behaviour the contract relies on
# --------------------------------------------------------------------------

def self_check():
    g = torch.Generator().manual_seed(12345)
    for dt in (torch.float16, torch.bfloat16):
        n = 1 << 20
        a = torch.randint(-(2**15), 2**15, (n,), generator=g, dtype=torch.int32).to(torch.int16).view(dt)
        b = torch.randint(-(2**15), 2**15, (n,), generator=g, dtype=torch.int32).to(torch.int16).view(dt)
        ok = torch.isfinite(a) & torch.isfinite(b) & (b != 0)
        a, b = a[ok], b[ok]
        for got, want in (
            (a / b, (a.float() / b.float()).to(dt)),
            (a.view(-1, 1) / b.view(-1, 1)[:1], (a.float().view(-1, 1) / b.float().view(-1, 1)[:1]).to(dt)),
            (a + b, (a.float() + b.float()).to(dt)),
        ):
            g_bits = got.reshape(-1).view(torch.int16)
            w_bits = want.reshape(-1).view(torch.int16)
            bad = (g_bits != w_bits) & ~(torch.isnan(got.reshape(-1)) & torch.isnan(want.reshape(-1)))
            if bad.any():
                raise SystemExit("torch %s arithmetic is not f32-op-then-round; fix the script" % dt)
    # float32 division by the Python scalar 127 must be a true division
    a = torch.rand(1 << 20, generator=g) * torch.exp(torch.randn(1 << 20, generator=g) * 30)
    if not np.array_equal((a / 127).numpy().view(np.uint32),
                          (a.numpy() / np.float32(127)).view(np.uint32)):
        raise SystemExit("float32 a/127 is not IEEE division")
    # PCG against plain Python integers
    def pcg_py(x):
        state = (x * 747796405 + 2891336453) & M32
        word = (((state >> ((state >> 28) + 4)) ^ state) * 277803737) & M32
        return ((word >> 22) ^ word) & M32
    for seed in SEEDS[1:]:
        u = stochastic_u(64, seed)
        for i in range(64):
            k = (i + seed) & (2**64 - 1)
            h = pcg_py((k & M32) ^ (k >> 32))
            assert u[i].item() == (h >> 8) * 2.0**-24
    assert torch.round(torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5])).tolist() == [0.0, 2.0, 2.0, -0.0, -2.0]


# --------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------

def hexbytes(t):
    t = t.contiguous().cpu()
    if t.dtype == torch.bfloat16:
        arr = t.view(torch.int16).numpy()
    else:
        arr = t.numpy()
    arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
    return arr.tobytes().hex()


CASES = []
NAMES = set()


def add(case):
    assert case["name"] not in NAMES, case["name"]
    NAMES.add(case["name"])
    CASES.append(case)


def shape_str(shape):
    return "x".join(str(d) for d in shape) if shape else "scalar"


def seed_str(seed):
    return "rne" if seed == 0 else "sr%d" % seed


def add_rowwise(name, x, seed):
    assert torch.isfinite(x.float()).all()
    q, s = quantize_int8_rowwise(x, seed)
    assert tuple(s.shape) == tuple(x.shape[:-1]) + (1,)
    add({
        "name": "rowwise/%s/%s/%s/%s" % (NAME_OF[x.dtype], name, shape_str(list(x.shape)), seed_str(seed)),
        "op": "quantize_int8_rowwise",
        "dtype": NAME_OF[x.dtype],
        "shape": list(x.shape),
        "x": hexbytes(x),
        "seed": seed,
        "scale_mode": "recalculate",
        "q": hexbytes(q),
        "scale": hexbytes(s.float()),
        "scale_shape": list(s.shape),
    })


def add_tensorwise(name, x, seed, mode="recalculate", value=None):
    assert torch.isfinite(x.float()).all()
    if mode == "recalculate":
        q, s = quantize_int8_tensorwise(x, "recalculate", seed)
    elif mode == "value":
        q, s = quantize_int8_tensorwise(x, value, seed)
    elif mode == "tensor":
        q, s = quantize_int8_tensorwise(x, torch.tensor(value, dtype=torch.float32), seed)
    else:
        raise ValueError(mode)
    assert tuple(s.shape) == ()
    case = {
        "name": "tensorwise/%s/%s/%s/%s/%s" % (
            NAME_OF[x.dtype], name, shape_str(list(x.shape)), seed_str(seed),
            mode if value is None else "%s=%r" % (mode, value)),
        "op": "quantize_int8_tensorwise",
        "dtype": NAME_OF[x.dtype],
        "shape": list(x.shape),
        "x": hexbytes(x),
        "seed": seed,
        "scale_mode": mode,
    }
    if value is not None:
        case["scale_value"] = float(value)
    case.update({"q": hexbytes(q), "scale": hexbytes(s.float()), "scale_shape": []})
    add(case)


def add_both(name, x, seeds):
    for seed in seeds:
        add_rowwise(name, x, seed)
        add_tensorwise(name, x, seed)


def add_dequant(name, q, scale, out_dtype):
    out = dequantize_int8_simple_dtype(q, scale, out_dtype)
    add({
        "name": "dequant/%s->%s/%s/q%s/s%s" % (NAME_OF[scale.dtype], NAME_OF[out_dtype], name,
                                              shape_str(list(q.shape)), shape_str(list(scale.shape))),
        "op": "dequantize_int8_simple_dtype",
        "q_shape": list(q.shape),
        "q": hexbytes(q),
        "scale_dtype": NAME_OF[scale.dtype],
        "scale_shape": list(scale.shape),
        "scale": hexbytes(scale),
        "out_dtype": NAME_OF[out_dtype],
        "out": hexbytes(out),
    })


# --------------------------------------------------------------------------
# Case list
# --------------------------------------------------------------------------

def T(values, dtype, shape=None):
    """Explicit tensor: Python floats rounded (RNE) through float32 to dtype."""
    t = torch.tensor(values, dtype=torch.float32).to(dtype)
    return t.reshape(shape) if shape is not None else t


def finite_clip(x, dtype):
    m = torch.finfo(dtype).max
    return x.clamp(-m, m).to(dtype)


def all_positive_finite(dtype):
    bits = torch.arange(1, 2**15, dtype=torch.int32).to(torch.int16)
    a = bits.view(dtype)
    return a[torch.isfinite(a)]


def quantize_cases():
    torch.manual_seed(20240601)
    small_shapes = [[1], [3], [7], [33], [257], [4, 7], [2, 3, 33], [2, 3, 4, 5], [3, 1]]
    for dname, dt in DTYPES.items():
        # --- random normal data, many shapes, every seed
        for shape in small_shapes:
            x = torch.randn(shape).to(dt)
            add_both("randn", x, SEEDS)
        # rows of very different magnitudes
        x = (torch.randn(16, 33) * torch.exp(torch.randn(16, 1) * 4)).to(dt)
        add_both("randn_rowmag", x, SEEDS)
        x = (torch.randn(2, 5, 7) * torch.exp(torch.randn(2, 5, 1) * 6)).to(dt)
        add_both("randn_rowmag", x, [0, 42])
        # larger shapes, fewer seeds (file size)
        x = torch.randn(64, 96).to(dt)
        add_rowwise("randn", x, 0)
        add_tensorwise("randn", x, 2**40 + 7)

        # --- zeros
        z = torch.zeros(3, 5, dtype=dt)
        z[1, 2] = -0.0
        z[2] = -0.0
        add_both("zeros", z, [0, 1])
        add_both("zeros", torch.zeros(4, dtype=dt), [0])
        add_both("zeros", torch.zeros(1, dtype=dt), [0, 42])
        x = torch.randn(5, 6).to(dt)
        x[0] = 0
        x[2] = -0.0
        x[4, :3] = 0
        add_both("mixed_zero_rows", x, [0, 42, 2**32 - 3])

        # --- ties: max = 127*t with t exactly representable, so s == t
        mults = [127, 0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, -3.5, 126.5, -126.5, -127,
                 64.5, -64.5, 0.25, 0.75, -0.25, 0, 1, -1, 100.5, 101.5, 11.5, -12.5]
        ts = [1.0, 2.0**-3, 32.0, 2.0**-10]
        if dt != torch.bfloat16:
            ts.append(5.0 / 8)  # 635/8 needs 10 significant bits
        rows = [[m * t for m in mults] for t in ts]
        x = T(rows, dt)
        assert torch.equal(x.float(), torch.tensor(rows, dtype=torch.float32)), "tie rows not exact"
        add_rowwise("ties", x, 0)
        for seed in [1, 42]:
            add_rowwise("ties", x, seed)
        # tensorwise recalc over one tie row
        add_tensorwise("ties", x[1], 0)
        add_tensorwise("ties", x[1], 42)

        # --- values around +-127.5 and beyond, supplied scale so clamping matters
        vals = [127.5, -127.5, -128.5, 128.0, -128.0, 127.0, -129.0, 126.5, -126.5, 200.0, -300.0,
                1000.0, -1000.0, 0.5, -0.5, 1.5, 2.5, -2.5, 127.25, -127.75, 127.49, -128.49, 0.0]
        x = T(vals, dt)
        for seed in [0, 1, 42]:
            for value in [1.0, 0.5]:
                add_tensorwise("clamp_edges", x, seed, "value", value)
            add_tensorwise("clamp_edges", x, seed, "tensor", 1.0)

        # --- natural rounding past 127 in T (y = rT(a/t) >= 127.5 -> +-128 before clamping);
        # exhaustive over the positive values of the 16-bit dtypes (float32 cannot get there:
        # s >= 1e-30 is normal and t is within 2^-24 of s)
        a = all_positive_finite(dt) if dt != torch.float32 else torch.ones(1, dtype=dt)
        _, s_ = quantize_int8_rowwise(a.reshape(-1, 1))
        yy = divide_by_t(a.reshape(-1, 1), s_).reshape(-1).float()  # rT(a / t) per candidate max a
        picks = []
        for lo, hi in [(1e-3, 1e6), (0.0, 1e-3), (1e-30, 1e-26)]:
            sel = a[(yy >= 127.5) & (a.float() > lo) & (a.float() < hi)]
            picks += sel[: 4].float().tolist() + sel[-2:].float().tolist() if sel.numel() else []
            sel = a[(yy > 127) & (yy < 127.5) & (a.float() > lo) & (a.float() < hi)]
            picks += sel[: 2].float().tolist() if sel.numel() else []
        if picks:
            rows = []
            for i, p in enumerate(picks):
                # row: max is -p (so a negative element reaches -128 when y = -127.5),
                # plus a few values at fractions of it
                rows.append([-p, p * 0.5, p * 0.99, -p * 0.996, p * 0.25, 0.0, p])
            x = T(rows, dt)
            add_rowwise("round_past_127", x, 0)
            add_rowwise("round_past_127", x, 42)
            add_tensorwise("round_past_127", x[:1], 0)

        # --- subnormal inputs and tiny maxima
        sub_min = float(torch.finfo(dt).tiny) * float(torch.finfo(dt).eps)  # smallest subnormal
        tiny = float(torch.finfo(dt).tiny)
        rows = [
            [sub_min, -sub_min, 0.0, 3 * sub_min, -7 * sub_min, 2 * sub_min],
            [tiny * 0.5, -tiny * 0.25, tiny * 0.75, -tiny * 0.125, sub_min, -tiny * 0.999],
            [tiny, -tiny, tiny * 0.5, -tiny * 0.5, tiny * 0.9, sub_min],
            [-tiny, tiny * 0.3, -tiny * 0.7, tiny * 0.05, 0.0, -0.0],
            [tiny * 2, -tiny * 1.5, tiny, -tiny * 0.5, tiny * 0.01, sub_min * 5],
        ]
        x = T(rows, dt)
        add_both("subnormals", x, [0, 42])
        add_both("only_subnormals", T(rows[0], dt), [0])

        # --- magnitudes where the 1e-30 clamp of s matters with non-zero q (float32/bfloat16)
        if dt != torch.float16:
            rows = [
                [1.27e-28, -1e-28, 5e-29, -2e-30, 1e-30, 3e-29, -6.35e-29],
                [1e-28, -1e-29, 3e-30, 5e-31, -1.3e-29, 6e-29, 0.0],
                [1e-30, -1e-30, 2e-31, 5e-31, -5e-31, 1.5e-30, 0.0],
                [1e-38, -1e-38, 5e-39, 1e-39, -2e-40, 3e-38, 1e-44],
                [1e30, -1e30, 3e30, 1e-30, -1e-38, 1.0, -2.5e29],
                [3.0e38, -1.0e38, 1e37, -2.0e38, 1.0, -1.0, 1.4e38],
                [1e-30, 1e-38, -1e-38, 1e-37, -1e-36, 1e-35, 0.0],
            ]
            x = T(rows, dt)
            add_both("huge_tiny", x, [0, 42, 2**40 + 7])
            for r in range(len(rows)):
                add_tensorwise("huge_tiny_row%d" % r, x[r], 0)
            fmax = float(torch.finfo(dt).max)
            x = T([[fmax, -fmax, fmax / 2, 1.0], [-fmax, 0.0, -fmax / 3, fmax * 0.999]], dt)
            add_both("dtype_max", x, [0, 1])

        # --- float16 specific: maxima near 65504, 2^-14, 2^-24
        if dt == torch.float16:
            rows = [
                [65504.0, -65504.0, 32768.0, 1.0, -0.5, 65000.0, -1024.0],
                [-65504.0, 65472.0, -32752.0, 256.0, 0.0, 257.0, -258.0],
                [60000.0, -59999.0, 12345.0, -23456.0, 34567.0, 0.001, -1.0],
                [2.0**-14, -2.0**-14, 2.0**-15, -2.0**-16, 2.0**-24, 3 * 2.0**-24, 2.0**-14 * 0.75],
                [-2.0**-14, 2.0**-14 * 0.5, -2.0**-14 * 0.99, 2.0**-20, 0.0, 7 * 2.0**-24, 2.0**-17],
                [2.0**-24, -2.0**-24, 0.0, 2.0**-24, -0.0, 2.0**-24, -2.0**-24],
                [127 * 2.0**-24, -64 * 2.0**-24, 2.0**-24, 33 * 2.0**-24, -100 * 2.0**-24, 0.0, 5 * 2.0**-24],
                [2.0**-10, -2.0**-11, 2.0**-12, 2.0**-13, 2.0**-14, 2.0**-15, -2.0**-24],
                [0.0127, -0.01, 0.005, 0.0001, -0.0033, 0.012, 0.0126],
                [0.001, -0.00098, 0.0005, 0.0007, -0.0009995, 0.0002, 0.0],
            ]
            x = T(rows, dt)
            add_both("f16_limits", x, [0, 1, 42])
            for r in range(len(rows)):
                add_tensorwise("f16_limits_row%d" % r, x[r], 0)

        # --- tensorwise with supplied scales
        base = torch.randn(4, 33)
        for value in [1.0, 0.01, 1e-6, 3.0e-8, 1e4]:
            x = finite_clip(base * (value * 60.0), dt) if value >= 1e-3 else base.to(dt)
            for mode in ["value", "tensor"]:
                for seed in [0, 42]:
                    add_tensorwise("supplied", x, seed, mode, value)
            # also plain randn with the same scale (small inputs against large scale and vice versa)
            add_tensorwise("supplied_randn", base.to(dt), 0, "value", value)
        if dt == torch.float16:
            # rT(s) overflows to inf (y = x/inf = 0) and underflows to 0 (t = tinyT)
            for value in [1e5, 70000.0, 65504.0, 1e-9, 2.0**-25, 2.0**-24, 6e-8]:
                add_tensorwise("f16_scale_limits", base.to(dt), 0, "value", value)
                add_tensorwise("f16_scale_limits", base.to(dt), 42, "tensor", value)
        if dt == torch.bfloat16:
            for value in [1e-30, 1e-39, 3.0e38]:
                add_tensorwise("bf16_scale_limits", base.to(dt), 0, "value", value)
                add_tensorwise("bf16_scale_limits", base.to(dt), 1, "tensor", value)
        if dt == torch.float32:
            for value in [1e-30, 1e-40, 3.0e38]:
                add_tensorwise("f32_scale_limits", (base * 1e-35).to(dt), 0, "value", value)
                add_tensorwise("f32_scale_limits", base.to(dt), 1, "tensor", value)

        # --- stochastic rounding where the index crosses 2^32 in k (seed 2^32-3) on a longer row
        x = torch.randn(2, 40).to(dt)
        add_both("randn_seedcarry", x, [2**32 - 3, 2**32 - 1, 2**32])

    # one moderately sized case
    torch.manual_seed(7)
    x = (torch.randn(128, 520) * torch.exp(torch.randn(128, 1) * 2)).to(torch.bfloat16)
    add_rowwise("randn_big", x, 0)


def dequant_cases():
    torch.manual_seed(99)
    q_all = torch.arange(-128, 128, dtype=torch.int16).to(torch.int8)  # every int8 value
    for sname, sdt in DTYPES.items():
        for oname, odt in DTYPES.items():
            q = q_all.reshape(4, 64)
            # single value
            add_dequant("scalar", q, T(0.0123, sdt), odt)
            add_dequant("scalar", q, T([1.7], sdt), odt)
            add_dequant("scalar", q, T([[3.0e-3]], sdt, [1, 1]), odt)
            # row-wise
            add_dequant("rowwise", q, (torch.rand(4, 1) * 0.05 + 1e-4).to(sdt), odt)
            # full shape
            qf = torch.randint(-128, 128, (3, 5), dtype=torch.int16).to(torch.int8)
            add_dequant("fullshape", qf, (torch.rand(3, 5) * 2).to(sdt), odt)
            # 1-D q with [1] scale and a [1]-shaped single row
            q1 = torch.randint(-128, 128, (17,), dtype=torch.int16).to(torch.int8)
            add_dequant("1d", q1, (torch.rand(1) + 0.01).to(sdt), odt)
            # 3-D q with [A,B,1] scales, and 3-D q with full shape scales
            q3 = torch.randint(-128, 128, (2, 3, 8), dtype=torch.int16).to(torch.int8)
            add_dequant("3d_rowwise", q3, (torch.rand(2, 3, 1) * 0.1).to(sdt), odt)
            add_dequant("3d_fullshape", q3, (torch.rand(2, 3, 8) * 0.1).to(sdt), odt)
            # 4-D q with row-wise scales
            q4 = torch.randint(-128, 128, (2, 2, 3, 5), dtype=torch.int16).to(torch.int8)
            add_dequant("4d_rowwise", q4, (torch.rand(2, 2, 3, 1) * 0.1).to(sdt), odt)
            # scales that overflow float16 on output (1000*127 > 65504)
            add_dequant("overflow", q, T(1000.0, sdt), odt)
            add_dequant("overflow_rows", q, T([[600.0], [515.0], [516.0], [1000.0]], sdt), odt)
            # tiny scales -> subnormal outputs
            add_dequant("tiny", q, T(1e-7, sdt), odt)
            add_dequant("tiny_rows", q, T([[2.0**-24], [3e-8], [1e-9], [2.0**-14]], sdt), odt)
            if sdt != torch.float16:
                add_dequant("tiny_f32range", q, T([[1e-39], [1e-40], [1e-38], [1e-30]], sdt), odt)
                add_dequant("huge_f32range", q, T([[3e38], [1e37], [2.6e36], [1e30]], sdt), odt)
            if sdt == torch.float16:
                add_dequant("f16_scale_extremes", q, T([[65504.0], [2.0**-24], [6e-5], [1.0]], sdt), odt)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata", "golden", "int8.json")
    torch.set_flush_denormal(False)
    torch.set_num_threads(1)
    self_check()
    quantize_cases()
    dequant_cases()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    head = {"generator": "tools/golden/gen_golden.py", "torch": torch.__version__}
    with open(out, "w") as f:
        f.write('{"generator": %s, "torch": %s,\n "cases": [\n' % (
            json.dumps(head["generator"]), json.dumps(head["torch"])))
        for i, c in enumerate(CASES):
            f.write("  " + json.dumps(c, allow_nan=False) + (",\n" if i + 1 < len(CASES) else "\n"))
        f.write(" ]}\n")
    counts = {}
    for c in CASES:
        key = (c["op"], c.get("dtype") or "%s->%s" % (c["scale_dtype"], c["out_dtype"]))
        counts[key] = counts.get(key, 0) + 1
    for k in sorted(counts):
        print("%-32s %-20s %d" % (k[0], k[1], counts[k]))
    print("total cases: %d, bytes: %d -> %s" % (len(CASES), os.path.getsize(out), out))


if __name__ == "__main__":
    main()
