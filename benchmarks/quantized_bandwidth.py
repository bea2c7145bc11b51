"""Quantized matmuls against the memory roofline (decode) and dense GEMM (prefill).

    python benchmarks/quantized_bandwidth.py [--out DIR]

Decode rows (qmv, gather_qmm): the node's plan on resident inputs timed with device
events (Bench.time_node), in GB/s of the bytes that must move (packed weights, scales and
biases once; x and the output are negligible and counted too), against the device copy
roofline, plus the time of PyTorch's dense bf16 x @ W.T of the same shape (16-bit
weights: what quantization saves). 4-bit affine rows of 2-8 rows of 16-bit x run on the
matrix-unit qmv where the device has it (mma.sync here); each is also timed through the
portable qmv (MLX_AMD_MATRIX_UNITS=0) in the same run; one row of 16-bit x against 2/4/8-bit
affine w runs on qmv_h2 (packed half math), each also timed on qmv's float path
(QMV_HALF2=False) in the same run. Prefill rows (dequantize + GEMM at M=512): TFLOP/s
(2 M N K) against PyTorch's dense bf16 matmul. quantize: GB/s of the float weights read
and the packed outputs written. Writes <out>/quantized_bandwidth-h200.json.
"""

import argparse
import math
import os
import sys

import mlx.core as mx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Bench  # noqa: E402

from mlx_amd.runtime.ops import quantized as Q  # noqa: E402

MODES = {"affine": 0, "mxfp4": 1, "mxfp8": 2, "nvfp4": 3}
DT = {"bf16": mx.bfloat16, "f16": mx.float16}

# name, M, N, K, bits, group, mode, dtype
DECODE = [
    ("qmv 4-bit g64 14336x4096 bf16", 1, 14336, 4096, 4, 64, "affine", "bf16"),
    ("qmv 4-bit g64 4096x14336 bf16", 1, 4096, 14336, 4, 64, "affine", "bf16"),
    ("qmv 8-bit g64 14336x4096 bf16", 1, 14336, 4096, 8, 64, "affine", "bf16"),
    ("qmv 4-bit g128 14336x4096 f16", 1, 14336, 4096, 4, 128, "affine", "f16"),
    ("qmv 3-bit g64 14336x4096 bf16", 1, 14336, 4096, 3, 64, "affine", "bf16"),
    ("qmv mxfp4 14336x4096 bf16", 1, 14336, 4096, 4, 32, "mxfp4", "bf16"),
    ("qmv 4-bit g64 14336x4096 bf16 M=4", 4, 14336, 4096, 4, 64, "affine", "bf16"),
    ("qmv 4-bit g64 4096x4096 bf16 (8b q/o)", 1, 4096, 4096, 4, 64, "affine", "bf16"),
    ("qmv 4-bit g64 1024x4096 bf16 (8b k/v)", 1, 1024, 4096, 4, 64, "affine", "bf16"),
    ("qmv 4-bit g64 128256x4096 bf16 (8b head)", 1, 128256, 4096, 4, 64, "affine", "bf16"),
    ("qmv 4-bit g64 8192x2048 bf16 (1b gate/up)", 1, 8192, 2048, 4, 64, "affine", "bf16"),
    ("qmv 4-bit g64 2048x8192 bf16 (1b down)", 1, 2048, 8192, 4, 64, "affine", "bf16"),
]
PREFILL = [("dequant+gemm 4-bit g64 512x14336x4096 bf16", 512, 14336, 4096, 4, 64, "affine", "bf16")]


def weights(shape, gs, bits, mode, dt):
    w = (mx.random.normal(shape) * 0.02).astype(DT[dt])
    q = mx.quantize(w, group_size=gs, bits=bits, mode=mode)
    mx.eval(*q)
    del w
    return q


def nbytes(*arrays):
    return sum(a.nbytes for a in arrays)


