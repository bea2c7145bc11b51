"""Radix sort planner constants side by side (ops/sort.py: RADIX_MAX_SUBTILES,
RADIX_BLOCKS_PER_CU), device time of the Sort / ArgSort node's plan on a resident 2^24
float32 row (Bench.time_node: planned afresh for each setting), torch.sort in the same run:

    python tools/sort_variants.py [--subtiles 1,2,4,8,16,32] [--per-cu 4,8,16]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import mlx.core as mx  # noqa: E402
from harness import Bench, torch_cuda  # noqa: E402
from mlx_amd.runtime.ops import sort as so  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--subtiles", default="1,2,4,8,16,32")
ap.add_argument("--per-cu", default="4,8,16")
args = ap.parse_args()
b = Bench("sort_variants")
torch = torch_cuda()
x = mx.random.normal((1 << 24,))
mx.eval(x)
if torch is not None:
    t = torch.randn(1 << 24, device="cuda")
    print(f"torch.sort {b.time_torch(lambda: torch.sort(t)):.3f} ms", flush=True)
for subtiles in map(int, args.subtiles.split(",")):
    for per_cu in map(int, args.per_cu.split(",")):
        so.RADIX_MAX_SUBTILES, so.RADIX_BLOCKS_PER_CU = subtiles, per_cu
        ms = b.time_node(so, "Sort", (0,), (x,), [x.shape], ["float32"])
        ma = b.time_node(so, "ArgSort", (0,), (x,), [x.shape], ["uint32"])
        print(f"subtiles<={subtiles:2d} blocks/cu {per_cu:2d}: sort {ms:.3f} ms  argsort {ma:.3f} ms", flush=True)
