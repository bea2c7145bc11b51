"""FFT bandwidth: MLX's FFT primitive through our plan (hipFFT / cuFFT plus our copies and
scaling) in GB/s of the bytes that must move (input once, output once), against the
device copy roofline and against torch.fft on the same shape in the same run.

    python benchmarks/fft_bench.py [--out benchmarks/results]

Rows named like ``fft c64 2^20``: the plan alone on resident buffers (device events), and
for a few cases ``(mx.eval, end to end)`` through the evaluator. The family is
VERIFIED = False until the GPU suite has run it: this script enables it for itself.
Writes <out>/fft_bench-h200.json.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

os.environ.setdefault("MLX_AMD_UNVERIFIED", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mlx.core as mx  # noqa: E402

from harness import Bench, torch_cuda  # noqa: E402

from mlx_amd.runtime.ops import fft as fft_family  # noqa: E402

# name, MLX function, input shape, input dtype, (axes, inverse, real), output shape, end to end
CASES = [
    ("fft c64 2^20", mx.fft.fft, (1 << 20,), "complex64", ((0,), False, False), (1 << 20,), True),
    ("fft c64 2^24", mx.fft.fft, (1 << 24,), "complex64", ((0,), False, False), (1 << 24,), False),
    ("fft c64 4096x1024 (batched rows)", mx.fft.fft, (4096, 1024), "complex64", ((1,), False, False),
     (4096, 1024), True),
    ("ifft c64 4096x1024 (batched rows)", mx.fft.ifft, (4096, 1024), "complex64", ((1,), True, False),
     (4096, 1024), False),
    ("fft c64 1024x4096 (axis 0)", lambda a: mx.fft.fft(a, axis=0), (1024, 4096), "complex64",
     ((0,), False, False), (1024, 4096), False),
    ("fft2 c64 4096x4096", mx.fft.fft2, (4096, 4096), "complex64", ((0, 1), False, False), (4096, 4096), True),
    ("rfft f32 2^22", mx.fft.rfft, (1 << 22,), "float32", ((0,), False, True), ((1 << 21) + 1,), False),
    ("irfft c64 2^22", mx.fft.irfft, ((1 << 21) + 1,), "complex64", ((0,), True, True), (1 << 22,), False),
    ("fft c64 1000x1000 (non power of two)", mx.fft.fft, (1000, 1000), "complex64", ((1,), False, False),
     (1000, 1000), False),
]

ITEM = {"complex64": 8, "float32": 4}


def make(shape, dtype):
    x = mx.random.normal(shape, key=mx.random.key(0))
    if dtype == "complex64":
        x = x + 1j * mx.random.normal(shape, key=mx.random.key(1))
    mx.eval(x)
    return x


def torch_case(name, shape, dtype, fn_params):
    torch = torch_cuda()
    if torch is None:
        return None
    (axes, inverse, real) = fn_params
    t = torch.randn(shape, device="cuda", dtype=torch.float32)
    if dtype == "complex64":
        t = torch.complex(t, torch.randn(shape, device="cuda", dtype=torch.float32))
    dims = tuple(axes)
    if real and inverse:
        n = 2 * (shape[dims[-1]] - 1)
        return lambda: torch.fft.irfftn(t, s=(n,), dim=dims)
    if real:
        return lambda: torch.fft.rfftn(t, dim=dims)
    f = torch.fft.ifftn if inverse else torch.fft.fftn
    return lambda: f(t, dim=dims)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args(argv)
    b = Bench("fft_bench")
    for name, fn, shape, dtype, params, oshape, e2e in CASES:
        x = make(shape, dtype)
        odt = "float32" if params[1] and params[2] else "complex64"
        nbytes = math.prod(shape) * ITEM[dtype] + math.prod(oshape) * ITEM[odt]
        ms = b.time_node(fft_family, "FFT", params + (False,), (x,), [oshape], [odt])
        gbps = nbytes / (ms * 1e-3) / 1e9
        b.row(name, gbps, "GB/s", "copy roofline", b.roofline_gbps)
        tf = torch_case(name, shape, dtype, params)
        tms = b.time_torch(tf) if tf is not None else None
        b.row(f"{name} (vs torch.fft)", gbps, "GB/s", "torch.fft", nbytes / (tms * 1e-3) / 1e9 if tms else None)
        if e2e:
            ems = b.time_mlx(fn, x)
            b.row(f"{name} (mx.eval, end to end)", nbytes / (ems * 1e-3) / 1e9, "GB/s", "copy roofline",
                  b.roofline_gbps)
        del x
    print(b.write(args.out))


if __name__ == "__main__":
    main()
