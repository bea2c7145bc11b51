"""Softmax, logsumexp and cumsum against the memory roofline and PyTorch, in one run.

    python benchmarks/softmax_bandwidth.py [--out DIR]

Per case: the family's plan on resident inputs, timed with device events (Bench.time_node:
the kernel rows; median after warm-up), and the same op through mlx-amd's
evaluator (the "end to end" rows: inputs resident, includes the engine's host work).
Bandwidth counts the bytes that must move: the input once and the output once. References
from the same run: the device copy roofline and PyTorch's op on the same shape.
Writes <out>/softmax_bandwidth-h200.json.
"""

import argparse
import math
import os
import sys

import mlx.core as mx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Bench, torch_cuda  # noqa: E402

from mlx_amd.runtime.ops import scan, softmax  # noqa: E402

# name, op, shape, dtype
CASES = [
    ("softmax bf16 4096x32768", "softmax", (4096, 32768), "bfloat16"),
    ("softmax f32 32768x1024", "softmax", (32768, 1024), "float32"),
    ("logsumexp f32 4096x32768", "logsumexp", (4096, 32768), "float32"),
    ("cumsum f32 4096x32768 (row)", "cumsum", (4096, 32768), "float32"),
    ("cumsum f32 2^26 (one row)", "cumsum", (1 << 26,), "float32"),
]


def node_args(op, shape):
    """(family, primitive, params, output shape) of one case's node, as MLX builds it."""
    if op == "softmax":
        return softmax, "Softmax", (False,), shape
    if op == "logsumexp":
        return softmax, "LogSumExp", (), shape[:-1] + (1,)
    return scan, "Scan", (2, len(shape) - 1, False, True), shape


def mlx_fn(op):
    if op == "softmax":
        return lambda a: mx.softmax(a, axis=-1)
    if op == "logsumexp":
        return lambda a: mx.logsumexp(a, axis=-1)
    return lambda a: mx.cumsum(a, axis=-1)


def torch_fn(op, shape, dtype):
    torch = torch_cuda()
    if torch is None:
        return None, None
    t = torch.randn(shape, device="cuda", dtype=torch.float32).to(getattr(torch, dtype))
    if op == "softmax":
        return (lambda: torch.softmax(t, -1)), t
    if op == "logsumexp":
        return (lambda: torch.logsumexp(t, -1)), t
    return (lambda: torch.cumsum(t, -1)), t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    b = Bench("softmax_bandwidth")
    for name, op, shape, dtype in CASES:
        fam, prim, params, oshape = node_args(op, shape)
        x = mx.random.normal(shape).astype(getattr(mx, dtype))
        moved = x.nbytes + math.prod(oshape) * x.itemsize           # the input once, the output once
        ms = b.time_node(fam, prim, params, (x,), [oshape], [dtype])
        gbps = moved / (ms * 1e-3) / 1e9
        b.row(name, gbps, "GB/s", "copy roofline", b.roofline_gbps)
        tf, t = torch_fn(op, shape, dtype)
        if tf is not None:
            tms = b.time_torch(tf)
            b.row(name + " vs PyTorch", gbps, "GB/s", "PyTorch", moved / (tms * 1e-3) / 1e9)
            del t
        e2e = b.time_mlx(mlx_fn(op), x)
        b.row(name + " (end to end)", moved / (e2e * 1e-3) / 1e9, "GB/s", "copy roofline", b.roofline_gbps)
        del x
    print("wrote", b.write(args.out))


if __name__ == "__main__":
    main()
