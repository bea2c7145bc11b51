"""Reduce / ArgReduce kernels against the memory roofline and PyTorch, measured in one run.

    python benchmarks/reduce_bandwidth.py [--out DIR]

Each case is planned by the reduce launcher exactly as the evaluator would plan the MLX
node, and its steps (both passes of a split reduction included) are launched on resident
device buffers, timed with device events (median of 20 after warm-up). GB/s counts the
bytes that must move: the input once and the output once. References from the same run:
the device-to-device copy (roofline) and the same reduction in PyTorch. One end-to-end
row (mx.eval through the engine, host work included) shows what a user sees.
Writes <out>/reduce_bandwidth-h200.json.
"""

import argparse
import os
import sys

import mlx.core as mx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Bench  # noqa: E402

from mlx_amd.runtime.launch import Launch, run  # noqa: E402
from mlx_amd.runtime.ops import reduce as rd  # noqa: E402
from mlx_amd.runtime.plan import ITEMSIZE, Layout, Node  # noqa: E402

# name, dtype, shape, reduced axes (None: ArgReduce over axis 1 as given), op, torch call
CASES = [
    ("sum f32 2^28 (all)", "float32", (1 << 28,), (0,), "sum", lambda t: t.sum()),
    ("sum bf16 4096x32768 (row)", "bfloat16", (4096, 32768), (1,), "sum", lambda t: t.sum(1)),
    ("max f32 32768x4096 (col)", "float32", (32768, 4096), (0,), "max", lambda t: t.amax(0)),
    ("sum f32 (256,256,256) axis 1 (strided)", "float32", (256, 256, 256), (1,), "sum", lambda t: t.sum(1)),
    ("argmax f32 4096x32768 (row)", "float32", (4096, 32768), 1, "argmax", lambda t: t.argmax(1)),
    ("argmax bf16 1x128256 (a row of logits)", "bfloat16", (1, 128256), 1, "argmax", lambda t: t.argmax(1)),
]
_OPS = {"and": 0, "or": 1, "sum": 2, "prod": 3, "min": 4, "max": 5}


def node_for(dtype, shape, axes, op):
    x = Layout.row_major(shape, dtype)
    if op.startswith("arg"):
        oshape = tuple(1 if i == axes else d for i, d in enumerate(shape))
        return Node("ArgReduce", ({"argmin": 0, "argmax": 1}[op], axes), (x,), (Layout.row_major(oshape, "uint32"),))
    oshape = tuple(1 if i in axes else d for i, d in enumerate(shape))
    return Node("Reduce", (_OPS[op], tuple(axes)), (x,), (Layout.row_major(oshape, rd.out_dtype(op, dtype)),))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    b = Bench("reduce_bandwidth")
    drv, mods, props = b.drv, b.rt.modules, b.props
    try:
        import torch

        tdt = {"float32": torch.float32, "bfloat16": torch.bfloat16}
        have_torch = torch.cuda.is_available()
    except Exception:
        have_torch = False

    split = rd._arg_split
    for name, dtype, shape, axes, op, tfn in CASES + [(n + ", one block a row (before the split)", *rest)
                                                       for n, *rest in CASES if "logits" in n]:
        node = node_for(dtype, shape, axes, op)
        rd._arg_split = (lambda *a: None) if "before the split" in name else split
        plan = rd.plan_node(node, props)
        rd._arg_split = split
        if plan is None:
            print(f"  {name}: no plan")
            continue
        x, o = node.ins[0], node.out
        nbytes = x.nbytes + o.nbytes
        xin = drv.malloc(x.nbytes)
        drv.memset(xin, 0x3C, x.nbytes)   # finite, non-zero in every float dtype
        yout = drv.malloc(max(1, o.nbytes))
        temps = [drv.malloc(t) for t in plan.temps]
        bufs = {"i": [xin], "o": [yout], "t": temps}
        steps = [(s, tuple(bufs[r.kind][r.index] + r.offset for r in s.refs)) for s in plan.steps
                 if isinstance(s, Launch)]

        def go():
            for s, ptrs in steps:
                run(s, mods, drv, ptrs)

        ms = b.time_device(go)
        ref = None
        if have_torch:
            t = torch.full(shape, 1.0, device="cuda", dtype=tdt[dtype])
            tms = b.time_torch(lambda: tfn(t))
            ref = nbytes / (tms * 1e-3) / 1e9 if tms else None
            del t
            torch.cuda.empty_cache()
        gbs = nbytes / (ms * 1e-3) / 1e9
        b.row(name, gbs, "GB/s", "copy roofline", b.roofline_gbps)
        if ref:
            b.row(name + " vs torch", gbs, "GB/s", "torch", ref)
        for p in [xin, yout] + temps:
            drv.free(p)

    # end to end through the engine (plan cache hit, launches, stream sync)
    xs = mx.ones((4096, 32768), dtype=mx.bfloat16) + 0
    mx.eval(xs)
    ms = b.time_mlx(lambda a: mx.sum(a, axis=1), xs)
    nb = 4096 * 32768 * ITEMSIZE["bfloat16"] + 4096 * 2
    b.row("sum bf16 4096x32768 (row, mx.eval)", nb / (ms * 1e-3) / 1e9, "GB/s", "copy roofline", b.roofline_gbps)
    print("wrote", b.write(args.out))


if __name__ == "__main__":
    main()
