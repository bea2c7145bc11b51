"""mx.fast.rms_norm / layer_norm on the GPU (our mlx_amd::RMSNorm / LayerNorm nodes, the
norm family) against plain MLX's own mx.fast on the CPU."""

import mlx.core as mx
import numpy as np
import pytest

import oracle

pytestmark = pytest.mark.gpu

RMS, LN = ("mlx_amd::RMSNorm",), ("mlx_amd::LayerNorm",)
# (x dtype, weight dtype or None): the output is x's dtype or float32 (promotion)
PAIRS = [("float32", "float32"), ("float16", "float16"), ("bfloat16", "bfloat16"),
         ("float16", "float32"), ("bfloat16", "float32"), ("bfloat16", None), ("float32", None)]


def rnd(shape, dtype, seed=0, scale=1.0, shift=0.0):
    x = mx.random.normal(shape, key=mx.random.key(seed)) * scale + shift
    return x.astype(getattr(mx, dtype))


@pytest.mark.parametrize("xd,wd", PAIRS)
@pytest.mark.parametrize("shape", [(3, 1), (7, 33), (4, 4096), (2, 3, 1000), (2, 20000)])
def test_rms_norm(gpu_runtime, wave, xd, wd, shape):
    x = rnd(shape, xd, 1, 2.0, 0.5)
    w = None if wd is None else rnd(shape[-1:], wd, 2)
    oracle.check_gpu(lambda x, *w: mx.fast.rms_norm(x, w[0] if w else None, 1e-5), x,
                     *([w] if w is not None else []), prims=RMS, what=f"rms {xd}/{wd} {shape}")


@pytest.mark.parametrize("xd,wd", PAIRS)
@pytest.mark.parametrize("shape", [(5, 2), (6, 96), (3, 4096), (2, 12000)])
@pytest.mark.parametrize("affine", ["wb", "w", "b"])
def test_layer_norm(gpu_runtime, wave, xd, wd, shape, affine):
    x = rnd(shape, xd, 3, 3.0, 4.0)   # an offset mean: the centred variance matters
    wd = wd or xd
    w = rnd(shape[-1:], wd, 4) if "w" in affine else None
    b = rnd(shape[-1:], wd, 5) if "b" in affine else None
    args = [a for a in (w, b) if a is not None]

    def fn(x, *rest):
        it = iter(rest)
        return mx.fast.layer_norm(x, next(it) if w is not None else None, next(it) if b is not None else None,
                                  1e-5)

    what = f"ln {xd}/{wd} {shape} {affine}"
    if mx.fast.layer_norm(x, w, b, 1e-5).dtype != mx.float32 or shape[-1] < 1000:
        oracle.check_gpu(fn, x, *args, prims=LN, what=what)
        return

    # float32 results over long rows: the order of the mean/variance sums alone moves the
    # last bits (x has a large mean), so ours must be as close to the float64 truth as
    # MLX's CPU is
    def truth(x, *rest):
        it = iter(rest)
        mu = x.mean(axis=-1, keepdims=True)
        y = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-5)
        if w is not None:
            y = y * next(it)
        if b is not None:
            y = y + next(it)
        return y

    oracle.check_accuracy(fn, x, *args, truth=truth, prims=LN, what=what)


