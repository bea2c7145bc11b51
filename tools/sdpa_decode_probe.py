"""SDPA decode (one query row, bfloat16, a K/V slice of a longer cache as mlx-lm reads it): the
node's kernel time (Bench.time_node, device events) at short and long contexts, one line a shape.
For A/Bs of kernel builds in one run (MLX_AMD_KERNEL_DIR per process) and for ncu
(--kernel-name regex:sdpa_decode_d128; SHAPE=i runs shape i only):

    TAG=new python tools/sdpa_decode_probe.py
    MLX_AMD_KERNEL_DIR=/tmp/kold TAG=old python tools/sdpa_decode_probe.py
"""
import math
import os
import sys

import mlx.core as mx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
from harness import Bench  # noqa: E402

from mlx_amd.runtime.ops import sdpa  # noqa: E402

# (Hq, Hkv, D, keys): llama-8b and -1b heads at mlx-lm's benchmark contexts (a 512-token prompt
# and its decode), a Qwen2-7B-like GQA group of 7, and long contexts
SHAPES = ((32, 8, 128, 128), (32, 8, 128, 640), (32, 8, 128, 1100), (32, 8, 64, 640),
          (32, 8, 128, 4096), (28, 4, 128, 2048), (32, 8, 128, 32768))

b = Bench("sdpa_decode_probe")
tag, only = os.environ.get("TAG", ""), os.environ.get("SHAPE")
for i, (hq, hkv, d, lk) in enumerate(SHAPES):
    if only is not None and i != int(only):
        continue
    q = mx.random.normal((1, 1, hq, d), key=mx.random.key(0)).astype(mx.bfloat16).transpose(0, 2, 1, 3)
    k = mx.random.normal((1, hkv, lk + 256, d), key=mx.random.key(1)).astype(mx.bfloat16)[:, :, :lk]
    v = mx.random.normal((1, hkv, lk + 256, d), key=mx.random.key(2)).astype(mx.bfloat16)[:, :, :lk]
    ms = b.time_node(sdpa, "mlx_amd::SDPA", (1.0 / math.sqrt(d), "", False), (q, k, v), [(1, hq, 1, d)],
                     ["bfloat16"])
    gbs = 2 * hkv * lk * d * 2 / (ms * 1e-3) / 1e9
    print(f"{tag} H{hq}/{hkv} d{d} L{lk}: {ms * 1e3:8.2f} us, {gbs / b.roofline_gbps:.3f} of the copy roofline",
          flush=True)
