"""Indexing on the GPU against MLX's CPU: Gather, GatherAxis, Scatter (none/sum/prod/max/
min), ScatterAxis (none/sum), SliceUpdate, DynamicSlice, DynamicSliceUpdate, MaskedScatter over dtypes,
index dtypes, strided/broadcast/offset layouts, negative indices, duplicates where the
result is order-independent, donated and copied outputs, 0-d and empty arrays.

    pytest -m gpu tests/ops/test_indexing_gpu.py
"""

import mlx.core as mx
import numpy as np
import pytest

from oracle import check_gpu

pytestmark = pytest.mark.gpu

DTYPES = ("bool_", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
          "float16", "bfloat16", "float32", "float64", "complex64")
IDX = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64")


def arr(shape, dtype, seed=0, lo=-8, hi=8):
    """Small integers (exact in every dtype, so sums are order-independent)."""
    rng = np.random.default_rng(seed)
    v = rng.integers(lo, hi, size=shape)
    dt = getattr(mx, dtype)
    if dtype == "bool_":
        return mx.array(v > 0)
    if dtype.startswith("uint"):
        v = np.abs(v)
    if dtype == "complex64":
        return mx.array(v.astype(np.float32)) + 1j * mx.array(rng.integers(lo, hi, size=shape).astype(np.float32))
    return mx.array(v).astype(dt)


def ids(values, dtype):
    return mx.array(np.array(values)).astype(getattr(mx, dtype))


# ------------------------------------------------------------------ Gather
@pytest.mark.parametrize("dtype", DTYPES)
def test_take_rows(gpu_runtime, dtype):
    src = arr((9, 7), dtype)
    i = ids([0, 8, -1, 3, -9, 3], "int32")
    check_gpu(lambda s, i: mx.take(s, i, axis=0), src, i, prims=("Gather",), what=dtype)
    check_gpu(lambda s, i: mx.take(s, i, axis=1), src, ids([6, -7, 2], "int32"), prims=("Gather",), what=dtype)


@pytest.mark.parametrize("idt", IDX)
def test_take_index_dtypes_strided_source(gpu_runtime, idt):
    src = mx.transpose(arr((6, 5, 4), "float32", 1), (2, 0, 1))   # (4, 6, 5) transposed
    lo = -4 if idt.startswith("int") else 0
    i = ids(np.random.default_rng(2).integers(lo, 4, size=(3, 2)), idt)
    for axis in (0, 1, 2):
        check_gpu(lambda s, i, axis=axis: mx.take(s, i, axis=axis), src, i, prims=("Gather",), what=f"{idt} {axis}")
    check_gpu(lambda s, i: mx.take(s, i), src, i, prims=("Gather",), what=f"{idt} flat")


def test_fancy_indexing_broadcast_indices(gpu_runtime):
    src = arr((8, 6, 5), "int16", 3)
    a, b = ids([[0], [7], [-2]], "int64"), ids([5, 0, -1, 2], "int64")
    check_gpu(lambda s, a, b: s[a, b], src, a, b, prims=("Gather",))
    check_gpu(lambda s, a, b: s[:, a, b[:1]], mx.transpose(src, (1, 0, 2))[:, :, 1:], ids([[0], [5]], "int32"),
              ids([1, 2], "int32"), prims=("Gather",))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "uint8", "float64"])
def test_embedding_rows_vector_and_unaligned(gpu_runtime, dtype):
    table = arr((1000, 264), dtype, 4)
    tok = ids([5, 999, 0, 17, 17, 512], "int32")
    check_gpu(lambda t, i: mx.take(t, i, axis=0), table, tok, prims=("Gather",))
    # sliced tables: an aligned column window, then one whose base is not 16-byte aligned
    check_gpu(lambda t, i: mx.take(t[:, 8:], i, axis=0), table, tok, prims=("Gather",))
    check_gpu(lambda t, i: mx.take(t[:, 3:259], i, axis=0), table, tok, prims=("Gather",))
    check_gpu(lambda t, i: t[i[:, None], mx.arange(0, 264, 2)], table, tok, prims=("Gather",))


def test_take_large_batch(gpu_runtime):
    table = arr((4096, 512), "bfloat16", 5)
    tok = ids(np.random.default_rng(6).integers(-4096, 4096, size=(2, 3000)), "int32")
    check_gpu(lambda t, i: mx.take(t, i, axis=0), table, tok, prims=("Gather",))


