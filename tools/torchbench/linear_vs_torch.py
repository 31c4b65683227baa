#!/usr/bin/python3
"""Times PyTorch's int8 and float32 linear layers on the CPU against
kitchen's int8_linear, alternating the two in one run.

What it measures
    PyTorch: torch.ao.quantization.quantize_dynamic's Linear (int8 weights,
    activations quantized per call, 7 bits of them on x86, so not exact) on
    the quantized engine named by --engine (onednn or fbgemm), and a
    float32 nn.Linear (the BLAS PyTorch was built with), on float32 x, with
    torch.set_num_threads(2) (or --threads).
    kitchen: `kitchen bench --json --backends cpu --op int8_linear` on the
    same shape, bfloat16 x, the median with reused outputs.
    For each shape M,K,N the two alternate for --rounds rounds; each figure
    is the median over the rounds of each round's median, and GOPS is
    2·M·N·K over it.

How to run it (from the repository root; it needs Debian's python3-torch)
    go build -o /tmp/kitchen ./cmd/kitchen
    /usr/bin/python3 tools/torchbench/linear_vs_torch.py --kitchen /tmp/kitchen
"""

import argparse
import json
import statistics
import subprocess
import time

import torch

SHAPES = ["4096,3072,3072", "4096,3072,12288", "512,4096,4096", "16,4096,4096", "1,4096,4096"]


def torch_medians(m, k, n, engine, runs):
    torch.backends.quantized.engine = engine
    x = torch.randn(m, k)
    lin = torch.nn.Linear(k, n)
    q = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear}, dtype=torch.qint8)
    out = {}
    with torch.no_grad():
        for name, f in (("int8", q), ("fp32", lin)):
            for _ in range(2):
                f(x)
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                f(x)
                times.append((time.perf_counter() - t0) * 1e3)
            out[name] = statistics.median(times)
    return out


def kitchen_median(binary, shape, runs):
    cmd = [binary, "bench", "--json", "--backends", "cpu", "--runs", str(runs), "--warmup", "2",
           "--shape", shape, "--op", "int8_linear"]
    res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    res = res[0] if isinstance(res, list) else res
    return next(o["median_ms"] for o in res["ops"] if o["outputs"] == "reused")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kitchen", required=True, help="the kitchen binary")
    ap.add_argument("--shapes", default=";".join(SHAPES), help="M,K,N;M,K,N")
    ap.add_argument("--engine", default="onednn", help="torch's quantized engine: onednn or fbgemm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, engine {a.engine}, {a.threads} threads, {a.rounds} rounds of {a.runs} runs")
    print(f"{'M,K,N':>16} {'torch int8 ms':>14} {'torch fp32 ms':>14} {'kitchen ms':>11} {'kitchen GOPS':>13} {'x int8':>7} {'x fp32':>7}")
    for shape in a.shapes.split(";"):
        m, k, n = (int(v) for v in shape.split(","))
        i8, f32, kit = [], [], []
        for _ in range(a.rounds):
            t = torch_medians(m, k, n, a.engine, a.runs)
            i8.append(t["int8"])
            f32.append(t["fp32"])
            kit.append(kitchen_median(a.kitchen, shape, a.runs))
        i8, f32, kit = statistics.median(i8), statistics.median(f32), statistics.median(kit)
        gops = 2 * m * n * k / kit / 1e6
        print(f"{shape:>16} {i8:14.3f} {f32:14.3f} {kit:11.3f} {gops:13.1f} {i8 / kit:7.2f} {f32 / kit:7.2f}")


if __name__ == "__main__":
    main()
