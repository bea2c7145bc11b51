"""Scan (cumsum, cumprod, cummax, cummin, logcumsumexp) on the GPU, end to end through
the evaluator, against plain MLX: every dtype MLX accepts x op, inclusive/exclusive x
forward/reverse, the row kernel (wave rows, block rows, split long rows), the column
kernel, strided/transposed/broadcast/reversed inputs, NaN/inf, integer wrap-around,
empty arrays and length-1 axes; at both wave widths.

Data makes every partial result exact in any order (telescoping sums and products of
powers of two, integers that wrap): differences from MLX are kernel bugs, not rounding.
16-bit logcumsumexp (float64 logcumsumexp runs MLX's sequential order: its float exp would
otherwise differ at 1e-7) and long 16-bit sums are compared with MLX's float32 result rounded
to the dtype: MLX 0.32.4's CPU accumulates those in 16 bits and stalls (ops/scan.py)."""

import zlib

import mlx.core as mx
import numpy as np
import pytest

from oracle import check_accuracy, check_gpu

pytestmark = pytest.mark.gpu

INTS = ["uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
FNS = {"sum": mx.cumsum, "prod": mx.cumprod, "max": mx.cummax, "min": mx.cummin, "logaddexp": mx.logcumsumexp}
CASES = ([(op, d) for op in ("sum", "prod", "max", "min") for d in ["bool"] + INTS + FLOATS]
         + [("logaddexp", d) for d in FLOATS])
FLAGS = [(False, True), (False, False), (True, True), (True, False)]   # (reverse, inclusive)
PRIMS = ("Scan",)
INF, NAN = float("inf"), float("nan")


def arr(a, dtype):
    if dtype == "bool":
        return mx.array(np.asarray(a).astype(np.bool_))
    if dtype in FLOATS:
        a = np.asarray(a, dtype=np.float64 if dtype == "float64" else np.float32)
        return mx.array(a, dtype=getattr(mx, dtype))
    return mx.array(np.asarray(a).astype(getattr(np, dtype)))


def data(op, dtype, shape, axis, seed=0):
    """Values whose scan along `axis` is exact in any grouping and either direction."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return arr(rng.random(shape) < (0.9 if op in ("prod", "min") else 0.3), dtype)
    if dtype in INTS:
        info = np.iinfo(getattr(np, dtype))
        if op == "prod":                    # wraps, exact in any order
            a = rng.integers(-3 if info.min else 0, 4, shape)
        else:
            a = rng.integers(info.min, info.max, shape, dtype=getattr(np, dtype), endpoint=True)
        return arr(a, dtype)
    if op in ("sum", "prod"):
        # telescoping: every partial sum/product (from either end) is d[j] - d[i] or 2^(e[j]-e[i])
        d = rng.integers(-8, 9, shape).astype(np.float64)
        step = np.diff(d, axis=axis, prepend=np.take(d, [0], axis=axis) * 0)
        if op == "sum":
            return arr(step, dtype)
        sign = np.where(rng.random(shape) < 0.2, -1.0, 1.0)
        return arr(sign * np.exp2(_tele_exp(rng, shape, axis)), dtype)
    a = rng.standard_normal(shape) * 3
    return arr(a, dtype)


def _tele_exp(rng, shape, axis):
    e = rng.integers(-3, 4, shape).astype(np.float64)
    return np.diff(e, axis=axis, prepend=np.take(e, [0], axis=axis) * 0)


def scans(op, axis):
    fn = FNS[op]
    return lambda x: [fn(x, axis=axis, reverse=r, inclusive=i) for r, i in FLAGS]


def in_float32(op, axis):
    """The scan computed in float32 and rounded to the input's dtype: the reference for
    16-bit inputs, where MLX's CPU accumulates in 16 bits (sums stall; NaN handling of its
    16-bit max/min differs from its own float32 one) and we accumulate in float32."""
    fn = FNS[op]
    return lambda v: [fn(v.astype(mx.float32), axis=axis, reverse=r, inclusive=i).astype(v.dtype)
                      for r, i in FLAGS]


def np_logcumsumexp(a, axis, reverse, inclusive):
    """float64 truth of logcumsumexp (numpy), every flag combination."""
    a = np.flip(a, axis) if reverse else a
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.logaddexp.accumulate(a, axis=axis)
    if not inclusive:
        pad = np.full_like(np.take(out, [0], axis=axis), -np.inf)
        out = np.concatenate([pad, np.delete(out, -1, axis=axis)], axis=axis)
    return np.flip(out, axis) if reverse else out


def run_case(op, dtype, x, axis, what, sixteen_bit_ref=False):
    """MLX's result is the reference, except: 16-bit logaddexp (and, with sixteen_bit_ref,
    any 16-bit op) against the float32 scan rounded; float32 logaddexp over long rows against
    the float64 truth, at least as accurately as MLX's sequential scan."""
    if dtype in ("float16", "bfloat16") and (op == "logaddexp" or sixteen_bit_ref):
        check_gpu(scans(op, axis), x, prims=PRIMS, what=what, ref_fn=in_float32(op, axis))
    elif op == "logaddexp" and dtype == "float32" and x.shape[axis] > 10000:
        check_accuracy(scans(op, axis), x, prims=PRIMS, what=what,
                       truth=lambda a: [np_logcumsumexp(a, axis, r, i) for r, i in FLAGS])
    else:
        check_gpu(scans(op, axis), x, prims=PRIMS, what=what)


@pytest.mark.parametrize("shape,axis", [((5, 37), 1), ((3, 1000), 1), ((37, 6), 0), ((2, 9, 40), 1)],
                         ids=["wave-rows", "block-rows", "columns", "columns-3d"])