def test_layer_norm_plain(gpu_runtime, wave):
    x = rnd((9, 300), "bfloat16", 6)
    oracle.check_gpu(lambda x: mx.fast.layer_norm(x, None, None, 1e-6), x, prims=LN)


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_strided_rows(gpu_runtime, dt):
    # rows of a wider array (row stride > n), a 3-d slice whose rows collapse, an unaligned start
    big = rnd((8, 200), dt, 7)
    w = rnd((128,), dt, 8)
    oracle.check_gpu(lambda a, w: mx.fast.rms_norm(a[:, 8:136], w, 1e-5), big, w, prims=RMS)
    oracle.check_gpu(lambda a, w: mx.fast.rms_norm(a[:, 3:131], w, 1e-5), big, w, prims=RMS)
    oracle.check_gpu(lambda a, w: mx.fast.layer_norm(a[1::2, :128], w, w, 1e-5), big, w, prims=LN)
    cube = rnd((2, 3, 64), dt, 9)
    oracle.check_gpu(lambda a: mx.fast.rms_norm(a[1:], None, 1e-5), cube, prims=RMS)


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_rows_at_no_uniform_stride(gpu_runtime, dt):
    # Gemma 3's q/k norms: (B, L, H, D) transposed to (B, H, L, D) before the norm; the rows
    # are copied row-contiguous first (two launches), on the GPU, not MLX's CPU decomposition
    q = rnd((2, 7, 4, 64), dt, 13)
    w = rnd((64,), dt, 14)
    oracle.check_gpu(lambda q, w: mx.fast.rms_norm(q.transpose(0, 2, 1, 3), w, 1e-6), q, w, prims=RMS)
    oracle.check_gpu(lambda q, w: mx.fast.layer_norm(q.transpose(0, 2, 1, 3), w, w, 1e-5), q, w, prims=LN)


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
def test_q_and_k_norm_twins(gpu_runtime, wave, dt):
    # Qwen 3's q and k norms: two RMSNorms with equal parameters on views of the projections,
    # one launch of the twin kernel (row counts differ: each block row checks its own); a
    # one-token step, a short prompt, rows at a stride, and a pair that must stay apart
    # (different eps)
    def qk(x, wq, wk, eps2=1e-6):
        B, L = x.shape[:2]
        q = x[..., :8 * 64].reshape(B, L, 8, 64)
        k = x[..., 8 * 64:].reshape(B, L, 2, 64)
        return mx.fast.rms_norm(q, wq, 1e-6), mx.fast.rms_norm(k, wk, eps2)

    wq, wk = rnd((64,), dt, 15), rnd((64,), dt, 16)
    for shape in ((1, 1, 10 * 64), (2, 5, 10 * 64)):
        oracle.check_gpu(qk, rnd(shape, dt, 17, 2.0), wq, wk, prims=RMS, what=f"{dt} {shape}")
    wide = rnd((1, 3, 12 * 64), dt, 18)
    oracle.check_gpu(lambda x, wq, wk: qk(x[..., :10 * 64], wq, wk), wide, wq, wk, prims=RMS, what="strided")
    oracle.check_gpu(lambda x, wq, wk: qk(x, wq, wk, 1e-5), rnd((1, 1, 10 * 64), dt, 19), wq, wk, prims=RMS)


def test_edge_values(gpu_runtime):
    x = rnd((6, 64), "float32", 10)
    x = mx.concatenate([x[:2], mx.full((1, 64), float("nan")), mx.zeros((1, 64)),
                        mx.full((1, 64), 1e30), mx.full((1, 64), float("inf"))])
    mx.eval(x)
    w = rnd((64,), "float32", 11)
    oracle.check_gpu(lambda x, w: mx.fast.rms_norm(x, w, 1e-5), x, w, prims=RMS)
    oracle.check_gpu(lambda x, w: mx.fast.layer_norm(x, w, w, 1e-5), x, w, prims=LN)


def test_uncovered_layouts_are_still_right(gpu_runtime):
    # items along a strided axis and float64: MLX's decomposition on the CPU fallback
    x = rnd((64, 6), "float32", 12)
    oracle.check_gpu(lambda x: mx.fast.rms_norm(x.T, None, 1e-5), x)
    oracle.check_gpu(lambda x: mx.fast.layer_norm(x.astype(mx.float64), None, None, 1e-5), x)


def test_empty_and_grad(gpu_runtime):
    oracle.check_gpu(lambda x: mx.fast.rms_norm(x, None, 1e-5), mx.zeros((0, 16)))
    x, w = rnd((4, 32), "float32", 13), rnd((32,), "float32", 14)
    # the backward pass is MLX's decomposition; the forward node still runs on the GPU
    oracle.check_gpu(lambda x, w: mx.grad(lambda x: (mx.fast.rms_norm(x, w, 1e-5) ** 2).sum())(x), x, w)


def test_nn_layers(gpu_runtime):
    import mlx.nn as nn

    mx.random.seed(0)
    for layer, prim in [(nn.RMSNorm(256), RMS), (nn.LayerNorm(256), LN)]:
        mx.eval(layer.parameters())
        x = rnd((2, 5, 256), "bfloat16", 15)
        oracle.check_gpu(lambda x: layer(x), x, prims=prim, what=type(layer).__name__)
        np.testing.assert_equal(layer(x).dtype, mx.float32)
