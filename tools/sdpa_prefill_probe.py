"""SDPA prefill (B1, Hq 32, Hkv 8, D 128, causal, bfloat16) through mlx-amd as an MLX program runs
it: ms per call with N calls per evaluation (the host's per-call cost amortised; each call scales q
first, so no two are the same node), the median of REPS. For A/Bs of kernel builds in one run
(MLX_AMD_KERNEL_DIR per process) and for ncu (--kernel-name regex:flash_mma_d128):

    L=4096 N=8 REPS=7 TAG=new python tools/sdpa_prefill_probe.py
"""
import os
import statistics
import time

import mlx.core as mx

import mlx_amd

mlx_amd.enable()
L = int(os.environ.get("L", "4096"))
N = int(os.environ.get("N", "8"))
q = mx.random.normal((1, 32, L, 128)).astype(mx.bfloat16)
k = mx.random.normal((1, 8, L, 128)).astype(mx.bfloat16)
v = mx.random.normal((1, 8, L, 128)).astype(mx.bfloat16)
mx.eval(q, k, v)
ts = []
for i in range(int(os.environ.get("REPS", "7"))):
    t = time.perf_counter()
    outs = [mx.fast.scaled_dot_product_attention(q * (1.0 + j / 1024), k, v, scale=128 ** -0.5, mask="causal")
            for j in range(N)]
    mx.eval(outs)
    ts.append((time.perf_counter() - t) / N * 1e3)
flops = 4 * 32 * L * L * 128 / 2
med = statistics.median(ts[2:]) if len(ts) > 2 else ts[-1]
print(f"{os.environ.get('TAG', '')} L={L}: {med:.3f} ms per call (incl. q scaling), {flops / med / 1e9:.1f} TFLOP/s", flush=True)