def test_gather_zero_d_and_empty(gpu_runtime):
    src = arr((7,), "float32", 7)
    check_gpu(lambda s, i: mx.take(s, i), src, ids(-3, "int32"), prims=("Gather",))
    check_gpu(lambda s, i: mx.take(s, i, axis=0), arr((4, 3), "float32"), ids(np.zeros((0,), int), "int32"))


# ------------------------------------------------------------------ GatherAxis
@pytest.mark.parametrize("dtype", ["bool_", "int8", "uint16", "int32", "bfloat16", "float32", "float64", "complex64"])
def test_take_along_axis(gpu_runtime, dtype):
    src = arr((5, 6, 4), dtype, 8)
    rng = np.random.default_rng(9)
    for axis in (0, 1, 2):
        shp = [5, 6, 4]
        d = shp[axis]
        shp[axis] = 3
        i = ids(rng.integers(-d, d, size=shp), "int32")
        check_gpu(lambda s, i, axis=axis: mx.take_along_axis(s, i, axis=axis), src, i,
                  prims=("GatherAxis",), what=f"{dtype} {axis}")
    # strided source and a broadcast index
    check_gpu(lambda s, i: mx.take_along_axis(mx.transpose(s, (2, 1, 0)), i, axis=1), src,
              ids(rng.integers(0, 6, size=(1, 2, 1)), "uint8"), prims=("GatherAxis",), what=dtype)


@pytest.mark.parametrize("idt", IDX)
def test_take_along_axis_index_dtypes(gpu_runtime, idt):
    src = arr((64, 33), "float32", 10)
    lo = -33 if idt.startswith("int") and idt != "int8" else 0
    i = ids(np.random.default_rng(11).integers(lo, 33, size=(64, 40)), idt)
    check_gpu(lambda s, i: mx.take_along_axis(s, i, axis=1), src, i, prims=("GatherAxis",))


# ------------------------------------------------------------------ Scatter
def _set(a, i, u):
    b = mx.array(a)
    b[i] = u
    return b


OPS = {
    "none": _set,
    "sum": lambda a, i, u: a.at[i].add(u),
    "prod": lambda a, i, u: a.at[i].multiply(u),
    "max": lambda a, i, u: a.at[i].maximum(u),
    "min": lambda a, i, u: a.at[i].minimum(u),
}


@pytest.mark.parametrize("dtype,op", [(d, o) for d in DTYPES for o in OPS
                                      if not (d == "complex64" and o in ("prod", "max", "min"))])
def test_scatter_rows(gpu_runtime, dtype, op):
    dst = arr((7, 5), dtype, 12)
    # duplicates only for reductions (no order dependence with small integers)
    i = ids([1, -1, 4] if op == "none" else [1, -1, 4, 1, 6, 6, 1], "int32")
    lo, hi = (1, 3) if op == "prod" else (-8, 8)
    upd = arr((i.size, 5), dtype, 13, lo, hi)
    check_gpu(OPS[op], dst, i, upd, prims=("Scatter",), what=f"{dtype} {op}")


@pytest.mark.parametrize("dtype", ["float32", "int32", "bfloat16", "float16"])
@pytest.mark.parametrize("op", ["none", "sum"])
def test_scatter_donated_and_strided(gpu_runtime, dtype, op):
    """dst computed on the GPU (ours, donatable) vs a transposed dst (copied first)."""
    dst = arr((6, 16), dtype, 14)
    i = ids([5, 0, -3], "int64")
    upd = arr((3, 16), dtype, 15)
    check_gpu(lambda a, i, u: OPS[op](a + a, i, u), dst, i, upd, prims=("Scatter",))
    check_gpu(lambda a, i, u: OPS[op](mx.transpose(a)[:, :3], i, u[:, :3]), arr((16, 6), dtype, 16), i, upd,
              prims=("Scatter",))
    # updates broadcast from a scalar and from one row
    check_gpu(lambda a, i: OPS[op](a, i, mx.array(2).astype(a.dtype)), dst, i, prims=("Scatter",))
    check_gpu(lambda a, i, u: OPS[op](a, i, u[:1]), dst, i, upd, prims=("Scatter",))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "float16", "bfloat16", "float64", "int64", "uint64",
                                   "complex64", "float32"])
