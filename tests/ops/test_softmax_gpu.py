"""Softmax and LogSumExp on the GPU, end to end through the evaluator, against plain
MLX: every dtype, every kernel (wave rows, block rows in registers, looped rows: row
lengths 1 .. 10^5), precise on/off, strided/transposed/broadcast/sliced/reversed inputs,
NaN/inf rows, empty arrays; at both wave widths.

16-bit softmax with precise=False is compared with MLX's float32 softmax rounded to the
dtype: MLX 0.32.4's CPU accumulates that case in 16 bits, element after element, and is
far off on long rows (documented in runtime/ops/softmax.py); precise=True and every other
case is compared with MLX's own result for the same call."""

import mlx.core as mx
import numpy as np
import pytest

from oracle import check_accuracy, check_gpu

pytestmark = pytest.mark.gpu

DTYPES = ["float16", "bfloat16", "float32", "float64"]
LENGTHS = [1, 5, 33, 300, 1500, 5000, 40000, 100003]
INF, NAN = float("inf"), float("nan")


def arr(a, dtype):
    a = np.asarray(a, dtype=np.float64 if dtype == "float64" else np.float32)
    return mx.array(a, dtype=getattr(mx, dtype))


def randn(shape, dtype, seed=0, scale=3.0):
    return arr(np.random.default_rng(seed).standard_normal(shape) * scale, dtype)


def np_softmax(a):
    """float64 truth of softmax over the last axis (numpy); inf/NaN rows give NaN as in MLX."""
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(a - np.max(a, axis=-1, keepdims=True))
        return e / np.sum(e, axis=-1, keepdims=True)


def softmax_check(x, precise, what=""):
    dt = str(x.dtype).split(".")[-1]
    fn = lambda a: mx.softmax(a, axis=-1, precise=precise)  # noqa: E731
    if dt in ("float16", "bfloat16") and not precise:
        # MLX's CPU computes this one in 16 bits, element after element (a long row's sum
        # stalls); ours is the float32 softmax rounded
        check_gpu(fn, x, prims=("Softmax",), what=what,
                  ref_fn=lambda a: mx.softmax(a.astype(mx.float32), axis=-1).astype(a.dtype))
    elif dt == "float32" and x.shape[-1] > 10000:
        # long rows: our tree-ordered sums and MLX's sequential ones differ in the last bits
        check_accuracy(fn, x, truth=np_softmax, prims=("Softmax",), what=what)
    else:
        check_gpu(fn, x, prims=("Softmax",), what=what)


@pytest.mark.parametrize("precise", [False, True])
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_lengths(gpu_runtime, wave, dtype, n, precise):
    rows = 3 if n > 1000 else 37
    softmax_check(randn((rows, n), dtype, seed=n), precise, f"{dtype} {rows}x{n}")


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_logsumexp_lengths(gpu_runtime, wave, dtype, n):
    rows = 3 if n > 1000 else 37
    x = randn((rows, n), dtype, seed=n + 1)
    check_gpu(lambda a: mx.logsumexp(a, axis=-1), x, prims=("LogSumExp",), what=f"{dtype} {rows}x{n}")
    check_gpu(lambda a: mx.logsumexp(a, axis=-1, keepdims=True), x, prims=("LogSumExp",))


def _views(x):
    """Views whose last axis MLX hands to the primitive as it is."""
    r, n = x.shape
    return {
        "transposed": mx.transpose(x)[:, : r // 2],                 # last axis strided
        "sliced": x[1:, 1:-1],                                      # row pitch > row length
        "reversed": x[::-1, ::-1],                                  # negative strides
        "broadcast_rows": mx.broadcast_to(x[:1], (4, n)),           # row stride 0
        "broadcast_elems": mx.broadcast_to(x[:, :1], (r, 9)),       # element stride 0
        "batched": mx.reshape(x, (r // 2, 2, n)).transpose(1, 0, 2),  # 3-d, permuted rows
        "misaligned": x.reshape(-1)[1: 1 + (r - 1) * n].reshape(r - 1, n),
    }


@pytest.mark.parametrize("n", [7, 600, 9000])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float64"])
def test_layouts(gpu_runtime, wave, dtype, n):
    x = randn((8, n), dtype, seed=3)
    for name, v in _views(x).items():
        softmax_check(v, True, f"softmax {name} {dtype} n={n}")
        check_gpu(lambda a: mx.logsumexp(a, axis=-1), v, prims=("LogSumExp",), what=f"lse {name}")


@pytest.mark.parametrize("n", [6, 700, 3000, 50000])
@pytest.mark.parametrize("dtype", DTYPES)
def test_special_rows(gpu_runtime, wave, dtype, n):
    rng = np.random.default_rng(n)
    a = rng.standard_normal((7, n)) * 4
    a[1, :] = -INF                       # all -inf: softmax NaN, logsumexp -inf
    a[2, n // 2] = INF                   # a +inf: softmax NaN, logsumexp +inf
    a[3, n - 1] = NAN                    # NaN anywhere: NaN
    a[4, ::2] = -INF                     # some -inf: zeros there
    a[5, :] = 0.0                        # uniform
    a[6, 0] = 80.0                       # one dominant value
    x = arr(a, dtype)
    softmax_check(x, True, f"{dtype} n={n}")
    softmax_check(x, False, f"{dtype} n={n} fast")
    check_gpu(lambda v: mx.logsumexp(v, axis=-1), x, prims=("LogSumExp",), what=f"lse {dtype} n={n}")
    got = mx.softmax(x, axis=-1, precise=True)
    mx.eval(got)
    g = np.array(got.astype(mx.float32) if dtype != "float64" else got)
    assert np.isnan(g[1]).all() and np.isnan(g[2]).all() and np.isnan(g[3]).all()
    assert (g[4, ::2] == 0).all() and np.isfinite(g[0]).all()


def test_large_values_and_tiny_differences(gpu_runtime):
    a = np.array([[88.5, 88.0, -88.5, 0.0], [1e30, 1e30, -1e30, 0.0], [-1e-8, 1e-8, 0.0, 3e-8]])
    for dtype in ("float32", "float64"):
        softmax_check(arr(a, dtype), True, dtype)
        check_gpu(lambda v: mx.logsumexp(v, axis=-1), arr(a, dtype), prims=("LogSumExp",))


def test_empty(gpu_runtime):
    for shape in [(0, 5), (4, 0), (2, 0, 3)]:
        x = mx.zeros(shape)
        check_gpu(lambda a: mx.softmax(a, axis=-1), x)


def test_softmax_output_feeds_on(gpu_runtime, wave):
    """Softmax in a chain (its output donated or consumed by later GPU nodes)."""
    x = randn((64, 257), "float32", seed=9)
    check_gpu(lambda a: mx.softmax(mx.softmax(a * 2.0, axis=-1) + 1.0, axis=-1), x, prims=("Softmax",))
