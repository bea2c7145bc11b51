"""rms_norm, layer_norm and rope (our fused primitives) against the memory roofline and
PyTorch, in one run.

    python benchmarks/norm_bandwidth.py [--out DIR]

Per case: the family's plan on resident inputs, timed with device events (Bench.time_node:
the kernel rows), and mx.fast.* through mlx-amd's evaluator (end to end rows).
Bandwidth counts the bytes that must move: x, weight/bias/offset once, the output once.
Writes <out>/norm_bandwidth-h200.json.
"""

import argparse
import os
import sys

import mlx.core as mx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Bench, torch_cuda  # noqa: E402

from mlx_amd.runtime.ops import norm, rope  # noqa: E402

# name, op, x shape, dtype
CASES = [
    ("rms_norm bf16 4096x4096 (row)", "rms", (4096, 4096), "bfloat16"),
    ("rms_norm f32 4096x4096 (row)", "rms", (4096, 4096), "float32"),
    ("rms_norm bf16 32768x512 (row)", "rms", (32768, 512), "bfloat16"),
    ("layer_norm bf16 4096x4096 (row)", "ln", (4096, 4096), "bfloat16"),
    ("rope bf16 1x32x4096x128", "rope", (1, 32, 4096, 128), "bfloat16"),
]


def node_args(op, shape, dtype):
    """(family, primitive, params, input arrays) of one case's node, as mx.fast builds it."""
    dt = getattr(mx, dtype)
    x = mx.random.normal(shape).astype(dt)
    n = shape[-1]
    w = mx.ones((n,), dtype=dt)
    if op == "rms":
        return norm, "mlx_amd::RMSNorm", (1e-5, True), (x, w)
    if op == "ln":
        return norm, "mlx_amd::LayerNorm", (1e-5, True, True), (x, w, w)
    return rope, "mlx_amd::RoPE", (n, False, 10000.0, 1.0, False), (x, mx.array(0, dtype=mx.int32))


def mlx_fn(op, n, dtype):
    w = mx.ones((n,), dtype=getattr(mx, dtype))
    if op == "rms":
        return lambda a: mx.fast.rms_norm(a, w, 1e-5)
    if op == "ln":
        return lambda a: mx.fast.layer_norm(a, w, w, 1e-5)
    return lambda a: mx.fast.rope(a, n, traditional=False, base=10000.0, scale=1.0, offset=5)


def torch_fn(op, shape, dtype):
    torch = torch_cuda()
    if torch is None:
        return None, None
    t = torch.randn(shape, device="cuda", dtype=torch.float32).to(getattr(torch, dtype))
    w = torch.ones(shape[-1], device="cuda", dtype=t.dtype)
    if op == "rms" and hasattr(torch.nn.functional, "rms_norm"):
        return (lambda: torch.nn.functional.rms_norm(t, (shape[-1],), w, 1e-5)), t
    if op == "ln":
        return (lambda: torch.nn.functional.layer_norm(t, (shape[-1],), w, w, 1e-5)), t
    return None, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    b = Bench("norm_bandwidth")
    for name, op, shape, dtype in CASES:
        fam, prim, params, ins = node_args(op, shape, dtype)
        moved = sum(a.nbytes for a in ins) + ins[0].nbytes      # inputs once, the output once
        ms = b.time_node(fam, prim, params, ins, [shape], [dtype])
        gbps = moved / (ms * 1e-3) / 1e9
        b.row(name, gbps, "GB/s", "copy roofline", b.roofline_gbps)
        tf, t = torch_fn(op, shape, dtype)
        if tf is not None:
            tms = b.time_torch(tf)
            b.row(name + " vs PyTorch", gbps, "GB/s", "PyTorch", moved / (tms * 1e-3) / 1e9)
            del t
        e2e = b.time_mlx(mlx_fn(op, shape[-1], dtype), ins[0])
        b.row(name + " (end to end)", moved / (e2e * 1e-3) / 1e9, "GB/s", "copy roofline", b.roofline_gbps)
        del ins
    print("wrote", b.write(args.out))


if __name__ == "__main__":
    main()
