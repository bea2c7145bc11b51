"""Matmul throughput: GEMM in TFLOP/s against PyTorch's torch.matmul (cuBLASLt) in the same
run, and the decode gemv in GB/s of the matrix bytes against the device copy roofline.

    python benchmarks/matmul_bench.py [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mlx.core as mx  # noqa: E402

from harness import Bench, torch_cuda  # noqa: E402

from mlx_amd.runtime.ops import matmul  # noqa: E402

REPEAT = 4   # independent products per evaluation: the engine's host work overlaps the GPU's

GEMMS = [("bf16", mx.bfloat16, "bfloat16", 4096), ("bf16", mx.bfloat16, "bfloat16", 8192),
         ("f16", mx.float16, "float16", 4096), ("f32", mx.float32, "float32", 4096)]


def torch_pair(tname, n):
    torch = torch_cuda()
    if torch is None:
        return None
    torch.backends.cuda.matmul.allow_tf32 = False       # true fp32, like ours
    dt = getattr(torch, tname)
    return torch.randn(n, n, device="cuda", dtype=dt), torch.randn(n, n, device="cuda", dtype=dt)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args(argv)
    b = Bench("matmul_bench")
    for short, dt, tname, n in GEMMS:
        x = mx.random.normal((n, n), key=mx.random.key(0)).astype(dt)
        ys = [mx.random.normal((n, n), key=mx.random.key(1 + i)).astype(dt) for i in range(REPEAT)]
        flops = 2.0 * n * n * n
        kms = b.time_node(matmul, "Matmul", (), (x, ys[0]), [(n, n)], [tname])
        ms = b.time_mlx(lambda p, *qs: [p @ q for q in qs], x, *ys) / REPEAT
        tp = torch_pair(tname, n)
        ref = None
        if tp is not None:
            import torch
            tms = b.time_torch(lambda: torch.matmul(*tp))
            ref = flops / (tms * 1e-3) / 1e12 if tms else None
        b.row(f"gemm {short} {n}", flops / (kms * 1e-3) / 1e12, "TFLOP/s", "torch.matmul", ref)
        b.row(f"gemm {short} {n} (mx.eval, end to end)", flops / (ms * 1e-3) / 1e12, "TFLOP/s",
              "torch.matmul", ref)
        del x, ys, tp
    rows, k = 14336, 4096
    ws = [mx.random.normal((rows, k), key=mx.random.key(10 + i)).astype(mx.bfloat16) for i in range(2 * REPEAT)]
    v = mx.random.normal((1, k), key=mx.random.key(3)).astype(mx.bfloat16)
    nbytes = (rows * k + k + rows) * 2
    kms = b.time_node(matmul, "Matmul", (), (v, ws[0].T), [(1, rows)], ["bfloat16"])
    b.row(f"gemv bf16 {rows}x{k}", nbytes / (kms * 1e-3) / 1e9, "GB/s", "copy roofline", b.roofline_gbps)
    ms = b.time_mlx(lambda p, *qs: [p @ q.T for q in qs], v, *ws) / (2 * REPEAT)
    b.row(f"gemv bf16 {rows}x{k} (mx.eval, end to end)", nbytes / (ms * 1e-3) / 1e9, "GB/s",
          "copy roofline", b.roofline_gbps)
    print(b.write(args.out))


if __name__ == "__main__":
    main()
