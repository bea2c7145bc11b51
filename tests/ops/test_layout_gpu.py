"""Layout family on the GPU against MLX's CPU: Select (mx.where), Concatenate, Pad and
Arange over dtypes (bool, integers, float16/bfloat16/float32/float64, complex64),
contiguous / transposed / broadcast / sliced / reversed inputs, NaN and -0.0 moved
bit for bit, 0-d and empty arrays (the empty ones check results only: an empty node may
legitimately never reach a kernel).

    pytest -m gpu tests/ops/test_layout_gpu.py
"""


import mlx.core as mx
import numpy as np
import pytest

from oracle import check_gpu

pytestmark = pytest.mark.gpu

DTYPES = ("bool_", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
          "float16", "bfloat16", "float32", "float64", "complex64")
FLOATS = ("float16", "bfloat16", "float32", "float64")


def arr(shape, dtype, seed=0):
    """Small integers in every dtype; floats get NaN, inf and -0.0 mixed in."""
    rng = np.random.default_rng(seed)
    v = rng.integers(-50, 50, size=shape)
    if dtype == "bool_":
        return mx.array(v > 0)
    if dtype.startswith("uint"):
        v = np.abs(v)
    if dtype == "complex64":
        im = rng.integers(-9, 9, size=shape).astype(np.float32)
        return mx.array(v.astype(np.float32)) + 1j * mx.array(im)
    if dtype in FLOATS:
        f = v.astype(np.float64) / 4
        flat = f.reshape(-1)
        for k, s in zip(range(0, flat.size, 7), (np.nan, -0.0, np.inf, -np.inf)):
            flat[k] = s
        return mx.array(f.astype(np.float32)).astype(getattr(mx, dtype)) if dtype != "float64" \
            else mx.array(f).astype(mx.float64)
    return mx.array(v).astype(getattr(mx, dtype))


def layouts(x):
    """The same-shape views of a 2-d array ``x`` of shape (R, C), R and C >= 4, by name."""
    R, C = x.shape
    yield "contiguous", x
    yield "transposed", mx.transpose(arr((C, R), _name(x.dtype), 5))
    yield "broadcast", mx.broadcast_to(x[:1], x.shape)
    yield "sliced", arr((R + 3, 2 * C + 1), _name(x.dtype), 6)[2:R + 2, 1::2]
    yield "reversed", x[::-1, ::-1]


def _name(dt):
    return "bool_" if dt == mx.bool_ else str(dt).split(".")[-1]


# ------------------------------------------------------------------ Select
@pytest.mark.parametrize("dtype", DTYPES)
def test_where_layouts(gpu_runtime, dtype):
    shape = (12, 9)
    a, b = arr(shape, dtype, 1), arr(shape, dtype, 2)
    cond = mx.array(np.random.default_rng(3).integers(0, 2, size=shape) > 0)
    for (an, av), (bn, bv) in zip(layouts(a), list(layouts(b))[::-1]):
        check_gpu(lambda c, x, y: mx.where(c, x, y), cond, av, bv, prims=("Select",), what=f"{dtype} {an} {bn}")
    check_gpu(lambda c, x, y: mx.where(c, x, y), mx.transpose(cond.reshape(9, 12)), a, b,
              prims=("Select",), what=f"{dtype} transposed cond")


@pytest.mark.parametrize("dtype", ("float32", "int64", "bool_", "float16", "complex64"))
def test_where_broadcasting(gpu_runtime, dtype):
    a = arr((5, 1, 7), dtype, 1)
    b = arr((1, 6, 1), dtype, 2)
    cond = mx.array(np.random.default_rng(4).integers(0, 2, size=(6, 7)) > 0)
    check_gpu(lambda c, x, y: mx.where(c, x, y), cond, a, b, prims=("Select",), what=dtype)
    # a Python scalar operand (MLX broadcasts and casts it before the primitive)
    check_gpu(lambda c, x: mx.where(c, x, 0), cond, arr((6, 7), dtype, 3), prims=("Select",), what=dtype)
    check_gpu(lambda c, x: mx.where(c, 1, x), cond[:, :1], arr((6, 7), dtype, 3), prims=("Select",), what=dtype)


