"""Attention (mlx_amd::SDPA): decode in GB/s of the K+V bytes against the device copy
roofline, prefill in TFLOP/s against torch.nn.functional.scaled_dot_product_attention on
the same shapes, in one run; decode also with the FMA kernel forced (the matrix-unit
kernel serves 16-bit caches from 8192 keys).

    python benchmarks/sdpa_bench.py [--out DIR]

The node's plan runs on resident inputs between device events (Bench.time_node: kernels
and library calls, no engine host work). Causal FLOPs count the visible half
(2 * B * Hq * L * L * D), for us and for PyTorch alike. Writes <out>/sdpa_bench-h200.json.
"""

import argparse
import math
import os
import sys

import mlx.core as mx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Bench  # noqa: E402

from mlx_amd.runtime.ops import sdpa  # noqa: E402

B, HQ, HKV, D = 1, 32, 8, 128


def inputs(lq, lk, cache=None, d=D):
    q = mx.random.normal((B, lq, HQ, d), key=mx.random.key(0)).astype(mx.bfloat16).transpose(0, 2, 1, 3)
    n = cache or lk
    k = mx.random.normal((B, HKV, n, d), key=mx.random.key(1)).astype(mx.bfloat16)[:, :, :lk]
    v = mx.random.normal((B, HKV, n, d), key=mx.random.key(2)).astype(mx.bfloat16)[:, :, :lk]
    return q, k, v


def torch_ms(b, lq, lk, causal, d=D):
    try:
        import torch
        import torch.nn.functional as F

        if not torch.cuda.is_available():
            return None
    except Exception:
        return None
    q = torch.randn(B, HQ, lq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, HKV, lk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, HKV, lk, d, device="cuda", dtype=torch.bfloat16)
    try:
        F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)  # noqa: E731
    except TypeError:   # an older torch: repeat the kv heads
        kr, vr = k.repeat_interleave(HQ // HKV, 1), v.repeat_interleave(HQ // HKV, 1)
        fn = lambda: F.scaled_dot_product_attention(q, kr, vr, is_causal=causal)  # noqa: E731
    return b.time_torch(fn)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    b = Bench("sdpa_bench")
    scale = 1.0 / math.sqrt(D)
    for lk in (640, 4096, 32768, 131072):   # 640: mlx-lm's benchmark context (512 prompt + 128)
        q, k, v = inputs(1, lk, cache=lk + 256)       # a KV-cache slice, as mlx-lm reads it
        kv_bytes = 2 * B * HKV * lk * D * 2
        name = f"sdpa decode bf16 B{B} H{HQ}/{HKV} D{D} L{lk}"
        gbps = {}
        for path in ("", "fma"):   # the planner's kernel (matrix unit from 8k keys), the FMA one
            os.environ["MLX_AMD_SDPA_DECODE"] = path
            ms = b.time_node(sdpa, "mlx_amd::SDPA", (scale, "", False), (q, k, v), [(B, HQ, 1, D)], ["bfloat16"])
            gbps[path] = kv_bytes / (ms * 1e-3) / 1e9
        os.environ.pop("MLX_AMD_SDPA_DECODE")
        b.row(name, gbps[""], "GB/s", "copy roofline", b.roofline_gbps)
        b.row(name + " FMA kernel", gbps["fma"], "GB/s", "copy roofline", b.roofline_gbps)
        b.row(name + " vs FMA kernel", gbps[""], "GB/s", "FMA decode kernel (MLX_AMD_SDPA_DECODE=fma)", gbps["fma"])
        tms = torch_ms(b, 1, lk, False)
        if tms:
            b.row(name + " vs PyTorch", gbps[""], "GB/s", "torch SDPA", kv_bytes / (tms * 1e-3) / 1e9)
        del q, k, v
    # llama-1b's head dim 64 and llama-8b's 128 at mlx-lm's 512-token prefill, then longer
    for d, L in ((64, 512), (128, 512), (128, 1024), (128, 4096)):
        q, k, v = inputs(L, L, d=d)
        flops = 2.0 * B * HQ * L * L * d          # the causal half of 4 * B * Hq * L * L * D
        tms = torch_ms(b, L, L, True, d=d)
        ref = flops / (tms * 1e-3) / 1e12 if tms else None
        for path in ("mma", "flash", "gemm"):   # matrix-unit flash, its portable twin, vendor GEMMs
            os.environ["MLX_AMD_SDPA_PREFILL"] = path
            ms = b.time_node(sdpa, "mlx_amd::SDPA", (1.0 / math.sqrt(d), "causal", False), (q, k, v),
                             [(B, HQ, L, d)], ["bfloat16"])
            b.row(f"sdpa prefill bf16 B{B} H{HQ}/{HKV} D{d} L{L} causal ({path})", flops / (ms * 1e-3) / 1e12,
                  "TFLOP/s", "torch SDPA (flash)", ref)
        os.environ.pop("MLX_AMD_SDPA_PREFILL")
        del q, k, v
    print("wrote", b.write(args.out))


if __name__ == "__main__":
    main()
