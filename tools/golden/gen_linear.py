#!/usr/bin/python3
"""Golden-vector generator for mm_int8 and int8_linear of the INT8 contract.

What it is
    An independent PyTorch/numpy reference for two operations of
    docs/CONTRACT.md ("The INT8 family beyond Q/DQ"):
        mm_int8(a int8 [M,K], b int8 [K,N]) -> int32 [M,N]
        int8_linear(x [..., K], weight int8 [N,K], weight_scale, bias=None,
                    out_dtype=bfloat16, convrot=False, convrot_groupsize=256,
                    input_act=None) -> out_dtype [..., N]
    written step by step as the contract states them, the way PyTorch users
    write them.  Inputs are fixed (fixed seeds, explicit tensors); inputs,
    outputs and the intermediate (xq, xs) of every int8_linear case are
    written as hex-encoded little-endian bytes to a JSON file that the Go
    tests compare against bit for bit.

How to run it (from the repository root)
    /usr/bin/python3 tools/golden/gen_linear.py testdata/golden/linear.json

    It needs Debian's python3-torch (written against torch 1.13) and numpy,
    and gen_golden.py and gen_convrot.py next to it.  CI never runs it: the
    JSON is committed and the Go tests only read it.

The steps of int8_linear, and how this script computes each
  1. input_act, in x's dtype T.  The transcendental functions are computed
     in float64 from the float32 value v = f32(x), the float64 result is
     rounded (RNE) to float32, then rounded once more (RNE) to T.  kitchen
     must compute them the same way (gelu_tanh in the exp form below); the
     two then agree bit for bit but for the last-bit differences of two
     float64 libm's (exp), which would have to straddle a float32 rounding
     boundary to show (the script checks
     every value against an 80-bit long double evaluation and requires it to
     be at least 2^-40 of itself away from a float32 rounding boundary, so
     any accurate float64 evaluation gives these bytes).  PyTorch itself
     (float32 arithmetic) differs, and the script prints how often.  The
     float64 expressions:
       gelu_tanh: z = C * (v + 0.044715*((v*v)*v)), C = sqrt(2/pi)
                  = 0.7978845608028654 (float64);  r = v / (1 + exp(-2z)),
                  which is 0.5*v*(1 + tanh(z)) without its cancellation:
                  evaluated literally, 1 + tanh(z) loses up to all of
                  float64's bits for z << 0, and the float32 results of
                  v < about -3 come out wrong (about 8% of N(0, 4) inputs);
                  the gelu_far_negative cases have rows where that shows
                  in xq and the output
       swiglu:    x's last dim is [gate | up] (2K columns);
                  g = rT(f32(gate / (1 + exp(-gate))))   (silu, float64)
                  x = rT(f32(g) * f32(up))               (one float32 product)
  2. convrot: x = rT(rotate(x, G)), rotate in kitchen's butterfly order,
     gen_convrot.rotate_butterfly (imported): radix-4, stride 1 first then
     4, 16, ...; (a,b,c,d) -> s-2d, s-2c, s-2b, s-2a, s=((a+b)+c)+d, float32;
     then * 2^-log4(G); rounded once to T.  (PyTorch users multiply by the
     matrix H_G instead; the script prints in how many cases that would
     change xq or the output.)
  3. (xq, xs) = gen_golden.quantize_int8_rowwise(x as [M, K]) (imported).
  4. acc = xq @ weight^T, exact, in numpy int64; checked to fit int32.
  5. c[m,n] = float32(xs[m] * f32(ws_n)); y = float32(float32(acc) * c),
     in torch float32 (no FMA: two separate products) and checked bit for
     bit against the same in numpy float32, where float32(acc) is computed
     as float32(float64(acc)) (exact, then one RNE rounding).
  6. out = rOut(y); with bias: out = rOut(f32(out) + f32(rOut(bias[n]))).

JSON schema (one object per case; absent keys do not apply):
  name, op ("mm_int8" or "int8_linear")
  mm_int8:     dtype "int8", a, a_shape [M,K], b, b_shape [K,N],
               out (int32), out_shape [M,N], out_dtype "int32"
  int8_linear: dtype (x's dtype), shape (x's shape), x, weight (int8),
               weight_shape [N,K], weight_scale, weight_scale_dtype,
               weight_scale_shape ([], [1], [N] or [N,1]), bias, bias_dtype,
               bias_shape [N] (all three absent: no bias), group (0: no
               convrot, else convrot_groupsize), input_act ("", "gelu_tanh",
               "swiglu"), xq (int8 [M,K]: the quantized activation after
               steps 1-3, M = rows of x, K = the weight's K), xs (float32
               [M,1]), out, out_shape [..., N], out_dtype.

Notes
  * Every case is a valid input; the Go suite has its own bad-input table.
  * mm_int8's bound: the contract allows K up to 131,072, but there a row of
    all -128 times a column of all -128 sums to exactly 2^31, one past
    int32's maximum.  That single input is left out (it is not exact in
    int32); the K = 131,072 case here is the largest sum that fits (2^31 -
    128) and the most negative one (-128 * 127 * 131,072).
  * A float16 output may overflow to +-inf (a finite float32 y or y + bias
    beyond 65504 rounds to inf): the contract lists no error for it, so the
    f16_overflow cases record the IEEE result.
"""

