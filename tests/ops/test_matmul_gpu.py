"""Matmul and AddMM on the GPU against MLX's CPU: the vendor library path (cuBLASLt on the
test GPU), our gemv kernel (both wave widths) and our portable tiled GEMM
(MLX_AMD_GEMM=kernel), over dtypes, layouts (transposed, sliced, broadcast batches),
shapes (decode, odd sizes, batched, empty) and AddMM's alpha/beta."""

import mlx.core as mx
import numpy as np
import pytest

from oracle import check_gpu

pytestmark = pytest.mark.gpu

DTYPES = [mx.float32, mx.float16, mx.bfloat16, mx.float64, mx.complex64]
TOL = {mx.float32: (1e-4, 1e-4), mx.float16: (2e-3, 1e-2), mx.bfloat16: (1.6e-2, 5e-2),
       mx.float64: (1e-12, 1e-12), mx.complex64: (1e-4, 1e-4)}


@pytest.fixture(params=["auto", "kernel"])
def mode(request, gpu_runtime, monkeypatch):
    monkeypatch.setenv("MLX_AMD_GEMM", request.param)
    gpu_runtime.evaluator.plans.clear()
    yield request.param
    gpu_runtime.evaluator.plans.clear()


def ints(shape, dtype, seed):
    """Small integers: exact products in every dtype up to the sizes used here."""
    rng = np.random.default_rng(seed)
    v = rng.integers(-3, 4, size=shape).astype(np.float32)
    a = mx.array(v)
    if dtype == mx.complex64:
        return a.astype(mx.complex64) + 1j * mx.array(rng.integers(-2, 3, size=shape).astype(np.float32))
    return a.astype(dtype)


LAYOUTS = {
    "nn": lambda a, b: a @ b,
    "at": lambda a, b: mx.swapaxes(a, -1, -2) @ b,          # a given as (K, M): transposed view
    "bt": lambda a, b: a @ mx.swapaxes(b, -1, -2),          # b given as (N, K): x @ W.T
    "slice": lambda a, b: a[..., ::2, 1:] @ b[..., 1:, ::2],
}


def operands(lay, m, n, k, batch, dtype):
    if lay == "at":
        return ints(batch + (k, m), dtype, 1), ints(batch + (k, n), dtype, 2)
    if lay == "bt":
        return ints(batch + (m, k), dtype, 1), ints(batch + (n, k), dtype, 2)
    if lay == "slice":
        return ints(batch + (2 * m, k + 1), dtype, 1), ints(batch + (k + 1, 2 * n), dtype, 2)
    return ints(batch + (m, k), dtype, 1), ints(batch + (k, n), dtype, 2)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("lay", ["nn", "at", "bt", "slice"])
@pytest.mark.parametrize("m,n,k,batch", [(33, 17, 40, ()), (128, 96, 64, (3,)), (1, 70, 64, ()),
                                         (50, 1, 64, ()), (8, 24, 16, (2, 3))])
def test_matmul(mode, dtype, lay, m, n, k, batch):
    a, b = operands(lay, m, n, k, batch, dtype)
    rt, at = TOL[dtype]
    check_gpu(LAYOUTS[lay], a, b, prims=("Matmul",), rtol=rt, atol=at, what=f"{mode} {lay}")


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16, mx.float16], ids=lambda d: str(d).split(".")[-1])
def test_matmul_random_values(mode, dtype):
    a = mx.random.normal((96, 256), key=mx.random.key(0)).astype(dtype)
    b = mx.random.normal((256, 80), key=mx.random.key(1)).astype(dtype)
    rt = {mx.float32: 1e-4, mx.bfloat16: 2e-2, mx.float16: 4e-3}[dtype]
    check_gpu(lambda x, y: x @ y, a, b, prims=("Matmul",), rtol=rt, atol=rt * 16)


@pytest.mark.parametrize("bshape_a,bshape_b", [((4, 1), (1, 3)), ((1,), (5,)), ((6,), (1,))])
def test_broadcast_batches(mode, bshape_a, bshape_b):
    a = ints(bshape_a + (7, 12), mx.float32, 3)
    b = ints(bshape_b + (12, 9), mx.float32, 4)
    check_gpu(lambda x, y: x @ y, a, b, prims=("Matmul",), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (2.0, 0.5), (-1.5, 0.0)])
@pytest.mark.parametrize("cshape", [(24,), (40, 24), (40, 1)])
def test_addmm(mode, dtype, alpha, beta, cshape):
    a, b = ints((40, 32), dtype, 5), ints((32, 24), dtype, 6)
    c = ints(cshape, dtype, 7)
    rt, at = TOL[dtype]
    # MLX 0.32.4 builds complex addmm from Matmul, Multiply and Add (no AddMM node)
    prims = ("Matmul",) if dtype == mx.complex64 else ("AddMM",)
    check_gpu(lambda c_, x, y: mx.addmm(c_, x, y, alpha=alpha, beta=beta), c, a, b, prims=prims,
              rtol=rt, atol=at)


