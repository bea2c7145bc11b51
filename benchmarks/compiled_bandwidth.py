"""mx.compile's fused elementwise kernels (Compiled nodes, generated at run time) against the
memory roofline, the same kernels element by element (before the vector body), and PyTorch.

    python benchmarks/compiled_bandwidth.py [--out DIR]

Each case is a function mx.compile fuses into one Compiled node (mlx-lm's SwiGLU among them);
its plan runs on resident inputs, timed with device events (Bench.time_node). Bandwidth counts
each input read once and each output written once. Writes <out>/compiled_bandwidth-<gpu>.json.
"""

import argparse
import os
import sys

import mlx.core as mx
import mlx.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Bench, torch_cuda  # noqa: E402

from mlx_amd.runtime import bridge  # noqa: E402
from mlx_amd.runtime.ops import compiled  # noqa: E402

# name, function, input shape, dtype, PyTorch twin (two inputs a, b)
CASES = [
    ("swiglu bf16 512x14336 (llama-8b prefill)", lambda a, b: nn.silu(a) * b, (512, 14336), "bfloat16",
     lambda F, a, b: F.silu(a) * b),
    ("swiglu bf16 8192x14336", lambda a, b: nn.silu(a) * b, (8192, 14336), "bfloat16",
     lambda F, a, b: F.silu(a) * b),
    ("swiglu f32 8192x8192", lambda a, b: nn.silu(a) * b, (8192, 8192), "float32",
     lambda F, a, b: F.silu(a) * b),
    ("gelu_approx f16 2^26", lambda a, b: nn.gelu_approx(a) + b, (1 << 26,), "float16",
     lambda F, a, b: F.gelu(a, approximate="tanh") + b),
    ("a * 0.5 + b bf16 2^27", lambda a, b: a * 0.5 + b, (1 << 27,), "bfloat16",
     lambda F, a, b: a * 0.5 + b),
]


def compiled_node(fn, a, b):
    """(params, input arrays) of the Compiled node mx.compile makes of fn(a, b) (scalar
    constants as scalar arrays of their dtype: their values do not change the timing)."""
    y = mx.compile(fn)(a, b)
    g = bridge.Graph([y])
    _, params, ins, outs = next(n for n in g.nodes if n[0] == "Compiled")
    metas = g.arrays
    arrays, a_used = [], False
    for s in ins:
        shape, dt = tuple(metas[s][0]), metas[s][1]
        if shape == tuple(a.shape) and not a_used:
            arrays.append(a)
            a_used = True
        else:
            arrays.append(b if shape == tuple(b.shape) else mx.array(1.0, dtype=getattr(mx, dt)))
    out = [(metas[o][0], metas[o][1]) for o in outs]
    g.release()
    return params, arrays, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    bench = Bench("compiled_bandwidth")
    torch = torch_cuda()
    for name, fn, shape, dtype, tfn in CASES:
        dt = getattr(mx, dtype)
        a, b = mx.random.normal(shape).astype(dt), mx.random.normal(shape).astype(dt)
        mx.eval(a, b)
        params, ins, outs = compiled_node(fn, a, b)
        moved = sum(x.nbytes for x in ins) + sum(a.itemsize * a.size for _ in outs)   # outputs: a's dtype and size
        times = {}
        for vector in (True, False):
            compiled.VECTOR = vector
            times[vector] = bench.time_node(compiled, "Compiled", params, ins,
                                            [o[0] for o in outs], [o[1] for o in outs])
        compiled.VECTOR = True
        gbps = moved / (times[True] * 1e-3) / 1e9
        bench.row(name, gbps, "GB/s", "copy roofline", bench.roofline_gbps)
        bench.row(f"{name} vs element by element", gbps, "GB/s",
                  "the same fused kernel one element a thread (compiled.VECTOR=False)",
                  moved / (times[False] * 1e-3) / 1e9)
        if torch is not None:
            ta = torch.randn(shape, device="cuda").to(getattr(torch, dtype))
            tb = torch.randn(shape, device="cuda").to(getattr(torch, dtype))
            ms = bench.time_torch(lambda: tfn(torch.nn.functional, ta, tb))
            if ms:
                bench.row(f"{name} vs PyTorch (eager)", gbps, "GB/s", "PyTorch eager, same op",
                          moved / (ms * 1e-3) / 1e9)
            del ta, tb
    print("wrote", bench.write(args.out))


if __name__ == "__main__":
    main()