def test_where_promotes_and_0d_and_large(gpu_runtime):
    cond = mx.array(np.random.default_rng(5).integers(0, 2, size=(33, 65)) > 0)
    check_gpu(lambda c, x, y: mx.where(c, x, y), cond, arr((33, 65), "int8", 1), arr((33, 65), "float16", 2),
              prims=("Select",))
    check_gpu(lambda c, x, y: mx.where(c, x, y), mx.array(True), mx.array(2.5), mx.array(-1.0), prims=("Select",))
    check_gpu(lambda c, x, y: mx.where(c, x, y), mx.array(False), mx.array(7), mx.array(-3), prims=("Select",))
    big = (1 << 20) + 17   # several grid-stride passes
    c = mx.array(np.random.default_rng(6).integers(0, 2, size=(big,)) > 0)
    check_gpu(lambda c, x, y: mx.where(c, x, y), c, mx.arange(big).astype(mx.float32), mx.array(-1.0),
              prims=("Select",))


def test_where_empty(gpu_runtime):
    check_gpu(lambda c, x, y: mx.where(c, x, y), mx.zeros((0, 3), mx.bool_), mx.zeros((0, 3)), mx.ones((0, 3)))


# ------------------------------------------------------------------ Concatenate
@pytest.mark.parametrize("dtype", DTYPES)
def test_concatenate_axes_and_layouts(gpu_runtime, dtype):
    base = arr((8, 6), dtype, 1)
    views = [v for _, v in layouts(base)]
    for axis in (0, 1, -1):
        check_gpu(lambda *xs, axis=axis: mx.concatenate(xs, axis=axis), *views, prims=("Concatenate",),
                  what=f"{dtype} axis {axis}")
    # uneven parts along each axis of a 3-d array
    parts = [arr((2, 3, 4), dtype, 7), mx.transpose(arr((1, 3, 2), dtype, 8), (2, 1, 0)), arr((2, 3, 4), dtype, 9)]
    check_gpu(lambda *xs: mx.concatenate(xs, axis=2), *parts, prims=("Concatenate",), what=f"{dtype} 3d")
    parts0 = [arr((3, 3, 4), dtype, 10)[::-1], mx.broadcast_to(arr((1, 3, 4), dtype, 11), (2, 3, 4))]
    check_gpu(lambda *xs: mx.concatenate(xs, axis=0), *parts0, prims=("Concatenate",), what=f"{dtype} 3d axis 0")
    parts1 = [arr((2, 5, 4), dtype, 12)[:, 1:, :], arr((2, 1, 4), dtype, 13)]
    check_gpu(lambda *xs: mx.concatenate(xs, axis=1), *parts1, prims=("Concatenate",), what=f"{dtype} 3d axis 1")


def test_concatenate_leading_unit_dims_and_many_inputs(gpu_runtime):
    xs = [arr((1, k + 1, 5), "float32", k) for k in range(9)]
    check_gpu(lambda *xs: mx.concatenate(xs, axis=1), *xs, prims=("Concatenate",))
    check_gpu(lambda *xs: mx.concatenate(xs, axis=0), *[arr((k + 1, 3), "bfloat16", k) for k in range(5)],
              prims=("Concatenate",))
    # a large slab: several grid-stride passes, transposed input
    a, b = mx.transpose(arr((700, 600), "float32", 1)), arr((600, 300), "float32", 2)
    check_gpu(lambda a, b: mx.concatenate([a, b], axis=1), a, b, prims=("Concatenate",))


def test_concatenate_empty_parts(gpu_runtime):
    a, e, b = arr((3, 4), "int32", 1), mx.zeros((3, 0), mx.int32), arr((3, 2), "int32", 2)
    check_gpu(lambda a, e, b: mx.concatenate([a, e, b], axis=1), a, e, b, prims=("Concatenate",))
    check_gpu(lambda e: mx.concatenate([e, e], axis=0), mx.zeros((0, 4)))