def test_scatter_add_many_duplicates(gpu_runtime, dtype):
    """Atomics: thousands of updates onto a few rows (the CAS loop on 8/16-bit words
    shares each 32-bit word between neighbouring elements)."""
    dst = mx.zeros((4, 3), getattr(mx, dtype))
    i = ids(np.random.default_rng(17).integers(-4, 4, size=(900,)), "int16")
    upd = arr((900, 3), dtype, 18, 0, 2)   # integer sums wrap identically in any order
    check_gpu(lambda a, i, u: a.at[i].add(u), dst, i, upd, prims=("Scatter",))


def test_scatter_multi_axis_and_max_min_nan(gpu_runtime):
    dst = arr((5, 4, 3), "float32", 19)
    a, b = ids([0, 4, 2], "uint32"), ids([3, 0, 3], "uint32")
    check_gpu(lambda d, a, b: d.at[a, b].add(mx.ones((3, 3))), dst, a, b, prims=("Scatter",))
    nan = mx.array(np.array([[np.nan, 1.0, -np.inf]] * 3, np.float32))
    check_gpu(lambda d, a, u: d.at[a].maximum(u[:, None, :]), dst, a, nan, prims=("Scatter",))
    check_gpu(lambda d, a, u: d.at[a].minimum(u[:, None, :]), dst, a, nan, prims=("Scatter",))


# ------------------------------------------------------------------ ScatterAxis
@pytest.mark.parametrize("dtype", ["bool_", "uint8", "int16", "int64", "float16", "float32", "complex64"])
def test_put_along_axis(gpu_runtime, dtype):
    dst = arr((6, 5), dtype, 20)
    rng = np.random.default_rng(21)
    i0 = ids(np.stack([rng.permutation(6)[:3] for _ in range(5)], axis=1) - 6, "int32")   # unique, negative
    i1 = ids(np.stack([rng.permutation(5)[:2] for _ in range(6)], axis=0), "int64")
    check_gpu(lambda d, i, u: mx.put_along_axis(d, i, u, axis=0), dst, i0, arr((3, 5), dtype, 22),
              prims=("ScatterAxis",))
    check_gpu(lambda d, i, u: mx.put_along_axis(d, i, u, axis=1), dst, i1, arr((6, 2), dtype, 23),
              prims=("ScatterAxis",))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_scatter_add_axis_from_vjp(gpu_runtime, dtype):
    x = arr((6, 7), dtype, 24)
    i = ids(np.random.default_rng(25).integers(-7, 7, size=(6, 12)), "int32")   # duplicates
    cot = arr((6, 12), dtype, 26, 0, 3)
    check_gpu(lambda x, i, c: mx.vjp(lambda y: mx.take_along_axis(y, i, axis=1), [x], [c])[1][0], x, i, cot,
              prims=("ScatterAxis",))


# ------------------------------------------------------------------ SliceUpdate
def _assign(key):
    def f(a, u):
        b = mx.array(a)
        b[key] = u
        return b
    return f


@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_update(gpu_runtime, dtype):
    dst = arr((6, 5, 8), dtype, 27)
    check_gpu(_assign((slice(1, 3), slice(None), slice(None))), dst, arr((2, 5, 8), dtype, 28),
              prims=("SliceUpdate",), what=dtype)
    check_gpu(_assign((slice(4, 0, -2), slice(None, None, 2), 3)), dst, arr((2, 3), dtype, 29),
              prims=("SliceUpdate",), what=dtype)
    check_gpu(_assign((slice(None), 2)), mx.transpose(dst, (1, 0, 2)), arr((1, 8), dtype, 30),
              prims=("SliceUpdate",), what=dtype)


@pytest.mark.parametrize("op", ["add", "multiply", "maximum", "minimum", "subtract"])
@pytest.mark.parametrize("dtype", ["int32", "float32", "bfloat16", "uint8"])
def test_slice_update_reduce(gpu_runtime, op, dtype):
    dst = arr((5, 16), dtype, 31, 0, 4)
    upd = arr((2, 16), dtype, 32, 0, 3)
    check_gpu(lambda a, u: getattr(a.at[1:4:2], op)(u), dst, upd, prims=("SliceUpdate",), what=op)
    check_gpu(lambda a, u: getattr((a + a).at[3:], op)(u), dst, upd, prims=("SliceUpdate",), what=op)


