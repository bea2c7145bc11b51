"""Hadamard on the GPU.

float32 matches MLX's CPU bit for bit (the same float32 operations in the same order:
see runtime/ops/hadamard.py). MLX's CPU rounds float16/bfloat16 to the 16-bit type after
every butterfly stage; ours rounds once, so those are checked against a float32
reference by plain MLX from the upcast input, rounded to the dtype (tolerances: the
output rounding; values are O(1) with the default 1/sqrt(n) scale).
"""

import mlx.core as mx
import pytest

from oracle import check_gpu

pytestmark = pytest.mark.gpu

F32 = mx.float32
DT = {"f32": mx.float32, "f16": mx.float16, "bf16": mx.bfloat16}
TOL = {mx.float16: (4e-3, 4e-3), mx.bfloat16: (2e-2, 2e-2)}
PRIMS = ("Hadamard",)


def rnd(shape, dtype, seed):
    mx.random.seed(seed)
    x = mx.random.normal(shape).astype(dtype)
    mx.eval(x)
    return x


def had(scale=None):
    return lambda x: mx.hadamard_transform(x, scale=scale)


def check(x, scale=None, what="", fn=None, prims=PRIMS):
    fn = fn or had(scale)
    if x.dtype == F32:
        check_gpu(fn, x, prims=prims, rtol=0, atol=0, what=what)
    else:
        rt, at = TOL[x.dtype]
        check_gpu(fn, x, prims=prims, ref_fn=lambda v: fn(v.astype(F32)).astype(v.dtype),
                  rtol=rt, atol=at, what=what)


# one pass (<= 4096), several passes (the rest), every m
SIZES = [1, 2, 16, 256, 4096, 8192, 1 << 15, 12, 48, 12 << 8, 12 << 10, 20, 80, 20 << 8, 20 << 10,
         28, 112, 28 << 7, 28 << 10]


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("n", SIZES)
def test_hadamard_sizes(gpu_runtime, dt, n):
    rows = max(1, 4096 // n) if n < 4096 else 2
    # n = 1: MLX builds no node at all (the transform of one element with scale 1 is itself)
    check(rnd((rows, n), DT[dt], n), what=f"{dt} n={n}", prims=PRIMS if n > 1 else ())


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_hadamard_scale_and_batch(gpu_runtime, dt):
    check(rnd((2, 3, 5, 64), DT[dt], 1), scale=1.0, what="scale 1")
    check(rnd((3, 28 * 16), DT[dt], 2), scale=0.37, what="scale 0.37, m = 28")


@pytest.mark.parametrize("n", [64, 20 << 9])
def test_hadamard_layouts(gpu_runtime, n):
    x = rnd((6, n), F32, 3)
    check(x, fn=lambda v: mx.hadamard_transform(v.T.T[::-1]), what="negative row stride")
    check(x, fn=lambda v: mx.hadamard_transform(v[1::2]), what="sliced rows")
    check(x, fn=lambda v: mx.hadamard_transform(mx.broadcast_to(v[:1], (3, 6, n))), what="broadcast")
    y = rnd((n, 5), F32, 4)
    check(y, fn=lambda v: mx.hadamard_transform(v.T), what="transposed: strided last axis")


def test_hadamard_special_values(gpu_runtime):
    x = mx.array([[1.0, float("nan"), 2.0, 3.0], [float("inf"), 1.0, -0.0, 0.0],
                  [float("inf"), float("-inf"), 1.0, 1.0]])
    check(x, what="nan/inf")
