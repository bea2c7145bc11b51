"""Convolution throughput: ResNet-50 convolution shapes (NHWC, batch 32) in TFLOP/s of
the direct convolution's 2*N*Ho*Wo*Cout*Kh*Kw*Cin flops, ours (the node's plan timed on the
device: for bf16 the implicit GEMM on the matrix unit, conv_mma, where the planner takes it,
else im2col + vendor GEMM as for float32) against torch.nn.functional.conv2d (cuDNN,
channels_last) in the same run; ratio = ours / torch. bf16 rows add each path forced: im2col +
GEMM (conv.MMA_MAX_COG = 0), conv_mma (whatever C_out), and with --tiles each conv_mma
position tile, against the same cuDNN time.

    python benchmarks/conv_bench.py [--out benchmarks/results] [--tiles]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mlx.core as mx  # noqa: E402

from harness import Bench, torch_cuda  # noqa: E402

from mlx_amd.runtime.ops import conv  # noqa: E402

N = 32
# (name, H=W, C_in, C_out, kernel, stride, pad)
SHAPES = [
    ("56x56 64->64 3x3", 56, 64, 64, 3, 1, 1),
    ("28x28 128->128 3x3", 28, 128, 128, 3, 1, 1),
    ("14x14 256->256 3x3", 14, 256, 256, 3, 1, 1),
    ("7x7 512->512 3x3", 7, 512, 512, 3, 1, 1),
    ("56x56 64->256 1x1", 56, 64, 256, 1, 1, 0),
    ("56x56 128->128 3x3 s2", 56, 128, 128, 3, 2, 1),
]
DTYPES = [("bf16", mx.bfloat16, "bfloat16"), ("f32", mx.float32, "float32")]


def torch_conv(tname, h, cin, cout, k, s, p):
    torch = torch_cuda()
    if torch is None:
        return None
    torch.backends.cudnn.allow_tf32 = False      # true fp32, like ours
    torch.backends.cudnn.benchmark = True
    dt = getattr(torch, tname)
    x = torch.randn(N, cin, h, h, device="cuda", dtype=dt).to(memory_format=torch.channels_last)
    w = torch.randn(cout, cin, k, k, device="cuda", dtype=dt).to(memory_format=torch.channels_last)
    return lambda: torch.nn.functional.conv2d(x, w, stride=s, padding=p)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--tiles", action="store_true", help="also time each conv_mma position tile")
    args = ap.parse_args(argv)
    b = Bench("conv_bench")
    for short, dt, tname in DTYPES:
        for name, h, cin, cout, k, s, p in SHAPES:
            x = mx.random.normal((N, h, h, cin), key=mx.random.key(0)).astype(dt)
            w = mx.random.normal((cout, k, k, cin), key=mx.random.key(1)).astype(dt)
            ho = (h + 2 * p - k) // s + 1
            flops = 2.0 * N * ho * ho * cout * k * k * cin
            params = ((s, s), (p, p), (p, p), (1, 1), (1, 1), 1, False)
            node = lambda: b.time_node(conv, "Convolution", params, (x, w), [(N, ho, ho, cout)], [tname])
            # each variant: planner constants of the conv family, restored after
            variants = [("", {})]
            if tname != "float32":
                variants += [(" im2col+gemm", {"MMA_MAX_COG": 0}), (" conv_mma", {"MMA_MAX_COG": 1 << 30})]
                if args.tiles:
                    variants += [(f" conv_mma m{bm}", {"MMA_BM": bm, "MMA_MAX_COG": 1 << 30})
                                 for bm in conv.kt.table("conv").MMA_BM]
            times = {}
            for tag, consts in variants:
                saved = {c: getattr(conv, c) for c in consts}
                for c, v in consts.items():
                    setattr(conv, c, v)
                try:
                    times[tag] = node()
                finally:
                    for c, v in saved.items():
                        setattr(conv, c, v)
            fn = torch_conv(tname, h, cin, cout, k, s, p)
            ref = None
            if fn is not None:
                tms = b.time_torch(fn)
                ref = flops / (tms * 1e-3) / 1e12 if tms else None
            for tag, kms in times.items():
                b.row(f"conv2d {short} N{N} {name}{tag}", flops / (kms * 1e-3) / 1e12, "TFLOP/s",
                      "torch conv2d (cuDNN, channels_last)", ref)
            del x, w, fn
    print(b.write(args.out))


if __name__ == "__main__":
    main()