@pytest.mark.parametrize("op,dtype", CASES)
def test_ops_dtypes(gpu_runtime, wave, op, dtype, shape, axis):
    x = data(op, dtype, shape, axis, seed=zlib.crc32(f'{op}{dtype}'.encode()) % 1000)
    run_case(op, dtype, x, axis, f"{op} {dtype} {shape} axis {axis}")


@pytest.mark.parametrize("op", ["sum", "max", "logaddexp"])
def test_layouts(gpu_runtime, wave, op):
    x = data(op, "float32", (12, 70), 1, seed=4)
    views = {
        "transposed": mx.transpose(x),                       # axis 1 strided, axis 0 dense
        "sliced": x[1:, 3:-2],
        "reversed": x[::-1, ::-2],
        "broadcast": mx.broadcast_to(x[:1], (5, 70)),
        "broadcast_axis": mx.broadcast_to(x[:, :1], (12, 9)),
        "batched": mx.reshape(x, (3, 4, 70)).transpose(1, 0, 2),
        "misaligned": x.reshape(-1)[1: 1 + 11 * 70].reshape(11, 70),
    }
    for name, v in views.items():
        for axis in range(v.ndim):
            run_case(op, "float32", v, axis, f"{op} {name} axis {axis}")


@pytest.mark.parametrize("dtype,shape", [("float32", (2, 100000)), ("int32", (1, 300001)), ("float64", (3, 70000)),
                                         ("uint8", (1, 200000)), ("int64", (2, 90001)),
                                         pytest.param("float32", (1, 1 << 22), marks=pytest.mark.large),
                                         ("bfloat16", (5, 123457)), ("float32", (64, 9000)), ("int32", (40, 5000)),
                                         ("float64", (16, 5000)), ("bfloat16", (33, 20000))])
@pytest.mark.parametrize("single_pass,many_rows", [(True, True), (True, False), (False, False)],
                         ids=["lookback-all", "lookback-few", "two-pass"])
def test_long_rows_split(gpu_runtime, wave, dtype, shape, single_pass, many_rows, monkeypatch):
    """Rows longer than a tile: one pass with decoupled look-back (hundreds of chunks per
    row waiting on each other; many rows of a few chunks each) against the two-pass variant
    (few long rows) and a block per row (many rows)."""
    from mlx_amd.runtime.ops import scan as sc

    monkeypatch.setattr(sc, "SINGLE_PASS", single_pass)
    monkeypatch.setattr(sc, "LOOKBACK_MANY_ROWS", many_rows)
    ev = gpu_runtime.evaluator
    ev.plans.clear()
    ev.drop_programs()      # nor a recorded program of the other variant replays here
    try:
        for op in ("sum", "max", "min") if dtype != "float64" else ("sum", "max", "logaddexp"):
            x = data(op, dtype, shape, 1, seed=7)
            run_case(op, dtype, x, 1, f"{op} {dtype} {shape}", sixteen_bit_ref=dtype == "bfloat16")
        if dtype == "float32" and shape[1] > 1000000:
            x = data("logaddexp", dtype, shape, 1, seed=8)
            run_case("logaddexp", dtype, x, 1, f"logaddexp {dtype} {shape}")
    finally:
        ev.plans.clear()   # no plan of the patched variant outlives the test
        ev.drop_programs()


def test_sixteen_bit_accumulates_in_float(gpu_runtime):
    """Long 16-bit sums: float accumulation (MLX's CPU stalls at 2048 / 256)."""
    for dtype in ("float16", "bfloat16"):
        x = mx.ones((3, 5000), dtype=getattr(mx, dtype))
        check_gpu(scans("sum", 1), x, prims=PRIMS, what=dtype, ref_fn=in_float32("sum", 1))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("n", [9, 700, 100000])
def test_special_values(gpu_runtime, wave, dtype, n):
    rng = np.random.default_rng(n)
    d = rng.integers(-4, 5, (6, n)).astype(np.float64)
    a = np.diff(d, axis=1, prepend=0.0)   # partial sums stay small: exact in 16 bits too
    a[0, n // 3] = NAN                 # NaN sticks from there on
    a[1, 0] = NAN                      # at the start (inclusive) / end (reverse)
    a[2, n // 2] = INF
    a[3, n // 2] = -INF
    a[4, :] = -INF
    a[5, n // 4] = INF
    a[5, n // 2] = -INF                # inf + -inf = NaN for sums
    x = arr(a, dtype)
    for op in ("max", "min", "sum", "logaddexp"):
        run_case(op, dtype, x, 1, f"{op} {dtype} n={n}", sixteen_bit_ref=True)


def test_integer_wrap(gpu_runtime, wave):
    for dtype in INTS:
        info = np.iinfo(getattr(np, dtype))
        x = arr(np.full((2, 300), info.max), dtype)
        check_gpu(scans("sum", 1), x, prims=PRIMS, what=dtype)
        check_gpu(scans("prod", 1), arr(np.full((2, 70), 3), dtype), prims=PRIMS, what=dtype)
    check_gpu(scans("sum", 1), arr(np.ones((2, 5000)), "bool"), prims=PRIMS, what="bool sum")


def test_empty_and_trivial(gpu_runtime, wave):
    for shape, axis in [((0, 5), 1), ((4, 0), 1), ((4, 0), 0), ((1, 7), 0), ((7, 1), 1), ((7,), 0)]:
        x = mx.ones(shape)
        check_gpu(scans("sum", axis), x)
    check_gpu(scans("max", 0), arr(np.arange(7.0), "float32"), prims=PRIMS)