def test_kv_cache_step_in_place(gpu_runtime):
    """The mlx-lm pattern: the cache is ours and updated in place, step after step; the
    host copy stays right (the written hull is all that is written back)."""
    B, H, T, D = 2, 4, 64, 32
    cache = mx.zeros((B, H, T, D), mx.bfloat16)
    mx.eval(cache)
    ref = np.zeros((B, H, T, D), np.float32)
    cache = cache + 0            # ours from here on
    mx.eval(cache)
    rng = np.random.default_rng(33)
    for t in range(5):
        step = mx.array(rng.integers(-8, 8, size=(B, H, 1, D)).astype(np.float32)).astype(mx.bfloat16)
        cache[..., t:t + 1, :] = step
        mx.eval(cache)
        ref[:, :, t:t + 1, :] = np.array(step.astype(mx.float32))
    got = np.array(cache.astype(mx.float32))
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "uint8", "int64"])
def test_kv_cache_twin_writes(gpu_runtime, dtype):
    """k and v cache writes of one step (two SliceUpdates with equal parameters: the twin
    kernel, one launch) in place step after step through replays, against numpy; the first
    step's caches are not ours (copied first), an aliased pair is not donated twice; then
    writes of different strides (a transposed k) and of different cache shapes (no twin)."""
    from mlx_amd.runtime import context

    B, H, T, D = 1, 4, 16, 32
    rng = np.random.default_rng(34)
    kc, vc = mx.zeros((B, H, T, D), getattr(mx, dtype)), mx.ones((B, H, T, D), getattr(mx, dtype))
    mx.eval(kc, vc)
    ref = [np.zeros((B, H, T, D)), np.ones((B, H, T, D))]
    before = context.get_runtime().evaluator.replays
    for t in range(6):
        kv = mx.array(rng.integers(0, 9, size=(B, 1, 2 * H * D)).astype(np.float32)).astype(getattr(mx, dtype))
        k = kv[..., :H * D].reshape(B, 1, H, D).transpose(0, 2, 1, 3)
        v = kv[..., H * D:].reshape(B, 1, H, D).transpose(0, 2, 1, 3)
        if t == 4:
            k = k.transpose(0, 1, 2, 3)[..., ::-1]   # another layout for one of them
        kc[..., t:t + 1, :] = k
        vc[..., t:t + 1, :] = v
        mx.eval(kc[..., :t + 1, :] + 0, vc[..., :t + 1, :] + 0)
        ref[0][:, :, t:t + 1, :] = np.array(k.astype(mx.float32))
        ref[1][:, :, t:t + 1, :] = np.array(v.astype(mx.float32))
    assert context.get_runtime().evaluator.replays > before
    np.testing.assert_array_equal(np.array(kc.astype(mx.float32)), ref[0])
    np.testing.assert_array_equal(np.array(vc.astype(mx.float32)), ref[1])
    # twin candidates the plan refuses or that share a buffer: each as MLX computes them
    check_gpu(lambda a, b, u: (_assign((slice(None), slice(1, 2)))(a, u), _assign((slice(None), slice(1, 2)))(b, u)),
              arr((3, 4, 8), dtype, 35), arr((3, 6, 8), dtype, 36), arr((3, 1, 8), dtype, 37),
              prims=("SliceUpdate",), what="other shapes")
    check_gpu(lambda a, u: (_assign((slice(None), slice(1, 2)))(a, u), _assign((slice(None), slice(1, 2)))(a, u * 2)),
              arr((3, 4, 8), dtype, 38), arr((3, 1, 8), dtype, 39), prims=("SliceUpdate",), what="one source")


def test_slice_update_empty(gpu_runtime):
    check_gpu(_assign((slice(2, 2),)), arr((4, 3), "float32"), mx.zeros((0, 3)))


# ------------------------------------------------------------------ DynamicSlice(Update)
@pytest.mark.parametrize("idt", ["uint8", "int32", "int64", "uint32"])
@pytest.mark.parametrize("dtype", ["bool_", "float16", "float32", "int64", "complex64"])
def test_dynamic_slice(gpu_runtime, idt, dtype):
    src = arr((7, 6, 16), dtype, 34)
    st = ids([3, 2], idt)
    check_gpu(lambda s, st: mx.slice(s, st, axes=(0, 1), slice_size=(3, 4, 16)), src, st, prims=("DynamicSlice",))
    check_gpu(lambda s, st: mx.slice(mx.transpose(s, (2, 1, 0)), st, axes=(1,), slice_size=(16, 2, 7)), src,
              st[:1], prims=("DynamicSlice",))


