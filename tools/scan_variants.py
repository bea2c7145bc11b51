"""Scan row-kernel variants side by side (plan constants of ops/scan.py), kernel time of the
Scan node on resident inputs (Bench.time_node), torch.cumsum in the same run:

    python tools/scan_variants.py

GB/s = (input + output bytes) / time, and the share of the device copy. Variants: lbNNN-all /
lbNNN-few: look-back in NNN-thread blocks for every row longer than a tile / for few long rows
only (many rows: a ROW_BLOCK-thread block per row); -rb256: that block is 256 threads (default
512); two-pass: SINGLE_PASS=False."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import mlx.core as mx
from harness import Bench, torch_cuda
from mlx_amd.runtime.ops import scan as sc
b = Bench("scan_probe")
print("copy roofline GB/s", round(b.roofline_gbps))
torch = torch_cuda()
# (SINGLE_PASS, LOOKBACK_BLOCK, LOOKBACK_MANY_ROWS, ROW_BLOCK)
VARIANTS = {"lb256-all": (True, 256, True, 512), "lb512-all": (True, 512, True, 512),
            "lb256-few": (True, 256, False, 512), "lb512-few": (True, 512, False, 512),
            "lb256-few-rb256": (True, 256, False, 256), "two-pass": (False, 256, False, 512)}
SHAPES = [((1 << 26,), "float32", False, True), ((4096, 32768), "float32", False, True),
          ((64, 1 << 20), "float32", False, True), ((1024, 16384), "float32", False, True),
          ((16384, 8704), "float32", False, True), ((4096, 32768), "bfloat16", False, True),
          ((4096, 32768), "float32", True, False), ((4096, 32768), "float64", False, True),
          ((8192, 8192), "float32", False, True)]
for shape, dt, rev, inc in SHAPES:
    x = mx.random.normal(shape).astype(getattr(mx, dt))
    mx.eval(x)
    nbytes = 2 * x.nbytes
    line = f"{str(shape):16s} {dt:8s} rev={int(rev)} inc={int(inc)}:"
    for name, (sp, blk, many, rb) in VARIANTS.items():
        sc.SINGLE_PASS, sc.LOOKBACK_BLOCK, sc.LOOKBACK_MANY_ROWS, sc.ROW_BLOCK = sp, blk, many, rb
        ms = b.time_node(sc, "Scan", (2, len(shape) - 1, rev, inc), (x,), [shape], [dt])
        line += f"  {name} {nbytes / ms / 1e6:6.0f} ({nbytes / ms / 1e6 / b.roofline_gbps:.2f})"
    if torch is not None and dt != "float64":
        t = torch.randn(shape, device="cuda").to(getattr(torch, dt))
        ms = b.time_torch(lambda: torch.cumsum(t, -1))
        line += f"  torch {nbytes / ms / 1e6:6.0f} ({nbytes / ms / 1e6 / b.roofline_gbps:.2f})"
    print(line, flush=True)