def test_addmm_transposed_operand(mode):
    a, b, c = ints((16, 20), mx.float32, 8), ints((12, 16), mx.float32, 9), ints((20, 12), mx.float32, 10)
    check_gpu(lambda c_, x, y: mx.addmm(c_, x.T, y.T, alpha=0.5, beta=2.0), c, a, b, prims=("AddMM",), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16], ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("k", [4096, 1000, 7])
def test_gemv_decode(gpu_runtime, wave, monkeypatch, dtype, k):
    monkeypatch.delenv("MLX_AMD_GEMM", raising=False)
    w = mx.random.normal((300, k), key=mx.random.key(2)).astype(dtype)
    x = mx.random.normal((1, k), key=mx.random.key(3)).astype(dtype)
    rt = {mx.float32: 1e-4, mx.bfloat16: 2e-2, mx.float16: 4e-3}[dtype]
    check_gpu(lambda x_, w_: x_ @ w_.T, x, w, prims=("Matmul",), rtol=rt, atol=rt * 8)
    check_gpu(lambda x_, w_: w_ @ x_.T, x, w, prims=("Matmul",), rtol=rt, atol=rt * 8)
    # a misaligned (sliced) weight takes the scalar path
    check_gpu(lambda x_, w_: x_[:, 1:] @ w_[:, 1:].T, x, w, prims=("Matmul",), rtol=rt, atol=rt * 8)


def test_batched_gemv(gpu_runtime, wave):
    w, x = ints((3, 64, 128), mx.float32, 11), ints((3, 1, 128), mx.float32, 12)
    check_gpu(lambda x_, w_: x_ @ mx.swapaxes(w_, -1, -2), x, w, prims=("Matmul",), rtol=0, atol=0)


def test_empty_and_zero_k(gpu_runtime):
    check_gpu(lambda x, y: x @ y, mx.zeros((0, 5)), mx.zeros((5, 3)), prims=())
    check_gpu(lambda x, y: x @ y, mx.ones((4, 0)), mx.ones((0, 3)), prims=("Matmul",), rtol=0, atol=0)


def test_nan_and_inf_propagate(mode):
    a = mx.array([[1.0, float("nan")], [float("inf"), 1.0], [1.0, 2.0]])
    b = mx.array([[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]])
    check_gpu(lambda x, y: x @ y, a, b, prims=("Matmul",), rtol=0, atol=0)


def test_llm_projection_shapes(gpu_runtime):
    x = mx.random.normal((2, 37, 512), key=mx.random.key(4)).astype(mx.bfloat16)
    w = mx.random.normal((1024, 512), key=mx.random.key(5)).astype(mx.bfloat16) * 0.05
    check_gpu(lambda x_, w_: x_ @ w_.T, x, w, prims=("Matmul",), rtol=2e-2, atol=5e-2)


@pytest.mark.vendor
@pytest.mark.parametrize("dtype,m,n,k", [(mx.float32, 1024, 1024, 2048), (mx.bfloat16, 512, 768, 1024),
                                         (mx.float16, 512, 768, 1024)], ids=["float32", "bfloat16", "float16"])
def test_tuned_library_gemm_repeats(gpu_runtime, monkeypatch, dtype, m, n, k):
    """An AddMM evaluated again and again: the replay that records it times the library's
    candidate algorithms on scratch operands (MLX_AMD_GEMM_TUNE=repeat, the default) and
    replays the fastest; every result, before and after, equals MLX's CPU (C is D in place,
    so a timing that touched the real operands would show)."""
    from mlx_amd.runtime import blas

    monkeypatch.delenv("MLX_AMD_GEMM", raising=False)
    if not any(e.name == "lt" for e in blas.engines(gpu_runtime)):
        pytest.skip("no hipBLASLt/cuBLASLt on this device: nothing to time")
    rt, at = TOL[dtype]
    for i in range(4):
        a, b, c = ints((m, k), dtype, 20 + i), ints((k, n), dtype, 30 + i), ints((m, n), dtype, 40 + i)
        check_gpu(lambda c_, x, y: mx.addmm(c_, x, y, alpha=1.0, beta=2.0), c, a, b, prims=("AddMM",),
                  rtol=rt, atol=at, what=f"round {i}")
    mine = [t for t in blas.tunings(gpu_runtime) if (t["gemm"].m, t["gemm"].n, t["gemm"].k) == (n, m, k)
            and t["gemm"].dtype == str(dtype).split(".")[-1]]
    assert mine, "the repeated problem was never timed"
    ms = mine[0]["ms"]
    assert ms and 0 < ms[0] < float("inf") and ms[mine[0]["chosen"]] == min(ms)
