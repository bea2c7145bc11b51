"""Reduce and ArgReduce on the GPU, end to end through the evaluator, against plain MLX:
every dtype x op, each layout class (all, row, column, strided/transposed/broadcast/
sliced/negative strides, split and unsplit), edge values (NaN, -0.0, inf, integer
wrap, ties), empty reductions, and one > 2^31-element reduction; at both wave widths.

Data is chosen so results are exact in every summation order (small integers, powers
of two for products): differences from MLX are kernel bugs, not rounding."""

import zlib

import mlx.core as mx
import numpy as np
import pytest

from oracle import check_gpu

pytestmark = pytest.mark.gpu

DTYPES = ["bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
          "float16", "bfloat16", "float32", "float64", "complex64"]
FLOATS = ("float16", "bfloat16", "float32", "float64")
REDUCE = {"sum": mx.sum, "prod": mx.prod, "min": mx.min, "max": mx.max, "and": mx.all, "or": mx.any}
PRIMS = ("Reduce",)


def _mx(a: np.ndarray, dtype: str) -> mx.array:
    if dtype == "bfloat16":
        return mx.array(a.astype(np.float32)).astype(mx.bfloat16)
    return mx.array(a.astype(getattr(np, dtype) if dtype != "bool" else np.bool_))


def data(dtype, shape, op, seed=0, specials=True):
    """Values whose reduction is exact in any order; NaN/-0.0/inf sprinkled into floats."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtype == "bool":
        p = 0.999 if op == "and" else (0.001 if op == "or" else 0.5)
        return _mx((rng.random(n) < p).reshape(shape), dtype)
    if dtype == "complex64":
        if op == "prod":
            vals = np.array([1, -1, 1j, -1j, 2, 0.5], dtype=np.complex64)
            a = vals[rng.integers(0, len(vals), n)]
        else:
            a = (rng.integers(-3, 4, n) + 1j * rng.integers(-3, 4, n)).astype(np.complex64)
            if op in ("and", "or"):
                a[rng.random(n) < 0.5] = 0
        return _mx(a.reshape(shape), dtype)
    if dtype in FLOATS:
        if op == "prod":
            a = rng.choice(np.array([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0]), n)
        else:
            a = rng.integers(-8, 9, n).astype(np.float64)
        if specials and op in ("min", "max") and n > 8:
            a[rng.integers(0, n, max(1, n // 500))] = np.inf if op == "min" else -np.inf
        if specials and op in ("and", "or") and n > 8:
            a[rng.random(n) < 0.3] = 0.0
            a[rng.integers(0, n, 3)] = -0.0
            a[rng.integers(0, n, 2)] = np.nan
        return _mx(a.reshape(shape), dtype)
    info = np.iinfo(getattr(np, dtype))
    if op == "prod":
        lo, hi = (0, 4) if info.min == 0 else (-3, 4)
    elif op in ("and", "or"):
        lo, hi = 0, 3
    else:
        lo, hi = int(info.min), int(info.max) + 1
    a = rng.integers(lo, hi, n, dtype=np.int64 if dtype != "uint64" else np.uint64)
    if op == "and":
        a[a == 0] = 1
        a[rng.integers(0, n, max(1, n // 3000))] = 0
    return _mx(a.reshape(shape).astype(getattr(np, dtype)), dtype)


# ------------------------------------------------------------------ dtype x op x layout class
SHAPES = [
    ("all", (1 << 17,), None),          # two-pass all-reduce
    ("row", (33, 257), 1),              # wave per row
    ("row_long", (3, 70000), 1),        # block per row, split
    ("col", (257, 33), 0),              # column kernel
    ("col_tall", (20000, 5), 0),        # column kernel, split
    ("strided", (9, 31, 17), (0, 2)),   # reduced outer dims
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(REDUCE))
def test_reduce_dtypes(gpu_runtime, wave, op, dtype):
    f = REDUCE[op]
    for name, shape, axis in SHAPES:
        if op == "prod" and name in ("all", "row_long", "col_tall"):
            # float partial products of +-2, +-0.5 must stay inside float range in any order
            shape = {"all": (16, 8), "row_long": (64, 33), "col_tall": (300, 5)}[name]
        x = data(dtype, shape, op, seed=zlib.crc32(f"{op}{dtype}{name}".encode()) % 1000)
        check_gpu(lambda a: f(a, axis=axis), x, prims=PRIMS, what=f"{op} {dtype} {name} {shape}")


# ------------------------------------------------------------------ layouts
LAYOUTS = {
    "transposed": lambda a: mx.transpose(a, (2, 0, 1)),
    "sliced": lambda a: a[1:, ::2, 3:],
    "negative": lambda a: a[::-1, :, ::-2],
    "broadcast": lambda a: mx.broadcast_to(a[:, :1, :], a.shape),
    "broadcast_new": lambda a: mx.broadcast_to(a[:, None, 0, :], (a.shape[0], 7, a.shape[2])),
    "swap_inner": lambda a: mx.swapaxes(a, 1, 2),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "uint8"])
def test_reduce_layouts(gpu_runtime, wave, layout, axes, dtype):
    x = data(dtype, (12, 40, 36), "sum", seed=len(layout) + sum(axes))
    v = LAYOUTS[layout]
    check_gpu(lambda a: mx.sum(v(a), axis=axes), x, prims=PRIMS, what=f"sum {layout} {axes}")
    check_gpu(lambda a: mx.max(v(a), axis=axes), x, prims=PRIMS, what=f"max {layout} {axes}")


@pytest.mark.parametrize("shape,axes", [
    ((4096, 1024), (0,)), ((1024, 4096), (1,)), ((64, 64, 64), (1,)), ((128, 3, 512), (0, 2)),
    ((5, 1 << 16), (0, 1)), ((1 << 16, 3), (0,)), ((2, 3, 4, 5, 6, 7), (1, 3, 5)),
])
def test_reduce_shapes_f32(gpu_runtime, wave, shape, axes):
    x = data("float32", shape, "sum", seed=7)
    check_gpu(lambda a: mx.sum(a, axis=axes), x, prims=PRIMS)
    check_gpu(lambda a: mx.min(a, axis=axes), x, prims=PRIMS)


def test_misaligned_rows_and_keepdims(gpu_runtime, wave):
    # rows that start off 16-byte boundaries (odd row length, offset slice)
    x = data("float16", (37, 1001), "sum", seed=3)
    check_gpu(lambda a: mx.sum(a[:, 3:], axis=1, keepdims=True), x, prims=PRIMS)
    check_gpu(lambda a: mx.sum(a[1:, 1:], axis=0), x, prims=PRIMS)


# ------------------------------------------------------------------ edge values
def test_nan_propagates_in_min_max(gpu_runtime, wave):
    for dt in FLOATS:
        a = np.arange(3000, dtype=np.float32).reshape(30, 100) % 17
        a[3, 50] = np.nan
        a[7, 0] = np.nan
        a[12, 99] = -np.inf
        x = _mx(a, dt)
        for f in (mx.max, mx.min):
            for ax in (None, 0, 1):
                check_gpu(lambda t: f(t, axis=ax), x, prims=PRIMS, what=f"{dt} {f.__name__} {ax}")


def test_and_or_float_zero_rules(gpu_runtime, wave):
    # -0.0 is zero, NaN is not; complex: either part nonzero
    x = mx.array([[-0.0, 0.0, 0.0], [np.nan, 0.0, -0.0], [1.0, -0.0, 2.0]], dtype=mx.float32)
    for dt in ("float32", "float16", "bfloat16", "float64"):
        y = x.astype(getattr(mx, dt))
        for f in (mx.all, mx.any):
            for ax in (0, 1, None):
                check_gpu(lambda t: f(t, axis=ax), y, prims=PRIMS)
    c = mx.array([[0j, 1j, complex(-0.0, -0.0)], [complex(np.nan, 0), 0j, 2 + 0j]], dtype=mx.complex64)
    for f in (mx.all, mx.any):
        for ax in (0, 1, None):
            check_gpu(lambda t: f(t, axis=ax), c, prims=PRIMS)


def test_integer_wrap(gpu_runtime, wave):
    cases = [("int32", [2**31 - 1] * 1000), ("uint32", [2**32 - 1] * 1000), ("int8", [127] * 5000),
             ("uint8", [255] * 5000), ("int64", [2**62] * 100), ("uint64", [2**63] * 7),
             ("int16", [-(2**15)] * 9000), ("uint16", [2**16 - 1] * 9000)]
    for dt, vals in cases:
        x = mx.array(np.array(vals, dtype=getattr(np, dt)))
        check_gpu(lambda a: mx.sum(a), x, prims=PRIMS, what=f"sum wrap {dt}")
        check_gpu(lambda a: mx.prod(a[:40]), x, prims=PRIMS, what=f"prod wrap {dt}")


def test_float_sum_extremes(gpu_runtime, wave):
    for dt in ("float32", "float16", "bfloat16"):
        x = _mx(np.array([np.inf, 1.0, -np.inf, 2.0] * 300), dt)           # inf - inf = NaN
        check_gpu(lambda a: mx.sum(a), x, prims=PRIMS)
        y = _mx(np.full(70000, 1.0), dt)                                    # overflows f16, not f32
        check_gpu(lambda a: mx.sum(a), y, prims=PRIMS)
        check_gpu(lambda a: mx.prod(a[:100] * 0 + 300), y, prims=("Reduce",))


def test_empty_reductions_give_identity(gpu_runtime, wave):
    for dt in ("float32", "int8", "uint32", "bool", "complex64", "bfloat16"):
        x = mx.zeros((0, 5), dtype=getattr(mx, dt if dt != "bool" else "bool_"))
        for f in (mx.sum, mx.prod, mx.all, mx.any):
            check_gpu(lambda a: f(a, axis=0), x, prims=PRIMS, what=f"{f.__name__} empty {dt}")
    # empty output: nothing to compute
    x = mx.zeros((0, 5))
    check_gpu(lambda a: mx.sum(a, axis=1), x)


def test_complex_min_max_order_rules(gpu_runtime, wave):
    nan = np.nan
    rows = [[1 + 5j, complex(nan, 0), 2 - 1j], [1 + 5j, complex(0, nan), 2 - 1j],
            [complex(1, nan), 3 + 5j, 0j], [3 + 5j, complex(1, nan), 1j], [1 + 5j, 1 + 7j, 1 + 7j]]
    x = mx.array(np.array(rows, dtype=np.complex64))
    for f in (mx.max, mx.min):
        for ax in (0, 1, None):
            check_gpu(lambda a: f(a, axis=ax), x, prims=PRIMS, what=f.__name__)
    y = data("complex64", (40, 70), "max", seed=5)
    for f in (mx.max, mx.min):
        check_gpu(lambda a: f(mx.transpose(a), axis=(0, 1)), y, prims=PRIMS)
        check_gpu(lambda a: f(a, axis=0), y, prims=PRIMS)


@pytest.mark.large
def test_larger_than_int32_elements(gpu_runtime):
    # MLX's dimensions are 32-bit, so more than 2^31 elements take two dimensions; reducing
    # over all of them or along either one needs 64-bit offsets
    shape = (65539, 32769)
    a = np.zeros(shape, dtype=np.uint8)
    a[-1, -1], a[0, 12345], a[40000, 7] = 5, 1, 3
    x = mx.array(a)
    del a
    assert x.size > 2**31
    check_gpu(lambda t: mx.sum(t), x, prims=PRIMS)
    check_gpu(lambda t: mx.max(t), x, prims=PRIMS)
    check_gpu(lambda t: mx.argmax(t, axis=1), x, prims=("ArgReduce",))
    check_gpu(lambda t: mx.sum(t[:, 1:], axis=0), x, prims=PRIMS)


# ------------------------------------------------------------------ ArgReduce
ARG = {"argmax": mx.argmax, "argmin": mx.argmin}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(ARG))
def test_arg_dtypes(gpu_runtime, wave, op, dtype):
    f = ARG[op]
    for shape, axis in [((33, 257), 1), ((257, 33), 0), ((3, 5000), 1), ((20000,), 0), ((9, 31, 17), 1),
                        ((300, 300), 0)]:
        # few distinct values: ties everywhere, first index must win
        x = data(dtype, shape, "and" if dtype == "bool" else "min", seed=len(shape) + axis, specials=False)
        if dtype not in ("bool", "complex64"):
            x = (x.astype(mx.int32) % 5).astype(x.dtype) if dtype not in FLOATS else mx.round(x / 4)
        check_gpu(lambda a: f(a, axis=axis), x, prims=("ArgReduce",), what=f"{op} {dtype} {shape} {axis}")


@pytest.mark.parametrize("dtype", FLOATS)
def test_arg_nan_and_ties(gpu_runtime, wave, dtype):
    a = np.zeros((6, 300), dtype=np.float32)
    a[0, 7] = np.nan
    a[0, 200] = np.nan
    a[1, :] = np.inf
    a[1, 299] = np.nan
    a[2, 5] = -0.0
    a[3, 100:] = -np.inf
    a[4, ::3] = 2.0
    a[5, 299] = 1.0
    x = _mx(a, dtype)
    for f in ARG.values():
        for ax in (0, 1):
            check_gpu(lambda t: f(t, axis=ax), x, prims=("ArgReduce",))
        check_gpu(lambda t: f(mx.transpose(t), axis=1), x, prims=("ArgReduce",))
        check_gpu(lambda t: f(t), x, prims=("ArgReduce",))


def test_arg_layouts(gpu_runtime, wave):
    x = data("float32", (12, 40, 36), "min", seed=11, specials=False)
    x = mx.round(x / 3)
    for name, v in LAYOUTS.items():
        for ax in (0, 1, 2):
            for f in ARG.values():
                check_gpu(lambda a: f(v(a), axis=ax), x, prims=("ArgReduce",), what=f"{name} {ax}")
    # many outputs over a strided axis: the one-thread-per-output kernel
    y = mx.round(data("float32", (16, 70000), "min", seed=2, specials=False) / 4)
    check_gpu(lambda a: mx.argmax(a, axis=0), y, prims=("ArgReduce",))
    check_gpu(lambda a: mx.argmin(mx.transpose(a), axis=1), y, prims=("ArgReduce",))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_arg_few_long_rows(gpu_runtime, wave, dtype):
    """An LLM's row of logits: one (or a few) long rows, split over many blocks and then
    combined (argsplit + argpairs): the first index of the best value across the parts,
    NaN first, strided and offset rows alike."""
    rng = np.random.default_rng(7)
    n = 128256
    a = rng.standard_normal((3, n)).astype(np.float32)
    a[0, [4000, 90000, 128255]] = 9.0        # ties in different parts: the first wins
    a[1, n - 1] = 9.0                        # in the last, partial part
    a[1, 2047:2049] = -9.0                   # across a part boundary, for argmin
    a[2, 70000] = np.nan                     # NaN beats every number
    a[2, 100000] = np.nan
    x = _mx(a, dtype)
    for f in ARG.values():
        check_gpu(lambda t: f(t[:1], axis=1), x, prims=("ArgReduce",), what="one row")
        check_gpu(lambda t: f(t, axis=1), x, prims=("ArgReduce",), what="three rows")
        check_gpu(lambda t: f(t[:, 3:], axis=1), x, prims=("ArgReduce",), what="offset rows")
        check_gpu(lambda t: f(mx.transpose(t), axis=0), x, prims=("ArgReduce",), what="strided rows")
        check_gpu(lambda t: f(t[0]), x, prims=("ArgReduce",), what="1-d")


def test_complex_arg_order_rules(gpu_runtime, wave):
    nan = np.nan
    rows = [[1 + 5j, complex(1, nan)], [complex(1, nan), 1 + 5j], [complex(1, nan), 3 + 5j],
            [3 + 5j, complex(1, nan)], [3 + 5j, complex(nan, 1)], [1 + 5j, 1 + 5j]]
    x = mx.array(np.array(rows, dtype=np.complex64))
    for f in ARG.values():
        check_gpu(lambda a: f(a, axis=1), x, prims=("ArgReduce",))
        check_gpu(lambda a: f(a, axis=0), x, prims=("ArgReduce",))
