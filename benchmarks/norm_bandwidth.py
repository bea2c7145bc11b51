"""rms_norm, layer_norm and rope (our fused primitives) against the memory roofline and
PyTorch, in one run.

    python benchmarks/norm_bandwidth.py [--out DIR]

Per case: the family's plan launched directly on device buffers and timed with device
events (kernel rows), and mx.fast.* through mlx-amd's evaluator (end to end rows).
Bandwidth counts the bytes that must move: x, weight/bias/offset once, the output once.
Writes <out>/norm_bandwidth-h200.json.
"""

import argparse
import math
import os
import sys

import mlx.core as mx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Bench, torch_cuda  # noqa: E402

from mlx_amd.runtime.launch import Launch, run  # noqa: E402
from mlx_amd.runtime.ops import norm, rope  # noqa: E402
from mlx_amd.runtime.plan import ITEMSIZE, Layout, Node  # noqa: E402

R = Layout.row_major
# name, op, x shape, dtype
CASES = [
    ("rms_norm bf16 4096x4096 (row)", "rms", (4096, 4096), "bfloat16"),
    ("rms_norm f32 4096x4096 (row)", "rms", (4096, 4096), "float32"),
    ("rms_norm bf16 32768x512 (row)", "rms", (32768, 512), "bfloat16"),
    ("layer_norm bf16 4096x4096 (row)", "ln", (4096, 4096), "bfloat16"),
    ("rope bf16 1x32x4096x128", "rope", (1, 32, 4096, 128), "bfloat16"),
]


def node_for(op, shape, dtype):
    x = R(shape, dtype)
    n = shape[-1]
    if op == "rms":
        return norm, Node("mlx_amd::RMSNorm", (1e-5, True), (x, R((n,), dtype)), (x,))
    if op == "ln":
        return norm, Node("mlx_amd::LayerNorm", (1e-5, True, True), (x, R((n,), dtype), R((n,), dtype)), (x,))
    return rope, Node("mlx_amd::RoPE", (n, False, 10000.0, 1.0, False), (x, R((), "int32")), (x,))


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
    drv, mods = b.drv, b.rt.modules
    for name, op, shape, dtype in CASES:
        mod, node = node_for(op, shape, dtype)
        plan = mod.plan_node(node, b.props)
        sizes = [max(1, lay.size * ITEMSIZE[lay.dtype]) for lay in node.ins]
        n_out = node.out.size * ITEMSIZE[dtype]
        moved = sum(sizes) + n_out
        ins = [drv.malloc(s) for s in sizes]
        o = drv.malloc(n_out)
        for p, s, lay in zip(ins, sizes, node.ins):
            drv.memset(p, 0 if lay.dtype == "int32" else 0x3c, s)   # finite values, offset 0
        launches = [s for s in plan.steps if isinstance(s, Launch)]
        args_ = [(s, tuple((ins[r.index] if r.kind == "i" else o) + r.offset for r in s.refs)) for s in launches]
        ms = b.time_device(lambda: [run(s, mods, drv, p) for s, p in args_])
        gbps = moved / (ms * 1e-3) / 1e9
        b.row(name, gbps, "GB/s", "copy roofline", b.roofline_gbps)
        tf, t = torch_fn(op, shape, dtype)
        if tf is not None:
            tms = b.time_torch(tf)
            b.row(name + " vs PyTorch", gbps, "GB/s", "PyTorch", moved / (tms * 1e-3) / 1e9)
            del t
        for p in ins + [o]:
            drv.free(p)
        x = mx.random.normal(shape).astype(getattr(mx, dtype))
        e2e = b.time_mlx(mlx_fn(op, shape[-1], dtype), x)
        b.row(name + " (end to end)", moved / (e2e * 1e-3) / 1e9, "GB/s", "copy roofline", b.roofline_gbps)
        del x
    print("wrote", b.write(args.out))


if __name__ == "__main__":
    main()