# ------------------------------------------------------------------ Pad
@pytest.mark.parametrize("dtype", DTYPES)
def test_pad_layouts(gpu_runtime, dtype):
    base = arr((7, 5), dtype, 1)
    value = {"bool_": True, "complex64": 3.0}.get(dtype, 2)
    for name, v in layouts(base):
        check_gpu(lambda x: mx.pad(x, ((1, 2), (3, 0)), constant_values=value), v, prims=("Pad",),
                  what=f"{dtype} {name}")
    check_gpu(lambda x: mx.pad(x, 2), base, prims=("Pad",), what=f"{dtype} all sides")
    check_gpu(lambda x: mx.pad(x, ((0, 0), (0, 4))), base, prims=("Pad",), what=f"{dtype} right only")


def test_pad_nd_and_special_values(gpu_runtime):
    x = mx.transpose(arr((4, 3, 5), "float32", 2), (1, 2, 0))
    check_gpu(lambda x: mx.pad(x, ((1, 1), (0, 2), (3, 1)), constant_values=float("nan")), x, prims=("Pad",))
    check_gpu(lambda x: mx.pad(x, ((2, 0), (0, 0), (0, 1)), constant_values=-0.0), x, prims=("Pad",))
    check_gpu(lambda x: mx.pad(x, ((5, 5),), constant_values=-7), arr((6,), "int16", 3), prims=("Pad",))
    check_gpu(lambda x: mx.pad(x, ((300, 200), (100, 400))), arr((500, 300), "bfloat16", 4), prims=("Pad",))


def test_pad_empty_input(gpu_runtime):
    check_gpu(lambda x: mx.pad(x, ((1, 1), (2, 2)), constant_values=4), mx.zeros((0, 3)), prims=("Pad",))


# ------------------------------------------------------------------ Arange
ARANGE = [(0, 10, 1), (5, -7, -2), (0, 5, 0.5), (-3.25, 4, 0.75), (1000, 1010, 1), (0, 256, 1), (0, 2048, 1)]
ARANGE_DTYPES = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64") + FLOATS


def _representable(start, stop, step, dtype):
    vals = np.arange(start, stop, step, dtype=np.float64)
    if dtype.startswith("uint") and (vals < 0).any():
        return False
    if dtype in ("int8", "uint8") and (np.abs(vals) > 127).any():
        return False
    if dtype in FLOATS and not np.all(vals == np.round(vals * 4) / 4):
        return False
    bits = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 52}.get(dtype)
    return bits is None or np.abs(vals * 4).max(initial=0) < 2 ** bits


@pytest.mark.parametrize("dtype", ARANGE_DTYPES)
def test_arange_exact(gpu_runtime, dtype):
    ran = 0
    for start, stop, step in ARANGE:
        if not _representable(start, stop, step, dtype):
            continue
        ran += 1
        check_gpu(lambda: mx.arange(start, stop, step, dtype=getattr(mx, dtype)), prims=("Arange",),
                  what=f"{dtype} {start} {stop} {step}")
    assert ran >= 2
    # inexact float ranges (and anything else) must still be right: MLX's CPU computes them
    check_gpu(lambda: mx.arange(0, 1, 0.1, dtype=getattr(mx, dtype)) if dtype in FLOATS
              else mx.arange(0, 9, 3, dtype=getattr(mx, dtype)))


def test_arange_wraps_integers_and_large(gpu_runtime):
    check_gpu(lambda: mx.arange(0, 300, 1, dtype=mx.uint8), prims=("Arange",))
    check_gpu(lambda: mx.arange(100, 400, 1, dtype=mx.int8), prims=("Arange",))
    check_gpu(lambda: mx.arange(0, 1 << 22, dtype=mx.int32), prims=("Arange",))
    check_gpu(lambda: mx.arange(-(1 << 23), 1 << 23, 3, dtype=mx.float32), prims=("Arange",))
    check_gpu(lambda: mx.arange(10, 0, dtype=mx.int32))   # empty
