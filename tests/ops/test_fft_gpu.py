"""FFT on the GPU through hipFFT / cuFFT against MLX's CPU (pocketfft): mx.fft.fft/ifft/
rfft/irfft/fft2/ifft2/rfft2/irfft2/fftn/ifftn/rfftn/irfftn with n / s / axes, power-of-two, composite and prime
sizes, float32 and complex64 inputs, transposed, sliced, broadcast and reversed inputs,
more than three axes, non-Hermitian input to the inverse real transforms, empty batches.

Two correct float32 FFTs differ by rounding that grows with log n and with the size of
the values: each comparison takes an absolute tolerance of 5e-6 * log2(n) times the
largest magnitude of the reference (n: the transform's element count), no relative one.

    pytest -m gpu tests/ops/test_fft_gpu.py
"""

import math

import mlx.core as mx
import numpy as np
import pytest

from oracle import check_gpu, plain_mlx

pytestmark = [pytest.mark.gpu, pytest.mark.vendor]

P = ("FFT",)
F = mx.fft


def rnd(shape, complex_=False, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(shape).astype(np.float32)
    if complex_:
        v = v + 1j * rng.standard_normal(shape).astype(np.float32)
        return mx.array(v.astype(np.complex64))
    return mx.array(v)


def check(fn, *args, n, what=""):
    with plain_mlx():
        ref = fn(*args)
        mx.eval(ref)
        big = float(np.abs(np.array(ref)).max()) if ref.size else 1.0
    atol = 5e-6 * max(1.0, math.log2(max(n, 2))) * max(big, 1e-30)
    check_gpu(fn, *args, prims=P, rtol=0, atol=atol, what=what)


SIZES = [1, 2, 7, 12, 16, 97, 100, 1000, 1024, 4096, 3 * 5 * 7 * 11, 1 << 16]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", ["fft", "ifft"])
def test_c2c_sizes(gpu_runtime, op, n):
    rows = max(1, 8192 // n)
    x = rnd((rows, n), True, n)
    check(getattr(F, op), x, n=n, what=f"{op} ({rows}, {n})")


@pytest.mark.parametrize("n", SIZES[1:])
@pytest.mark.parametrize("op", ["rfft", "irfft"])
def test_real_sizes(gpu_runtime, op, n):
    rows = max(1, 8192 // n)
    if op == "rfft":
        check(F.rfft, rnd((rows, n), False, n), n=n, what=f"rfft ({rows}, {n})")
    else:
        # random (non-Hermitian) spectra: MLX reads only the real parts of bins 0 and n/2
        x = rnd((rows, n // 2 + 1), True, n)
        check(lambda v: F.irfft(v, n=n), x, n=n, what=f"irfft n={n}")


@pytest.mark.parametrize("op", ["fft", "ifft"])
def test_c2c_from_float32(gpu_runtime, op):
    check(getattr(F, op), rnd((6, 40), False, 1), n=40, what=f"{op} of float32")


@pytest.mark.parametrize("n", [5, 8, 13, 20, 31, 64])
def test_n_argument_pads_and_truncates(gpu_runtime, n):
    x = rnd((3, 20), False, 2)
    xc = rnd((3, 20), True, 3)
    check(lambda v: F.fft(v, n=n), xc, n=n, what=f"fft n={n}")
    check(lambda v: F.ifft(v, n=n), xc, n=n, what=f"ifft n={n}")
    check(lambda v: F.rfft(v, n=n), x, n=n, what=f"rfft n={n}")
    check(lambda v: F.irfft(v, n=n), xc, n=n, what=f"irfft n={n}")
    check(lambda v: F.irfft(v, n=n, axis=0), xc.T, n=n, what=f"irfft n={n} axis 0")


@pytest.mark.parametrize("axis", [0, 1, -1, 2, -3])
def test_axis(gpu_runtime, axis):
    xc = rnd((6, 10, 9), True, 4)
    x = rnd((6, 10, 9), False, 5)
    n = (6, 10, 9)[axis]
    check(lambda v: F.fft(v, axis=axis), xc, n=n, what=f"fft axis {axis}")
    check(lambda v: F.ifft(v, axis=axis), xc, n=n, what=f"ifft axis {axis}")
    check(lambda v: F.rfft(v, axis=axis), x, n=n, what=f"rfft axis {axis}")
    check(lambda v: F.irfft(v, axis=axis), xc, n=n, what=f"irfft axis {axis}")


ND = [
    # (shape, s, axes)
    ((8, 12), None, None),
    ((6, 10, 9), None, None),
    ((6, 10, 9), None, (0, 2)),
    ((6, 10, 9), None, (2, 0)),
    ((6, 10, 9), (4, 16), (1, 2)),
    ((6, 10, 9), (7, 5, 11), (0, 1, 2)),
    ((3, 4, 5, 6), None, None),                  # four axes: two library stages
    ((2, 3, 4, 5, 3), None, None),
    ((5, 1, 7), None, None),                     # a length-1 axis
    ((4, 6, 8), None, (-1, -2)),
]


@pytest.mark.parametrize("shape,s,axes", ND)
def test_nd(gpu_runtime, shape, s, axes):
    xc = rnd(shape, True, 6)
    x = rnd(shape, False, 7)
    ax = axes if axes is not None else tuple(range(len(shape)))
    sizes = s if s is not None else tuple(shape[a] for a in ax)
    n = math.prod(sizes)
    for name, v in (("fftn", xc), ("ifftn", xc), ("rfftn", x), ("irfftn", xc)):
        fn = getattr(F, name)
        check(lambda a: fn(a, s=s, axes=axes), v, n=n, what=f"{name} {shape} s={s} axes={axes}")


def test_2d_helpers(gpu_runtime):
    xc = rnd((4, 12, 10), True, 8)
    x = rnd((4, 12, 10), False, 9)
    check(F.fft2, xc, n=120, what="fft2")
    check(F.ifft2, xc, n=120, what="ifft2")
    check(F.rfft2, x, n=120, what="rfft2")
    check(F.irfft2, xc, n=12 * 18, what="irfft2")
    check(lambda v: F.fft2(v, s=(5, 20), axes=(0, 2)), xc, n=100, what="fft2 s axes")
    check(lambda v: F.irfft2(v, s=(12, 11)), xc, n=132, what="irfft2 odd s")


LAYOUTS = {
    "T": lambda v: v.T,
    "swap": lambda v: mx.swapaxes(v, 0, 1),
    "slice": lambda v: v[1:, ::2],
    "reverse": lambda v: v[::-1],
    "bcast": lambda v: mx.broadcast_to(v[:1], v.shape),
}


@pytest.mark.parametrize("lay", list(LAYOUTS))
def test_layouts(gpu_runtime, lay):
    f = LAYOUTS[lay]
    xc = rnd((16, 24, 3), True, 10)
    x = rnd((16, 24, 3), False, 11)
    check(lambda v: F.fft(f(v), axis=0), xc, n=24, what=f"{lay} fft axis 0")
    check(lambda v: F.fft(f(v)), xc, n=16, what=f"{lay} fft")
    check(lambda v: F.fftn(f(v)), xc, n=16 * 24 * 3, what=f"{lay} fftn")
    check(lambda v: F.rfft(f(v)), x, n=16, what=f"{lay} rfft")
    check(lambda v: F.rfftn(f(v), axes=(0, 1)), x, n=16 * 24, what=f"{lay} rfftn")
    check(lambda v: F.irfft(f(v)), xc, n=30, what=f"{lay} irfft")
    check(lambda v: F.irfftn(f(v), axes=(0, 1)), xc, n=24 * 2 * 12, what=f"{lay} irfftn")


def test_offset_input_is_read_correctly(gpu_runtime):
    # element 0 at an odd float offset: the library step stages it to an aligned copy
    x = rnd((4097,), False, 12)
    check(lambda v: F.rfft(v[1:]), x, n=4096, what="rfft of x[1:]")
    xc = rnd((8, 65), True, 13)
    check(lambda v: F.fft(v.reshape(-1)[3:3 + 512]), xc, n=512, what="fft of a flat slice")


def test_inverse_real_leaves_its_input_alone(gpu_runtime):
    xc = rnd((32, 33), True, 14)
    mx.eval(xc)
    before = np.array(xc)
    check(lambda v: F.irfft(v), xc, n=64, what="irfft")
    check(lambda v: F.irfftn(v), xc, n=32 * 64, what="irfftn")
    np.testing.assert_array_equal(np.array(xc), before)


def test_roundtrip_and_chain(gpu_runtime):
    x = rnd((4, 250), False, 15)
    check(lambda v: F.irfft(F.rfft(v), n=250), x, n=250, what="irfft(rfft)")
    check(lambda v: F.ifft(F.fft(v) * 2.0).real, x, n=250, what="ifft(2 fft)")


def test_large(gpu_runtime):
    check(F.fft, rnd((1 << 20,), True, 16), n=1 << 20, what="fft 2^20")
    check(F.rfft, rnd((3, 1 << 18), False, 17), n=1 << 18, what="rfft 3 x 2^18")


def test_empty_batch(gpu_runtime):
    check(F.fft, mx.zeros((0, 8), dtype=mx.complex64), n=8, what="fft of (0, 8)")
    check(F.rfft, mx.zeros((0, 8)), n=8, what="rfft of (0, 8)")


def test_edge_values(gpu_runtime):
    # zeros (signed) and constants: exact bins and exact zeros elsewhere up to rounding
    x = mx.array(np.array([[0.0] * 16, [1.0] * 16, [-0.0] * 16], np.float32))
    check(F.rfft, x, n=16, what="zeros and constants")
    check(F.fft, x.astype(mx.complex64), n=16, what="complex constants")
