"""Reduce planner knobs side by side (ops/reduce.py: ROW_BLOCK, COL_SPLIT_BELOW, FEW_LONG_ROWS): device
time of the Reduce node's plan on resident inputs (Bench.time_node: planned afresh for each
setting), as GB/s of the input and output bytes and as a share of the copy roofline measured
in the same run:

    python tools/reduce_variants.py [--row-block 128,256,512] [--col-split 1,0.5,0.25,0]
                                    [--few-rows 0,16]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import mlx.core as mx  # noqa: E402
from harness import Bench  # noqa: E402
from mlx_amd.runtime.ops import reduce as rd  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--row-block", default="128,256,512")
ap.add_argument("--col-split", default="1,0.5,0.25,0")
ap.add_argument("--few-rows", default="0,16", help="FEW_LONG_ROWS values (0: every long row takes 512 threads)")
args = ap.parse_args()
b = Bench("reduce_variants")
print(f"copy roofline {b.roofline_gbps:.1f} GB/s", flush=True)

ROW = [("sum bf16 4096x32768 (row)", mx.bfloat16, (4096, 32768), (1,)),
       ("sum f32 4096x32768 (row)", mx.float32, (4096, 32768), (1,)),
       ("sum bf16 32768x4096 (row)", mx.bfloat16, (32768, 4096), (1,))]
LONG = [("sum f32 2^28 (one row)", mx.float32, (1 << 28,), (0,)),
        ("sum bf16 2^28 (one row)", mx.bfloat16, (1 << 28,), (0,)),
        ("sum f32 8x2^24 (rows)", mx.float32, (8, 1 << 24), (1,)),
        ("sum bf16 16x2^22 (rows)", mx.bfloat16, (16, 1 << 22), (1,)),
        ("sum f32 64x2^20 (rows)", mx.float32, (64, 1 << 20), (1,)),
        ("sum f32 512x2^17 (rows)", mx.float32, (512, 1 << 17), (1,))]
COL = [("sum f32 (256,256,256) axis 1 (strided)", mx.float32, (256, 256, 256), (1,)),
       ("sum f32 (64,1024,1024) axis 1 (strided)", mx.float32, (64, 1024, 1024), (1,)),
       ("sum bf16 (256,512,256) axis 1 (strided)", mx.bfloat16, (256, 512, 256), (1,)),
       ("sum f32 32768x4096 (col)", mx.float32, (32768, 4096), (0,))]


def case(name, dt, shape, axes, label):
    x = mx.ones(shape, dtype=dt) + 0
    mx.eval(x)
    oshape = [1 if i in axes else d for i, d in enumerate(shape)]
    ms = b.time_node(rd, "Reduce", (2, axes), (x,), [oshape], [str(dt).split(".")[-1]])
    nbytes = x.nbytes + x.nbytes // shape[axes[0]]
    gbs = nbytes / (ms * 1e-3) / 1e9
    print(f"{name:42s} {label:22s} {ms * 1e3:9.2f} us {gbs:8.1f} GB/s {gbs / b.roofline_gbps:.3f} roof", flush=True)


defaults = rd.ROW_BLOCK, rd.COL_SPLIT_BELOW, rd.FEW_LONG_ROWS
for rb in map(int, args.row_block.split(",")):
    rd.ROW_BLOCK = rb
    for c in ROW:
        case(*c, f"ROW_BLOCK={rb}")
rd.ROW_BLOCK = defaults[0]
for cs in map(float, args.col_split.split(",")):
    rd.COL_SPLIT_BELOW = cs
    for c in COL:
        case(*c, f"COL_SPLIT_BELOW={cs}")
rd.COL_SPLIT_BELOW = defaults[1]
for fr in map(int, args.few_rows.split(",")):
    rd.FEW_LONG_ROWS = fr
    for c in LONG:
        case(*c, f"FEW_LONG_ROWS={fr}")
rd.FEW_LONG_ROWS = defaults[2]