import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_golden as gg  # noqa: E402  (rowwise quantizer, encoding)
import gen_convrot as cr  # noqa: E402  (the butterfly rotation, kitchen's order)

DTYPES = gg.DTYPES
NAME_OF = gg.NAME_OF
FLOATS = list(DTYPES.values())
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
K_MAX = 131072
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)

CASES = []
NAMES = set()
ACT_STATS = {}  # (input_act, dtype) -> [elements, differ from torch's float32 form, max ulps of T]
STATS = {
    "convrot_cases": 0, "convrot_xq_diff": 0, "convrot_out_diff": 0,
    "max_rel": 0.0, "acc_above_2_24": 0, "acc_f32_inexact": 0, "f16_inf": 0, "xq_m128": 0, "subnormal_c": 0,
}


def add(case):
    assert case["name"] not in NAMES, case["name"]
    NAMES.add(case["name"])
    CASES.append(case)


shape_str = gg.shape_str
hexbytes = gg.hexbytes


# --------------------------------------------------------------------------
# Reference implementation
# --------------------------------------------------------------------------

def f64_to_T(r64, dt):
    """float64 numpy -> float32 (RNE) -> dt (RNE), as a torch tensor."""
    return torch.from_numpy(np.ascontiguousarray(r64.astype(np.float32))).to(dt)


def check_against_long_double(r64, r_ld):
    """The float32 rounding of the float64 result equals that of the 80-bit
    long double one, and stays the same when the long double value moves by
    2^-40 of itself: any accurate float64 evaluation rounds to the same
    float32 (the vectors do not depend on the last bits of a libm)."""
    r32 = r64.astype(np.float32)
    assert np.array_equal(r32.view(np.uint32), r_ld.astype(np.float32).view(np.uint32)), "float64 != long double"
    eps = np.longdouble(2.0) ** -40
    for f in (1 + eps, 1 - eps):
        assert np.array_equal(r32.view(np.uint32), (r_ld * f).astype(np.float32).view(np.uint32)), \
            "an activation value lies within 2^-40 of a float32 rounding boundary"


def gelu_tanh(x):
    """0.5*v*(1 + tanh(z)) evaluated as v / (1 + exp(-2z)) in float64.

    The two are the same function (0.5*(1 + tanh z) = 1/(1 + exp(-2z))), but
    1 + tanh(z) cancels for z << 0: in float64 it leaves float32 results of
    v < about -3 wrong by many ulps (and dependent on the libm's last bit of
    tanh).  The exp form has no cancellation; the script checks it against
    an 80-bit long double evaluation."""
    v = x.float().numpy().astype(np.float64)
    z = SQRT_2_OVER_PI * (v + 0.044715 * ((v * v) * v))
    with np.errstate(over="ignore"):
        r = v / (1.0 + np.exp(-2.0 * z))
    vl = x.float().numpy().astype(np.longdouble)
    cl = np.sqrt(np.longdouble(2) / np.longdouble(np.pi))
    zl = cl * (vl + np.longdouble(0.044715) * ((vl * vl) * vl))
    with np.errstate(over="ignore"):
        check_against_long_double(r, vl / (1 + np.exp(-2 * zl)))
    return f64_to_T(r, x.dtype)


def silu(x):
    """v / (1 + exp(-v)) in float64 (checked against long double)."""
    v = x.float().numpy().astype(np.float64)
    with np.errstate(over="ignore"):
        r = v / (1.0 + np.exp(-v))
        vl = x.float().numpy().astype(np.longdouble)
        check_against_long_double(r, vl / (1 + np.exp(-vl)))
    return f64_to_T(r, x.dtype)