def torch_dense(M, N, K):
    """ms of PyTorch's bf16 x @ W.T, or None without torch/CUDA."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
    except Exception:
        return None
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    return lambda: x @ w.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    b = Bench("quantized_bandwidth")
    for name, M, N, K, bits, gs, mode, dt in DECODE + PREFILL:
        q = weights((N, K), gs, bits, mode, dt)
        x = mx.random.normal((M, K)).astype(DT[dt])
        mx.eval(x)
        ms = b.time_node(Q, "QuantizedMatmul", (gs, bits, MODES[mode], True), (x,) + tuple(q), [(M, N)],
                         [str(x.dtype).split(".")[-1]])
        tf = torch_dense(M, N, K)
        tms = b.time_torch(tf) if tf is not None else None
        if M <= Q.QMV_MAX_M:
            moved = nbytes(x, *q) + M * N * x.itemsize
            b.row(name, moved / (ms * 1e-3) / 1e9, "GB/s", "copy roofline", b.roofline_gbps)
            if M >= 2 and bits == 4 and mode == "affine" and K % 256 == 0:
                os.environ["MLX_AMD_MATRIX_UNITS"] = "0"
                try:
                    pms = b.time_node(Q, "QuantizedMatmul", (gs, bits, MODES[mode], True), (x,) + tuple(q), [(M, N)],
                                      [str(x.dtype).split(".")[-1]])
                finally:
                    del os.environ["MLX_AMD_MATRIX_UNITS"]
                b.row(name + " portable qmv", moved / (pms * 1e-3) / 1e9, "GB/s", "copy roofline", b.roofline_gbps)
                b.row(name + " time vs portable qmv", ms * 1e3, "us", "portable qmv", pms * 1e3,
                      higher_is_better=False)
            if M == 1 and mode == "affine" and bits in (2, 4, 8):
                # 16-bit x, 2/4/8-bit w: the row above is qmv_h2; qmv's float path for reference
                Q.QMV_HALF2 = False
                try:
                    fms = b.time_node(Q, "QuantizedMatmul", (gs, bits, MODES[mode], True), (x,) + tuple(q), [(M, N)],
                                      [str(x.dtype).split(".")[-1]])
                finally:
                    Q.QMV_HALF2 = True
                b.row(name + " float qmv", moved / (fms * 1e-3) / 1e9, "GB/s", "copy roofline", b.roofline_gbps)
                b.row(name + " time vs float qmv", ms * 1e3, "us", "float qmv (QMV_HALF2=False)", fms * 1e3,
                      higher_is_better=False)
            if tms is not None:
                b.row(name + " time vs PyTorch dense bf16", ms * 1e3, "us", "PyTorch dense bf16", tms * 1e3,
                      higher_is_better=False)
        else:
            flops = 2.0 * M * N * K
            ref = flops / (tms * 1e-3) / 1e12 if tms is not None else float("nan")
            b.row(name, flops / (ms * 1e-3) / 1e12, "TFLOP/s", "PyTorch dense bf16", ref)
        del q, x

    # mixture of experts decode (SwitchGLU: one token, top-2 of 8 experts)
    E, N, K, k = 8, 2048, 4096, 2
    wq, sc, bi = weights((E, N, K), 64, 4, "affine", "bf16")
    x = mx.random.normal((1, 1, 1, K)).astype(mx.bfloat16)
    idx = mx.array([[1, 6]], dtype=mx.uint32)
    lhs = mx.zeros((1, k), dtype=mx.uint32)
    mx.eval(x, idx, lhs)
    ms = b.time_node(Q, "GatherQMM", (64, 4, 0, True, False, False), (x, wq, sc, bi, lhs, idx), [(1, k, 1, N)],
                     ["bfloat16"])
    moved = k * (nbytes(wq, sc, bi) // E)
    b.row("gather_qmm 4-bit g64 top-2 of 8x(2048x4096) bf16", moved / (ms * 1e-3) / 1e9, "GB/s", "copy roofline",
          b.roofline_gbps)
    del wq, sc, bi

    # quantize (weight conversion)
    w = mx.random.normal((14336, 4096)).astype(mx.bfloat16)
    mx.eval(w)
    outs = [(14336, 4096 * 4 // 32), (14336, 4096 // 64), (14336, 4096 // 64)]
    ms = b.time_node(Q, "fast::Quantize", (None, 64, 4, 0, False), (w,), outs, ["uint32", "bfloat16", "bfloat16"])
    moved = w.nbytes + math.prod(outs[0]) * 4 + 2 * math.prod(outs[1]) * 2
    b.row("quantize 4-bit g64 14336x4096 bf16", moved / (ms * 1e-3) / 1e9, "GB/s", "copy roofline", b.roofline_gbps)
    print("wrote", b.write(args.out))


if __name__ == "__main__":
    main()
