#!/usr/bin/python3
"""Times PyTorch's eager CPU path for the Q/DQ operations against kitchen,
alternating the two in one run, and prints the speed-ups.

What it measures
    PyTorch: the operations as comfy-kitchen's eager backend computes them
    (abs-max over the row, scale in float32, x divided by the scale in x's
    dtype, rounded and clamped in place, then cast; dequantize as
    q.float() * scale cast to the output dtype), on bfloat16 [8352, 3840]
    (or --shape/--dtype), with torch.set_num_threads(2) (or --threads).
    kitchen: `kitchen bench --json --backends cpu` on the same shape and
    dtype, whose rows give the median with fresh outputs (allocated by each
    call and released after it) and with reused ones (kitchen.Into).
    The two alternate for --rounds rounds, so the machine's drift affects
    both alike; each figure is the median over the rounds of each round's
    median.

How to run it (from the repository root; it needs Debian's python3-torch)
    go build -o /tmp/kitchen ./cmd/kitchen
    /usr/bin/python3 tools/torchbench/vs_torch.py --kitchen /tmp/kitchen
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def divide_round(x, s):
    t = s.to(x.dtype)
    t = torch.where(t == 0, torch.full_like(t, torch.finfo(x.dtype).tiny), t)
    y = x / t
    if y.dtype == torch.float16:  # torch 1.13 has no CPU round for float16
        y = y.float()
    return y.round_().clamp_(-128.0, 127.0).to(torch.int8)


def rowwise(x):
    s = (x.abs().amax(dim=-1, keepdim=True).float() / 127.0).clamp(min=1e-30)
    return divide_round(x, s), s


def tensorwise(x):
    s = (x.abs().max().float() / 127.0).clamp(min=1e-30)
    return divide_round(x, s), s


def torch_medians(x, runs):
    q, s = rowwise(x)
    ops = {
        "quantize_int8_rowwise": lambda: rowwise(x),
        "quantize_int8_tensorwise": lambda: tensorwise(x),
        "dequantize_int8_simple_dtype": lambda: (q.float() * s).to(x.dtype),
    }
    out = {}
    for name, f in ops.items():
        f()  # warm up
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times) * 1e3
    return out


def kitchen_medians(binary, shape, dtype, runs):
    cmd = [binary, "bench", "--json", "--backends", "cpu", "--runs", str(runs), "--warmup", "2",
           "--shape", shape, "--dtype", dtype,
           "--op", "quantize_int8_rowwise,quantize_int8_tensorwise,dequantize_int8_simple_dtype"]
    res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    res = res[0] if isinstance(res, list) else res
    return {(o["op"], o["outputs"]): o["median_ms"] for o in res["ops"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kitchen", required=True, help="the kitchen binary")
    p.add_argument("--shape", default="8352,3840")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--runs", type=int, default=5, help="timed calls per round and side")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    shape = [int(d) for d in args.shape.split(",")]
    x = torch.randn(*shape).to(DTYPES[args.dtype])
    tr, kr = [], []
    for _ in range(args.rounds):
        tr.append(torch_medians(x, args.runs))
        kr.append(kitchen_medians(args.kitchen, args.shape, args.dtype, args.runs))
    print("%s %s, torch %s on %d threads, %d alternating rounds" % (args.dtype, shape, torch.__version__, args.threads, args.rounds))
    print("%-30s %10s %12s %12s %9s %9s" % ("operation", "torch ms", "fresh ms", "reused ms", "x fresh", "x reused"))
    for op in tr[0]:
        t = statistics.median(r[op] for r in tr)
        f = statistics.median(r[(op, "fresh")] for r in kr)
        u = statistics.median(r[(op, "reused")] for r in kr)
        print("%-30s %10.2f %12.3f %12.3f %9.1f %9.1f" % (op, t, f, u, t / f, t / u))


if __name__ == "__main__":
    main()