def input_activation(x, act):
    dt = x.dtype
    if act == "":
        return x
    if act == "gelu_tanh":
        y = gelu_tanh(x)
        # how PyTorch users write it (float32 arithmetic), for the statistics only
        yt = torch.nn.functional.gelu(x.float(), approximate="tanh").to(dt)
    elif act == "swiglu":
        k2 = x.shape[-1]
        assert k2 % 2 == 0
        gate, up = x[..., : k2 // 2], x[..., k2 // 2:]
        g = silu(gate)
        y = (g.float() * up.float()).to(dt)
        yn = (g.float().numpy() * up.float().numpy())
        assert yn.dtype == np.float32
        assert torch.equal(torch.from_numpy(yn).to(dt).float().view(torch.int32), y.float().view(torch.int32))
        yt = (torch.nn.functional.silu(gate.float()).to(dt).float() * up.float()).to(dt)
    else:
        raise ValueError(act)
    st = ACT_STATS.setdefault((act, NAME_OF[dt]), [0, 0, 0])
    d = (cr.ordered(y) - cr.ordered(yt)).abs()
    st[0] += y.numel()
    st[1] += int((d > 0).sum().item())
    st[2] = max(st[2], int(d.max().item()) if d.numel() else 0)
    return y


def weight_scale_row(ws, n):
    """ws_n as a float32 [1, N] (or [1, 1]) row, widened exactly."""
    assert ws.numel() in (1, n)
    assert tuple(ws.shape) in ((), (1,), (n,), (n, 1))
    w = ws.float().reshape(1, -1)
    assert torch.isfinite(w).all() and (w > 0).all()
    return w


def int8_linear_ref(x, weight, ws, bias, out_dtype, group, act):
    """Returns (out, xq, xs, y32, extra) following the contract step by step."""
    dt = x.dtype
    n, k = weight.shape
    assert weight.dtype == torch.int8
    # 1. activation
    xa = input_activation(x, act)
    assert xa.shape[-1] == k, (xa.shape, k)
    assert torch.isfinite(xa.float()).all(), "x not finite after the activation"
    # 2. convrot (kitchen's butterfly order), rounded once to T
    if group:
        assert k % group == 0
        xr = cr.rotate_butterfly(xa, group).to(dt)
        assert torch.isfinite(xr.float()).all()
    else:
        xr = xa
    # 3. row-wise quantization of x as [M, K]
    x2 = xr.reshape(-1, k)
    xq, xs = gg.quantize_int8_rowwise(x2, 0)
    assert xq.dtype == torch.int8 and xs.dtype == torch.float32 and tuple(xs.shape) == (x2.shape[0], 1)
    # 4. exact integer product
    acc64 = xq.numpy().astype(np.int64) @ weight.numpy().astype(np.int64).T
    assert acc64.min(initial=0) >= INT32_MIN and acc64.max(initial=0) <= INT32_MAX
    acc = torch.from_numpy(acc64.astype(np.int32))
    # 5. scales: c = f32(xs * ws_n), y = f32(f32(acc) * c)
    wrow = weight_scale_row(ws, n)
    c = xs * wrow
    y = acc.float() * c
    # the same in numpy float32, float32(acc) via exact float64
    c_np = xs.numpy() * wrow.numpy()
    y_np = acc64.astype(np.float64).astype(np.float32) * c_np
    assert c_np.dtype == np.float32 and y_np.dtype == np.float32
    assert np.array_equal(y.numpy().view(np.uint32), y_np.view(np.uint32)), "torch and numpy disagree on y"
    # 6. output rounding and bias
    out = y.to(out_dtype)
    if bias is not None:
        assert tuple(bias.shape) == (n,)
        out = (out.float() + bias.float().to(out_dtype).float().reshape(1, n)).to(out_dtype)
    out = out.reshape(tuple(x.shape[:-1]) + (n,))
    extra = {
        "acc_above_2_24": int((np.abs(acc64) > 2**24).any()),
        "subnormal_c": int(((c_np != 0) & (np.abs(c_np) < np.float32(2.0**-126))).any()),
        "xq_m128": int((xq == -128).any()),
        "acc_f32_inexact": int((acc64.astype(np.float64).astype(np.float32).astype(np.int64) != acc64).any()),
    }
    return out, xq, xs, y, extra


def linear_matrix_order(x, weight, ws, bias, out_dtype, group, act):
    """Steps 1-6 with PyTorch's matrix-product rotation (statistics only)."""
    xa = input_activation(x, act)
    xr = cr.rotate_matrix(xa, group).to(x.dtype)
    xq, xs = gg.quantize_int8_rowwise(xr.reshape(-1, weight.shape[1]), 0)
    acc = torch.from_numpy((xq.numpy().astype(np.int64) @ weight.numpy().astype(np.int64).T).astype(np.int32))
    y = acc.float() * (xs * weight_scale_row(ws, weight.shape[0]))
    out = y.to(out_dtype)
    if bias is not None:
        out = (out.float() + bias.float().to(out_dtype).float().reshape(1, -1)).to(out_dtype)
    return xq, out.reshape(tuple(x.shape[:-1]) + (weight.shape[0],))


def bits_of(t):
    return cr.bits(t)


# --------------------------------------------------------------------------
# Case builders
# --------------------------------------------------------------------------

def add_mm(name, a, b):
    assert a.dtype == torch.int8 and b.dtype == torch.int8 and a.dim() == 2 and b.dim() == 2
    m, k = a.shape
    k2, n = b.shape
    assert k == k2 and 1 <= k <= K_MAX
    out64 = a.numpy().astype(np.int64) @ b.numpy().astype(np.int64)
    assert out64.min(initial=0) >= INT32_MIN and out64.max(initial=0) <= INT32_MAX, "int32 overflow"
    out = torch.from_numpy(out64.astype(np.int32))
    # torch's own integer matmul as a cross-check where it is cheap
    if m * k * n <= 2**22:
        assert torch.equal(torch.matmul(a.long(), b.long()), out.long())
    add({
        "name": "mm_int8/%s/%dx%dx%d" % (name, m, k, n),
        "op": "mm_int8",
        "dtype": "int8",
        "a": hexbytes(a),
        "a_shape": [m, k],
        "b": hexbytes(b),
        "b_shape": [k, n],
        "out": hexbytes(out),
        "out_shape": [m, n],
        "out_dtype": "int32",
    })


def ws_form_str(ws):
    s = list(ws.shape)
    return ("[%s]" % ",".join("N" if d > 1 else str(d) for d in s)) if s else "[]"


def add_linear(name, x, weight, ws, bias=None, out_dtype=torch.bfloat16, group=0, act="", w_float=None,
               ref_tol=None):
    assert x.dtype in FLOATS and ws.dtype in FLOATS and torch.isfinite(x.float()).all()
    n, k = weight.shape
    out, xq, xs, y, extra = int8_linear_ref(x, weight, ws, bias, out_dtype, group, act)
    if out_dtype == torch.float16:
        extra["f16_inf"] = int(torch.isinf(out.float()).any())
    for key, v in extra.items():
        STATS[key] += v
    if group:
        xq_m, out_m = linear_matrix_order(x, weight, ws, bias, out_dtype, group, act)
        STATS["convrot_cases"] += 1
        STATS["convrot_xq_diff"] += int(not torch.equal(xq_m, xq))
        STATS["convrot_out_diff"] += int(not torch.equal(bits_of(out_m), bits_of(out)))
    if w_float is not None and ref_tol is not None and out.numel() >= 4:  # (one dot product can cancel)
        # sanity: the int8 result approximates act(x) @ W^T (the rotation of
        # x and the pre-rotated weight cancel: H_G is orthogonal)
        xa = input_activation(x, act).double().reshape(-1, k)
        ref = xa @ w_float.double().T
        if bias is not None:
            ref = ref + bias.double().reshape(1, n)
        got = out.double().reshape(-1, n)
        rel = float((got - ref).norm() / ref.norm().clamp(min=1e-300))
        STATS["max_rel"] = max(STATS["max_rel"], rel)
        assert rel < ref_tol, (name, rel)
    case = {
        "name": "linear/%s/%s/G%d/%s/x%s/w%dx%d/ws%s%s/bias=%s/->%s" % (
            NAME_OF[x.dtype], act or "noact", group, name, shape_str(list(x.shape)), n, k,
            ws_form_str(ws), NAME_OF[ws.dtype], NAME_OF[bias.dtype] if bias is not None else "none",
            NAME_OF[out_dtype]),
        "op": "int8_linear",
        "dtype": NAME_OF[x.dtype],
        "shape": list(x.shape),
        "x": hexbytes(x),
        "weight": hexbytes(weight),
        "weight_shape": [n, k],
        "weight_scale": hexbytes(ws),
        "weight_scale_dtype": NAME_OF[ws.dtype],
        "weight_scale_shape": list(ws.shape),
    }
    if bias is not None:
        case.update({"bias": hexbytes(bias), "bias_dtype": NAME_OF[bias.dtype], "bias_shape": [n]})
    case.update({
        "group": group,
        "input_act": act,
        "xq": hexbytes(xq),
        "xs": hexbytes(xs),
        "out": hexbytes(out),
        "out_shape": list(out.shape),
        "out_dtype": NAME_OF[out_dtype],
    })
    add(case)


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------

FORMS = ["[]", "[1]", "[N]", "[N,1]"]


def realistic_weight(n, k, form, sdt, gen, group=0, dit=False):
    """(q int8 [N,K], weight_scale, float W) from this script's own quantizer:
    row-wise for [N]/[N,1], tensor-wise for []/[1]; with a group, W is rotated
    first (ConvRot weights: rT(rotate(W)) quantized)."""
    w = cr.dit_like([n, k], torch.float32, n_outliers=min(3, k), gen=gen) if dit else \
        torch.randn(n, k, generator=gen) * 0.05
    wr = cr.rotate_butterfly(w, group) if group else w
    if form in ("[N]", "[N,1]"):
        q, s = gg.quantize_int8_rowwise(wr, 0)
        s = s.reshape(n) if form == "[N]" else s
    else:
        q, s = gg.quantize_int8_tensorwise(wr, "recalculate", 0)
        s = s.reshape(1) if form == "[1]" else s.reshape(())
    s = s.to(sdt)
    assert torch.isfinite(s.float()).all() and (s.float() > 0).all()
    return q, s, w


def raw_weight(n, k, gen):
    """Arbitrary int8 including -128: a -128 row, a 127 row and -128 corners."""
    q = torch.randint(-128, 128, (n, k), generator=gen, dtype=torch.int16).to(torch.int8)
    q[0, : min(3, k)] = -128
    if n > 2:
        q[1] = -128
        q[2] = 127
    return q


def raw_scale(n, form, sdt, gen):
    v = torch.rand(n, generator=gen) * 0.05 + 1e-3
    s = {"[]": v[0].reshape(()), "[1]": v[:1], "[N]": v, "[N,1]": v.reshape(n, 1)}[form]
    return s.to(sdt)


def act_input(shape, dt, act, gen, dit=True):
    """x for a given post-activation shape [..., K]; swiglu doubles the last dim."""
    shape = list(shape)
    if act == "swiglu":
        shape[-1] *= 2
    if act == "":
        x = cr.dit_like(shape, torch.float32, n_outliers=min(3, shape[-1]), gen=gen) if dit else \
            torch.randn(shape, generator=gen)
    else:
        # activations see pre-activation values around the interesting range of gelu/silu
        x = torch.randn(shape, generator=gen) * 3
        flat = x.reshape(-1)
        extra = torch.tensor([0.0, -0.0, 1e-4, -1e-4, 8.0, -8.0, 20.0, -20.0, -3.0, 3.0, 0.5, -0.5])
        m = min(flat.numel(), extra.numel())
        flat[:m] = extra[:m]
    return x.to(dt)


def bias_of(n, bdt, gen):
    if bdt is None:
        return None
    return (torch.randn(n, generator=gen) * 0.5).to(bdt)


def xshape(mi, k):
    return [[1, k], [3, k], [17, k], [2, 3, k]][mi % 4]


# --------------------------------------------------------------------------
# Case list
# --------------------------------------------------------------------------

def mm_cases():
    gen = torch.Generator().manual_seed(5150)

    def ri8(*shape):
        return torch.randint(-128, 128, shape, generator=gen, dtype=torch.int16).to(torch.int8)

    for k in (1, 7, 256, 4096):
        for m in (1, 3, 17, 64):
            for n in (1, 5, 64):
                if k == 4096 and (m > 17 or n > 5):
                    continue  # file size: big K only with small M and N
                add_mm("rand", ri8(m, k), ri8(k, n))
    # -128 heavy: rows/cols of -128 and 127 (the extremes of the sum)
    for k in (7, 256, 4096):
        a = ri8(3, k)
        b = ri8(k, 4)
        a[0] = -128
        a[1] = 127
        a[2, ::2] = -128
        b[:, 0] = -128
        b[:, 1] = 127
        b[::3, 2] = -128
        add_mm("m128_mixed", a, b)
    a = torch.full((2, 4096), -128, dtype=torch.int8)
    b = torch.full((4096, 2), -128, dtype=torch.int8)
    add_mm("all_m128", a, b)  # 2^26 everywhere
    # values that only reach -128 at random places (per-element extremes)
    a = ri8(5, 256)
    b = ri8(256, 5)
    a[a > 100] = -128
    b[b < -100] = -128
    add_mm("m128_sprinkled", a, b)
    # the largest K: 2^31 - 128 (the largest exact sum) and -128*127*K
    k = K_MAX
    a = torch.full((1, k), -128, dtype=torch.int8)
    b = torch.full((k, 2), -128, dtype=torch.int8)
    b[k // 2, 0] = -127
    b[:, 1] = 127
    add_mm("kmax_extremes", a, b)


def linear_cases():
    gen = torch.Generator().manual_seed(8086)
    dts = FLOATS

    # --- A. shapes and sizes: every x dtype x K x N, realistic (quantized) weights
    i = 0
    for di, xdt in enumerate(dts):
        for k in (7, 256, 1024):
            for n in (1, 5, 64):
                shape = xshape(i, k)
                if k == 1024 and n == 64:
                    shape = [1, k]  # file size
                elif k == 1024 and shape[0] == 17:
                    shape = [5, k]  # file size (M = 17 is covered at K = 7 and 256)
                form = FORMS[(i + i // 4) % 4]
                sdt = dts[(i + 1) % 3]
                odt = dts[(i // 3 + di) % 3]
                bdt = [None, dts[0], dts[1], dts[2]][(i + di) % 4]
                q, s, w = realistic_weight(n, k, form, sdt, gen)
                x = act_input(shape, xdt, "", gen)
                add_linear("randn_w", x, q, s, bias_of(n, bdt, gen), odt, w_float=w,
                           ref_tol=0.2 if k > 7 else None)
                i += 1

    # --- B. every dtype combination (x, weight_scale, out, bias), small shapes, raw int8 weights
    i = 0
    for xdt in dts:
        for sdt in dts:
            for odt in dts:
                for bdt in [None] + dts:
                    n, k = 5, 7
                    form = FORMS[i % 4]
                    x = torch.randn([3, k] if i % 3 else [2, 2, k], generator=gen).to(xdt)
                    add_linear("raw_w", x, raw_weight(n, k, gen), raw_scale(n, form, sdt, gen),
                               bias_of(n, bdt, gen), odt)
                    i += 1

    # --- C. input activations without rotation
    i = 0
    for xdt in dts:
        for act in ("gelu_tanh", "swiglu"):
            for k in (7, 256):
                for n in (1, 5):
                    form = FORMS[i % 4]
                    shape = xshape(i, k)
                    q, s, w = realistic_weight(n, k, form, dts[i % 3], gen)
                    x = act_input(shape, xdt, act, gen)
                    add_linear("randn_w", x, q, s, bias_of(n, ([None] + dts)[i % 4], gen), dts[(i + 2) % 3],
                               act=act, w_float=w, ref_tol=0.2 if k > 7 else None)
                    i += 1
    # gelu / swiglu on a 1024 row
    for act in ("gelu_tanh", "swiglu"):
        q, s, w = realistic_weight(5, 1024, "[N,1]", torch.bfloat16, gen)
        add_linear("randn_w", act_input([2, 1024], torch.bfloat16, act, gen), q, s, None, torch.bfloat16,
                   act=act, w_float=w, ref_tol=0.2)

    # --- D. ConvRot: G 16 and 256, every x dtype, every input_act
    i = 0
    for xdt in dts:
        for g in (16, 256):
            for act in ("", "gelu_tanh", "swiglu"):
                k = 256 if (i % 2 == 0 or act == "swiglu") else 1024
                n = 5 if i % 3 else 64 if k == 256 else 1
                shape = [[1, k], [3, k], [2, 2, k]][i % 3]
                form = "[N,1]" if i % 4 else "[]"
                q, s, w = realistic_weight(n, k, form, dts[i % 3], gen, group=g)
                x = act_input(shape, xdt, act, gen)
                add_linear("dit_x", x, q, s, bias_of(n, ([None] + dts)[i % 4], gen), dts[(i + 1) % 3],
                           group=g, act=act, w_float=w, ref_tol=0.2)
                i += 1
    # ConvRot with raw weights and a [N] scale, G dividing K several times
    for xdt in dts:
        x = act_input([3, 256], xdt, "", gen)
        add_linear("raw_w", x, raw_weight(4, 256, gen), raw_scale(4, "[N]", xdt, gen), None, torch.float32,
                   group=16)

    # --- E. adversarial
    # gelu_tanh where only its accuracy for v << 0 decides: rows of strongly
    # negative inputs, whose activations are tiny (1 + tanh(z) would cancel
    # to nothing in float64 here) but set the row's scale and q all the same
    # (a row's largest activation sets its scale, so only rows made of such
    # values alone show the activation's accuracy in xq)
    for xdt in dts:
        x = -3 - torch.rand(5, 64, generator=gen) * 6  # [-9, -3]
        x[1] = -6 - torch.rand(64, generator=gen) * 1.5  # [-7.5, -6]: 1 + tanh(z) keeps ~2 float64 digits
        x[2] = -8.5 - torch.rand(64, generator=gen) * 1.5  # [-10, -8.5]: 1 + tanh(z) == 0 in float64
        x[3] = torch.linspace(-9, 2, 64)  # mixed signs
        x[4] = -4.5 - torch.rand(64, generator=gen)  # [-5.5, -4.5]: float16 subnormal results
        x[4, :8] = -14.0  # -0.0 in every dtype
        add_linear("gelu_far_negative", x.to(xdt), raw_weight(5, 64, gen), raw_scale(5, "[N,1]", torch.float32, gen),
                   None, xdt, act="gelu_tanh")
    # 1-D x (one row)
    q, s, w = realistic_weight(5, 256, "[N,1]", torch.float32, gen)
    add_linear("one_d", act_input([256], torch.float16, "", gen), q, s, bias_of(5, torch.float32, gen),
               torch.float16, w_float=w, ref_tol=0.2)
    add_linear("one_d", act_input([256], torch.bfloat16, "gelu_tanh", gen), q, s, None, torch.bfloat16,
               act="gelu_tanh", w_float=w, ref_tol=0.2)
    # zero rows, -0.0, rows of very different magnitude
    for xdt in dts:
        x = (torch.randn(6, 256, generator=gen) * torch.exp(torch.randn(6, 1, generator=gen) * 5)).to(xdt)
        x[1] = 0
        x[3] = -0.0
        x[4, :100] = 0
        x = torch.where(torch.isfinite(x), x, torch.zeros_like(x))
        add_linear("zero_rows", x, raw_weight(5, 256, gen), raw_scale(5, "[N,1]", torch.float32, gen),
                   bias_of(5, xdt, gen), xdt)
        add_linear("zero_rows", x, raw_weight(5, 256, gen), raw_scale(5, "[]", torch.bfloat16, gen),
                   None, torch.float32, group=256)
    # xq = -128: in float16/bfloat16, rT(max/t) can round up to 127.5 or more
    for xdt in (torch.float16, torch.bfloat16):
        a = gg.all_positive_finite(xdt)
        lo, hi = (1e-4, 1e-2) if xdt == torch.float16 else (1e-3, 1e3)  # float16: only below 2^-10
        a = a[(a.float() > lo) & (a.float() < hi)]
        _, s_ = gg.quantize_int8_rowwise(a.reshape(-1, 1))
        yy = gg.divide_by_t(a.reshape(-1, 1), s_).reshape(-1).float()
        sel = a[yy >= 127.5]
        picks = sel[[0, sel.numel() // 3, 2 * sel.numel() // 3, -1]].float().tolist()
        assert len(picks) == 4, xdt
        k = 256
        rows = []
        for r, p in enumerate(picks):
            row = (torch.randn(k, generator=gen) * p * 0.3).clamp(-p * 0.99, p * 0.99)
            row[r::7] = -p
            if r == 0:
                row[:] = -p  # a whole row of -128
            rows.append(row)
        x = torch.stack(rows).to(xdt)
        qx, _ = gg.quantize_int8_rowwise(x, 0)
        assert (qx == -128).any()
        wq = raw_weight(5, k, gen)
        add_linear("xq_m128", x, wq, raw_scale(5, "[N,1]", xdt, gen), bias_of(5, torch.float32, gen), xdt)
        add_linear("xq_m128", x, wq, raw_scale(5, "[1]", torch.float32, gen), None, torch.float32)
    # |acc| > 2^24: float32(acc) rounds to nearest even, ties included.
    # xq = +-127 everywhere (float32 x); weight rows of -128 with delta
    # entries -127, so |acc| = 127 * (128*K - delta) in [2^24, 2^25), ulp 2:
    # an odd delta is an exact tie.
    k = 2048
    x = torch.full((2, k), 15.875, dtype=torch.float32)  # 127 * 2^-3: the scale is exactly 2^-3 in every dtype
    x[1] = -15.875
    w = torch.full((4, k), -128, dtype=torch.int8)
    for r, delta in enumerate((1, 2, 3, 6)):  # 1 and 3: ties
        w[r, :delta] = -127
    add_linear("acc_round", x, w, torch.tensor([0.001], dtype=torch.float32), None, torch.float32)
    add_linear("acc_round", x.to(torch.bfloat16), w, torch.tensor(0.25, dtype=torch.bfloat16),
               bias_of(4, torch.float16, gen), torch.bfloat16)
    # random signs, K = 4096: weight rows 1-3 agree in sign with x's row 1
    # (127 or -127/-128 at random), so |acc| is in [2^25, 2^26), ulp 4
    k = 4096
    xs_ = torch.randn(2, k, generator=gen).sign() * 3
    xs_[xs_ == 0] = 3
    wr = raw_weight(4, k, gen)
    neg = torch.where(torch.rand(3, k, generator=gen) < 0.5, -127, -128)
    wr[1:] = torch.where(xs_[1] > 0, torch.full_like(neg, 127), neg).to(torch.int8)
    add_linear("acc_round_raw", xs_.to(torch.float16), wr, raw_scale(4, "[N]", torch.float32, gen), None,
               torch.float32)
    assert STATS["acc_f32_inexact"] == 3, "each acc_round case must round float32(acc)"
    # float16 output overflowing to +-inf, with and without a bias
    x = torch.randn(2, 256, generator=gen) * 1000
    w = raw_weight(6, 256, gen)
    w[3] = 127
    w[4] = -128
    ws = torch.tensor([1.0, 0.5, 1e-3, 2.0, 4.0, 1e-4]).reshape(6, 1)
    add_linear("f16_overflow", x, w, ws, None, torch.float16)
    add_linear("f16_overflow", x, w, ws, torch.tensor([0.0, 60000.0, -60000.0, 1.0, -1.0, 65504.0]).to(torch.float16),
               torch.float16)
    add_linear("f16_overflow", x.to(torch.bfloat16), w, ws.to(torch.bfloat16), None, torch.float16)
    # tiny scales: c = xs * ws is subnormal or zero in float32
    x = (torch.randn(3, 64, generator=gen) * 1e-30).to(torch.float32)
    x[2] *= 1e-8
    w = raw_weight(5, 64, gen)
    add_linear("tiny_c", x, w, torch.tensor([1e-10, 1e-8, 1e-12, 3e-9, 1e-6], dtype=torch.float32), None,
               torch.float32)
    add_linear("tiny_c", x, w, torch.tensor([1e-10], dtype=torch.float32), torch.zeros(5, dtype=torch.float32),
               torch.float32)
    x16 = (torch.randn(2, 64, generator=gen) * 2.0**-14).to(torch.float16)
    add_linear("tiny_c", x16, w, torch.tensor([2.0**-24], dtype=torch.float16).reshape(()), None, torch.float16)
    # bias that the output dtype rounds, and -0.0 outputs plus -0.0 bias
    x = torch.randn(3, 7, generator=gen)
    w = raw_weight(5, 7, gen)
    w[4] = 0
    add_linear("bias_round", x, w, raw_scale(5, "[N]", torch.float32, gen),
               torch.tensor([1 + 2.0**-9, 1 + 3 * 2.0**-9, -1e-3, 300.7, -0.0], dtype=torch.float32), torch.bfloat16)
    add_linear("bias_round", x.to(torch.float16), w, raw_scale(5, "[N]", torch.float16, gen),
               torch.tensor([1 + 2.0**-11, 70000.0 / 2, -1e-8, 300.7, -0.0], dtype=torch.float32), torch.float16)
    # K = 1: one element per row
    x = torch.tensor([[0.3], [-2.0], [0.0]], dtype=torch.float32)
    add_linear("k1", x, torch.tensor([[-128], [127], [5]], dtype=torch.int8),
               torch.tensor([0.01, 0.02, 0.03]), None, torch.float32)
    # N = 1 with a [N,1] = [1,1] scale, K = 1024, three dtypes, swiglu
    for xdt in dts:
        q, s, w = realistic_weight(1, 1024, "[N,1]", xdt, gen)
        add_linear("n1", act_input([1, 1024], xdt, "swiglu", gen), q, s, bias_of(1, xdt, gen), xdt,
                   act="swiglu", w_float=w, ref_tol=0.2)


# --------------------------------------------------------------------------
# Self-checks
# --------------------------------------------------------------------------

def self_check():
    gg.self_check()
    # float32(int32) is round to nearest even in torch and via float64
    v = np.array([2**24 + 1, 2**24 + 3, 2**25 + 2, 2**25 + 6, -(2**24 + 1), -(2**26 + 2), 2**31 - 1, -(2**31),
                  2**24 + 2, 16777217 * 2 + 1], dtype=np.int64)
    want = [16777216.0, 16777220.0, 33554432.0, 33554440.0, -16777216.0, -67108864.0, 2147483648.0,
            -2147483648.0, 16777218.0, 33554436.0]
    assert v.astype(np.float64).astype(np.float32).tolist() == want
    assert torch.from_numpy(v.astype(np.int32)).float().tolist() == want
    g = torch.Generator().manual_seed(3)
    r = torch.randint(-(2**31), 2**31 - 1, (1 << 20,), generator=g, dtype=torch.int64)
    assert np.array_equal(torch.from_numpy(r.numpy().astype(np.int32)).float().numpy(),
                          r.numpy().astype(np.float64).astype(np.float32))
    # float32 products in torch and numpy agree (no FMA, RNE, subnormals kept)
    a = torch.randn(1 << 16, generator=g) * torch.pow(2.0, torch.randint(-75, 60, (1 << 16,), generator=g).float())
    b = torch.randn(1 << 16, generator=g) * torch.pow(2.0, torch.randint(-75, 60, (1 << 16,), generator=g).float())
    assert torch.isfinite(a * b).all() and ((a * b).abs() < 2.0**-126).any()
    assert np.array_equal((a * b).numpy().view(np.uint32), (a.numpy() * b.numpy()).view(np.uint32))
    assert float((torch.tensor([2.0**-70]) * torch.tensor([2.0**-70])).item()) == 2.0**-140
    # the activations on hand-checked values
    x = torch.tensor([0.0, 1.0, -1.0, 3.0, -30.0])
    ref = [0.5 * v * (1 + math.tanh(SQRT_2_OVER_PI * (v + 0.044715 * v ** 3))) for v in x.tolist()]
    assert np.allclose(gelu_tanh(x).numpy(), ref, rtol=1e-7, atol=0)
    assert gelu_tanh(torch.tensor([-30.0])).item() == 0.0
    ref = [v / (1 + math.exp(-v)) for v in [0.0, 1.0, -1.0, 3.0]]
    assert np.allclose(silu(torch.tensor([0.0, 1.0, -1.0, 3.0])).numpy(), ref, rtol=1e-7, atol=0)
    assert silu(torch.tensor([-1000.0])).item() == 0.0
    # the butterfly rotation is an involution up to rounding (import sanity)
    x = torch.randn(2, 256, generator=g)
    assert (cr.rotate_butterfly(cr.rotate_butterfly(x, 16), 16) - x).abs().max() < 1e-5


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata", "golden", "linear.json")
    torch.set_flush_denormal(False)
    torch.set_num_threads(1)
    self_check()
    mm_cases()
    linear_cases()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write('{"generator": %s, "torch": %s,\n "activation": %s,\n "rotation": %s,\n "cases": [\n' % (
            json.dumps("tools/golden/gen_linear.py"), json.dumps(torch.__version__),
            json.dumps("float64 from v = f32(x), rounded to float32, then to T. gelu_tanh: "
                       "z = sqrt(2/pi)*(v+0.044715*((v*v)*v)), v/(1+exp(-2z)) (= 0.5*v*(1+tanh z) without "
                       "its cancellation); silu: v/(1+exp(-v)); swiglu's g*up one float32 product rounded to T; "
                       "every value checked against 80-bit long double and away from float32 rounding "
                       "boundaries"),
            json.dumps("kitchen's butterfly (gen_convrot.rotate_butterfly), rounded once to T")))
        for i, c in enumerate(CASES):
            f.write("  " + json.dumps(c, allow_nan=False) + (",\n" if i + 1 < len(CASES) else "\n"))
        f.write(" ]}\n")
    ops = {}
    for c in CASES:
        ops[c["op"]] = ops.get(c["op"], 0) + 1
    print("cases:", ", ".join("%s %d" % kv for kv in sorted(ops.items())))
    for (act, dt), (n, nd, mu) in sorted(ACT_STATS.items()):
        print("%-9s %-8s: %6d elements, %5d differ from torch's float32 form (F.gelu(approximate='tanh') / "
              "F.silu), max %d ulps of T" % (act, dt, n, nd, mu))
    print("convrot: %d cases; PyTorch's matrix rotation would change xq in %d and the output in %d" % (
        STATS["convrot_cases"], STATS["convrot_xq_diff"], STATS["convrot_out_diff"]))
    print("int8_linear cases with |acc| > 2^24: %d (float32(acc) inexact: %d); xq = -128: %d; subnormal c: %d; "
          "float16 inf out: %d" % (STATS["acc_above_2_24"], STATS["acc_f32_inexact"], STATS["xq_m128"],
                                   STATS["subnormal_c"], STATS["f16_inf"]))
    print("largest relative error against act(x) @ W^T in float64 (realistic weights): %.3f" % STATS["max_rel"])
    print("total cases: %d, bytes: %d -> %s" % (len(CASES), os.path.getsize(out), out))


if __name__ == "__main__":
    main()