@pytest.mark.parametrize("dtype", ["uint8", "bfloat16", "float32", "float64"])
def test_dynamic_slice_update(gpu_runtime, dtype):
    src = arr((7, 6, 16), dtype, 35)
    check_gpu(lambda s, u, st: mx.slice_update(s, u, st, axes=(0,)), src, arr((2, 6, 16), dtype, 36),
              ids([4], "int32"), prims=("DynamicSliceUpdate",))
    check_gpu(lambda s, u, st: mx.slice_update(s + s, u, st, axes=(1, 2)), src, arr((7, 1, 8), dtype, 37),
              ids([5, 8], "int64"), prims=("DynamicSliceUpdate",))
    check_gpu(lambda s, u, st: mx.slice_update(s, mx.broadcast_to(u, (3, 2, 16)), st, axes=(0, 1)), src,
              arr((16,), dtype, 38), ids([1, 3], "uint16"), prims=("DynamicSliceUpdate",))


# ------------------------------------------------------------------ MaskedScatter
def _set_masked(d, m, v):
    d = mx.array(d)     # a new array object: the caller's stays as it was
    d[m] = v
    return d


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_scatter_every_dtype(gpu_runtime, dtype):
    dst = arr((6, 5, 3), dtype, 30)
    rows = mx.array(np.array([1, 0, 1, 1, 0, 1], bool))           # row mask, broadcast inside
    check_gpu(_set_masked, dst, rows, arr((4, 5, 3), dtype, 31), prims=("MaskedScatter",), what=f"{dtype} rows")
    full = mx.array(np.random.default_rng(32).random((6, 5, 3)) < 0.4)
    n = int(np.array(full).sum())
    check_gpu(_set_masked, dst, full, arr((n,), dtype, 33), prims=("MaskedScatter",), what=f"{dtype} full")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "complex64"])
def test_masked_scatter_layouts(gpu_runtime, dtype):
    base = arr((7, 9), dtype, 34)
    m = mx.array(np.random.default_rng(35).random((9, 7)) < 0.5)
    n = int(np.array(m).sum())
    vals = arr((n + 5,), dtype, 36)                         # longer source: the rest unused
    check_gpu(lambda d, m, v: _set_masked(mx.transpose(d), m, v), base, m, vals,
              prims=("MaskedScatter",), what="transposed dst")
    sl = lambda d, m, v: _set_masked(d[1:, ::2], m[:6, :5], v)
    check_gpu(sl, base, m, vals, prims=("MaskedScatter",), what="sliced dst and mask")
    check_gpu(lambda d, m, v: _set_masked(d, m, v[::2]), base, mx.transpose(m), arr((2 * n,), dtype, 37),
              prims=("MaskedScatter",), what="strided source")
    check_gpu(lambda d, m, v: _set_masked(d * 1, m, v), base, mx.transpose(m), vals,
              prims=("MaskedScatter",), what="intermediate dst (donated)")
    check_gpu(lambda d, m: _set_masked(d, m, mx.array(3).astype(d.dtype)), base, mx.transpose(m),
              prims=("MaskedScatter",), what="scalar source")


def test_masked_scatter_batched_vmap_and_large(gpu_runtime):
    d = arr((3, 4, 5), "float32", 38)
    m = mx.array(np.random.default_rng(39).random((3, 4, 5)) < 0.5)
    v = arr((3, 20), "float32", 40)
    check_gpu(lambda d, m, v: mx.vmap(_set_masked)(d, m, v), d, m, v, prims=("MaskedScatter",), what="vmap")
    n = 3 * 4096 * 25 + 123                                   # many tiles, a partial last one
    big = arr((n,), "float16", 41)
    bm = mx.array(np.random.default_rng(42).random(n) < 0.9)
    check_gpu(_set_masked, big, bm, arr((n,), "float16", 43), prims=("MaskedScatter",), what="large")
    check_gpu(_set_masked, big, mx.zeros((n,), mx.bool_), arr((1,), "float16", 44),
              prims=("MaskedScatter",), what="nothing selected")


def test_masked_scatter_short_source_raises(gpu_runtime):
    d = mx.zeros((4, 6))
    m = mx.array(np.random.default_rng(45).random((4, 6)) < 0.8)
    mx.eval(d, m)
    with pytest.raises(RuntimeError, match="enough elements"):
        mx.eval(_set_masked(d, m, mx.ones((3,))))
    # the runtime is fine afterwards
    n = int(np.array(m).sum())
    check_gpu(_set_masked, d, m, arr((n,), "float32", 46), prims=("MaskedScatter",), what="after error")
