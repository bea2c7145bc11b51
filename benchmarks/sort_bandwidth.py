"""Sort family against PyTorch (CUB's radix sort behind torch.sort) in one run.

    python benchmarks/sort_bandwidth.py [--out DIR]

Each row is the median wall time of mx.eval(op(x)) under mlx-amd with x resident on the
device (inputs evaluated first), against the same op in PyTorch timed with CUDA events;
ratio = torch ms / ours (> 1: faster than PyTorch). A GB/s row per case counts the bytes
that must move (input once, output once) against the device copy roofline. Writes
sort_bandwidth-h200.json.
"""

import argparse
import os
import sys

import mlx.core as mx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Bench  # noqa: E402

CASES = [
    # name, shape, mlx dtype, torch dtype name, fn, out itemsize
    ("sort f32 2^24 (one row)", (1 << 24,), "float32", lambda a: mx.sort(a), 4, "sort"),
    ("argsort f32 2^24", (1 << 24,), "float32", lambda a: mx.argsort(a), 4, "argsort"),
    ("sort bf16 4096x1024 (rows)", (4096, 1024), "bfloat16", lambda a: mx.sort(a, axis=-1), 2, "sort"),
    ("argpartition f32 4096x4096 kth 100", (4096, 4096), "float32",
     lambda a: mx.argpartition(a, 100, axis=-1), 4, "topk"),
]


def torch_fn(kind, t):
    import torch
    if kind == "sort":
        return lambda: torch.sort(t, dim=-1)
    if kind == "argsort":
        return lambda: torch.argsort(t, dim=-1)
    return lambda: torch.topk(t, 101, dim=-1, largest=False, sorted=False)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = p.parse_args()
    b = Bench("sort_bandwidth")
    rng = np.random.default_rng(0)
    for name, shape, dt, fn, out_size, kind in CASES:
        host = rng.standard_normal(shape).astype(np.float32)
        x = mx.array(host).astype(getattr(mx, dt))
        ms = b.time_mlx(fn, x)
        ref = None
        try:
            import torch
            if torch.cuda.is_available():
                t = torch.from_numpy(host).cuda().to(getattr(torch, dt))
                ref = b.time_torch(torch_fn(kind, t))
        except ImportError:
            pass
        n = int(np.prod(shape))
        nbytes = n * (x.itemsize + out_size)
        b.row(name, ms, "ms", "torch." + kind, ref, higher_is_better=False)
        b.row(name + " GB/s", nbytes / (ms * 1e-3) / 1e9, "GB/s", "copy roofline", b.roofline_gbps)
    print("wrote", b.write(args.out))


if __name__ == "__main__":
    main()
