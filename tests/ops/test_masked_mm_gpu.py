"""BlockMaskedMM and SegmentedMM on the GPU (family masked_mm) against MLX's CPU: bool and
float masks, every mask combination, partial edge tiles, batches with broadcast masks,
transposed operands; 16-bit and float64 masked matmuls (MLX's CPU takes float32 only)
against the float64 definition; segments that are empty, reversed, overlapping or the whole
inner dimension, and a segment past it.

    pytest -m gpu tests/ops/test_masked_mm_gpu.py
"""

import mlx.core as mx
import numpy as np
import pytest

from oracle import check_gpu, plain_mlx

pytestmark = pytest.mark.gpu


def _masks(rng, tiles, kind):
    if kind == "bool":
        return [mx.array(rng.random(t) > 0.35) for t in tiles]
    return [mx.array(rng.choice(np.array([0.0, 0.5, 1.0, 2.0], np.float32), size=t)) for t in tiles]


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("which", ["all", "out", "operands"])
@pytest.mark.parametrize("shape,bs", [((64, 96, 128), 32), ((60, 70, 33), 32), ((130, 64, 200), 64)])
def test_block_masked_mm(gpu_runtime, kind, which, shape, bs):
    M, K, N = shape
    rng = np.random.default_rng(1)
    a = mx.array(rng.standard_normal((M, K)).astype(np.float32))
    b = mx.array(rng.standard_normal((K, N)).astype(np.float32))
    tm, tk, tn = (-(-d // bs) for d in (M, K, N))
    mo, ml, mr = _masks(rng, [(tm, tn), (tm, tk), (tk, tn)], kind)
    args = {"all": (mo, ml, mr), "out": (mo, None, None), "operands": (None, ml, mr)}[which]
    check_gpu(lambda x, y: mx.block_masked_mm(x, y, bs, *args), a, b, prims=("BlockMaskedMM",),
              rtol=1e-4, atol=1e-3, what=f"block_masked_mm {shape} {kind} {which}")


def test_block_masked_layouts_and_batches(gpu_runtime):
    rng = np.random.default_rng(2)
    a = mx.array(rng.standard_normal((3, 64, 40)).astype(np.float32))
    bt = mx.array(rng.standard_normal((3, 64, 40)).astype(np.float32))
    mo = mx.array(rng.random((2, 2)) > 0.3)
    ml = mx.array(rng.random((3, 2, 2)) > 0.3)
    mr = mx.array(rng.random((2, 2)) > 0.3)
    check_gpu(lambda x, y: mx.block_masked_mm(x, y.swapaxes(-1, -2), 32, mo, ml, mr), a, bt,
              prims=("BlockMaskedMM",), rtol=1e-4, atol=1e-3, what="transposed b, broadcast masks")
    nan = np.ones((64, 64), np.float32)
    nan[:32, :32] = np.nan
    keep = mx.array(np.array([[False, True], [True, True]]))
    check_gpu(lambda x, y: mx.block_masked_mm(x, y, 32, None, keep, mx.ones((2, 2), dtype=mx.bool_)),
              mx.array(nan), mx.array(np.ones((64, 64), np.float32)), prims=("BlockMaskedMM",), what="masked NaN")


@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float64"])
def test_block_masked_beyond_float32(gpu_runtime, dt):
    # MLX's CPU refuses these dtypes: the reference is the definition in float64
    rng = np.random.default_rng(4)
    dtype = getattr(mx, dt)
    a = mx.array(rng.standard_normal((64, 96)), dtype=dtype)
    b = mx.array(rng.standard_normal((96, 64)), dtype=dtype)
    mo = mx.array(rng.random((2, 2)) > 0.3)
    ml = mx.array(rng.random((2, 3)) > 0.3)
    mr = mx.array(rng.random((3, 2)) > 0.3)
    got = mx.block_masked_mm(a, b, 32, mo, ml, mr)
    mx.eval(got)
    e = lambda m, r, c: np.repeat(np.repeat(np.array(m), 32, 0), 32, 1)[:r, :c]  # noqa: E731
    an, bn = np.array(a.astype(mx.float64)), np.array(b.astype(mx.float64))
    want = ((an * e(ml, 64, 96)) @ (bn * e(mr, 96, 64))) * e(mo, 64, 64)
    tol = 1e-10 if dt == "float64" else 3e-2 * np.abs(want).max()
    np.testing.assert_allclose(np.array(got.astype(mx.float64)), want, atol=tol)


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16", "float64"])
def test_segmented_mm(gpu_runtime, dt):
    rng = np.random.default_rng(5)
    dtype = getattr(mx, dt)
    a = mx.array(rng.standard_normal((9, 40)), dtype=dtype)
    b = mx.array(rng.standard_normal((40, 17)), dtype=dtype)
    segs = mx.array(np.array([[0, 40], [0, 10], [10, 40], [5, 5], [30, 8], [12, 13]], np.uint32))
    tol = {"float32": 1e-4, "float64": 1e-10}.get(dt, 3e-2)
    # MLX 0.32.4's CPU segmented_mm is wrong for float16/bfloat16 whenever a segment is
    # shorter than K (rows past the first read the wrong columns: checked against NumPy);
    # there the reference is MLX's float32 result rounded to the dtype
    half = dt in ("float16", "bfloat16")
    via32 = lambda f: (lambda x, y, s: f(x.astype(mx.float32), y.astype(mx.float32), s).astype(dtype))  # noqa: E731
    plain = lambda x, y, s: mx.segmented_mm(x, y, s)  # noqa: E731
    check_gpu(plain, a, b, segs, prims=("SegmentedMM",), rtol=tol, atol=tol * 10, what=f"segmented_mm {dt}",
              ref_fn=via32(plain) if half else None)
    # column-major operands (transposed views of row-major arrays) and a batch of segments
    at, bt = mx.contiguous(a.T), mx.contiguous(b.T)
    cols = lambda x, y, s: mx.segmented_mm(x.T, y.T, s.reshape(2, 3, 2))  # noqa: E731
    check_gpu(cols, at, bt, segs, prims=("SegmentedMM",), rtol=tol, atol=tol * 10,
              what=f"segmented_mm {dt} column-major", ref_fn=via32(cols) if half else None)


def test_segment_past_k_raises_and_the_process_goes_on(gpu_runtime):
    a, b = mx.ones((4, 8)), mx.ones((8, 4))
    with pytest.raises(ValueError, match="segment 0 is"):
        mx.eval(mx.segmented_mm(a, b, mx.array([[0, 30]], dtype=mx.uint32)))
    ok = mx.segmented_mm(a, b, mx.array([[0, 8]], dtype=mx.uint32))
    with plain_mlx():
        want = np.array(mx.segmented_mm(mx.ones((4, 8)), mx.ones((8, 4)), mx.array([[0, 8]], dtype=mx.uint32)))
    np.testing.assert_allclose(np.array(ok), want)
