"""Cholesky, Inverse, Eigh, LUF, QRF and SVD on the GPU through hipSOLVER / cuSOLVER (family VERIFIED = False:
enabled here with MLX_AMD_UNVERIFIED=1) against MLX's CPU (LAPACK): float32 and float64,
batches, transposed / sliced / broadcast inputs, tri_inv both ways, and MLX's errors for
singular matrices. Two correct factorizations differ by rounding that grows with the
condition number: the inputs are well conditioned (diagonally shifted) and compared at
1e-4 (float32) / 1e-10 (float64) relative to the largest entry.

    pytest -m gpu tests/ops/test_linalg_gpu.py
"""

import mlx.core as mx
import numpy as np
import pytest

from oracle import check_gpu, plain_mlx

pytestmark = [pytest.mark.gpu, pytest.mark.vendor]

DT = {"f32": mx.float32, "f64": mx.float64}
TOL = {mx.float32: 1e-4, mx.float64: 1e-10}


@pytest.fixture(autouse=True)
def _unverified(monkeypatch):
    from mlx_amd.runtime import evaluator
    monkeypatch.setenv("MLX_AMD_UNVERIFIED", "1")
    monkeypatch.setattr(evaluator, "DISPATCH", evaluator.dispatch_table())


def spd(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    n = shape[-1]
    m = rng.standard_normal(shape)
    a = m @ np.swapaxes(m, -1, -2) + n * np.eye(n)
    return mx.array(a, dtype=dtype)


def general(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    n = shape[-1]
    a = rng.standard_normal(shape) + 2 * np.sqrt(n) * np.eye(n)
    return mx.array(a, dtype=dtype)


def rand(shape, dt, seed):
    """(numpy array, mx.array) of normal samples in the dtype of ``dt``."""
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float64 if dt == "f64" else np.float32)
    return a, mx.array(a, dtype=DT[dt])      # mx.array(float64 ndarray) alone is float32


def check(fn, x, prim, what):
    scale = float(np.abs(np.array(x)).max()) or 1.0
    t = TOL[x.dtype] * max(scale, 1.0)
    check_gpu(fn, x, prims=(prim,), rtol=TOL[x.dtype], atol=t, what=what)


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (33, 33), (3, 16, 16), (2, 2, 64, 64)])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(gpu_runtime, dt, shape, upper):
    x = spd(shape, DT[dt], 1)
    check(lambda v: mx.linalg.cholesky(v, upper=upper), x, "Cholesky", f"cholesky {dt} {shape} upper={upper}")


def test_cholesky_layouts(gpu_runtime):
    x = spd((3, 24, 24), mx.float32, 2)
    check(lambda v: mx.linalg.cholesky(v.swapaxes(-1, -2)), x, "Cholesky", "transposed")
    check(lambda v: mx.linalg.cholesky(v[::-1]), x, "Cholesky", "reversed batch")
    check(lambda v: mx.linalg.cholesky(mx.broadcast_to(v[:1], (4, 24, 24))), x, "Cholesky", "broadcast")


def test_cholesky_not_positive_definite_raises_nothing_like_mlx(gpu_runtime):
    a = mx.array(np.array([[1.0, 2.0], [2.0, 1.0]], np.float32))
    y = mx.linalg.cholesky(a)
    mx.eval(y)          # MLX returns a partial factor without an error; so do we
    assert y.shape == (2, 2)


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (40, 40), (3, 8, 8), (2, 3, 32, 32)])
def test_inverse(gpu_runtime, dt, shape):
    x = general(shape, DT[dt], 3)
    check(mx.linalg.inv, x, "Inverse", f"inv {dt} {shape}")


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("upper", [False, True])
def test_triangular_inverse(gpu_runtime, dt, upper):
    x = general((3, 20, 20), DT[dt], 4)
    check(lambda v: mx.linalg.tri_inv(v, upper=upper), x, "Inverse", f"tri_inv {dt} upper={upper}")


def test_inverse_layouts(gpu_runtime):
    x = general((4, 16, 16), mx.float32, 5)
    check(lambda v: mx.linalg.inv(v.swapaxes(-1, -2)), x, "Inverse", "transposed")
    check(lambda v: mx.linalg.inv(v[1::2]), x, "Inverse", "sliced batch")


@pytest.mark.parametrize("fn,a", [
    (mx.linalg.inv, [[1.0, 2.0], [2.0, 4.0]]),
    (lambda v: mx.linalg.tri_inv(v, upper=True), [[1.0, 2.0], [0.0, 0.0]]),
    (lambda v: mx.linalg.tri_inv(v, upper=False), [[0.0, 0.0], [1.0, 1.0]]),
])
def test_singular_raises_mlx_error(gpu_runtime, fn, a):
    x = mx.array(np.array(a, np.float32))
    with plain_mlx():
        with pytest.raises(RuntimeError) as ref:
            mx.eval(fn(x))
    with pytest.raises(RuntimeError) as got:
        mx.eval(fn(x))
    assert str(got.value) == str(ref.value)
    ok = mx.linalg.inv(mx.array(np.eye(3, dtype=np.float32)))   # the process goes on
    np.testing.assert_array_equal(np.array(ok), np.eye(3, dtype=np.float32))


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("shape", [(1, 1), (6, 6), (3, 32, 32)])
def test_eigh(gpu_runtime, dt, uplo, shape):
    # eigenvalues against MLX's; eigenvectors (unique up to sign) by A v = w v and V^T V = I
    a, x = rand(shape, dt, 6)
    check_gpu(lambda v: mx.linalg.eigvalsh(v, UPLO=uplo), x, prims=("Eigh",), rtol=TOL[x.dtype],
              atol=TOL[x.dtype] * 10, what=f"eigvalsh {dt} {uplo} {shape}")
    w, v = mx.linalg.eigh(x, UPLO=uplo)
    w, v = np.array(w).astype(np.float64), np.array(v).astype(np.float64)
    tri = np.tril if uplo == "L" else np.triu
    t = tri(a.astype(np.float64))
    sym = t + np.swapaxes(tri(a.astype(np.float64), -1 if uplo == "L" else 1), -1, -2)
    n = shape[-1]
    tol = 1e-3 if dt == "f32" else 1e-9
    np.testing.assert_allclose(sym @ v, v * w[..., None, :], atol=tol * max(1.0, np.abs(a).max()) * n)
    np.testing.assert_allclose(np.swapaxes(v, -1, -2) @ v, np.broadcast_to(np.eye(n), v.shape), atol=tol * n)


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (3, 7), (7, 3), (2, 16, 16), (2, 3, 12, 9)])
def test_lu_factor(gpu_runtime, dt, shape):
    # random matrices: no ties in the pivot search, so the pivots and the permutation are exact
    x = general(shape, DT[dt], 7) if shape[-1] == shape[-2] else rand(shape, dt, 7)[1]
    check_gpu(lambda v: mx.linalg.lu_factor(v), x, prims=("LUF",), rtol=TOL[x.dtype], atol=TOL[x.dtype] * 10,
              what=f"lu_factor {dt} {shape}")
    check_gpu(lambda v: mx.linalg.lu(v), x, prims=("LUF",), rtol=TOL[x.dtype], atol=TOL[x.dtype] * 10,
              what=f"lu {dt} {shape}")


def test_lu_factor_layouts_and_singular(gpu_runtime):
    x = general((3, 10, 10), mx.float32, 8)
    check_gpu(lambda v: mx.linalg.lu_factor(v.swapaxes(-1, -2)), x, prims=("LUF",), rtol=1e-4, atol=1e-3,
              what="transposed")
    s = mx.array(np.array([[1.0, 2.0], [2.0, 4.0]], np.float32))   # MLX raises nothing
    check_gpu(lambda v: mx.linalg.lu_factor(v), s, prims=("LUF",), rtol=0, atol=0, what="singular")


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("shape", [(1, 1), (6, 6), (7, 4), (4, 7), (2, 3, 16, 12)])
def test_qr(gpu_runtime, dt, shape):
    # Q R = A, Q^T Q = I, R upper; and MLX's Q and R up to the sign of each column of Q and
    # the matching row of R (both libraries use LAPACK's Householder signs)
    a, x = rand(shape, dt, 10)
    with plain_mlx():
        rq, rr = (np.array(t).astype(np.float64) for t in mx.linalg.qr(x))
    import mlx_amd
    mlx_amd.stats(reset=True)
    q, r = mx.linalg.qr(x)
    mx.eval(q, r)
    by = mlx_amd.stats()["by_primitive"].get("QRF", {})
    assert by.get("gpu", 0) > 0 and by.get("cpu", 0) == 0, by
    q, r = np.array(q).astype(np.float64), np.array(r).astype(np.float64)
    tol = 1e-4 if dt == "f32" else 1e-10
    k = min(shape[-2:])
    np.testing.assert_allclose(q @ r, a, atol=tol * 10)
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(k), q.shape[:-2] + (k, k)),
                               atol=tol * 10)
    np.testing.assert_array_equal(np.tril(r, -1), 0)
    s = np.sign(np.sum(q * rq, axis=-2, keepdims=True))
    np.testing.assert_allclose(q * s, rq, atol=tol * 10)
    np.testing.assert_allclose(r * np.swapaxes(s, -1, -2), rr, atol=tol * 10 * max(1.0, np.abs(a).max()))


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("shape", [(1, 1), (6, 6), (7, 4), (4, 7), (2, 3, 10, 6)])
def test_svd(gpu_runtime, dt, shape):
    # singular values against MLX's; U S V^T = A and U, V orthogonal (the vectors are unique
    # only up to sign, and the extra columns of a full U or V^T up to a rotation)
    a, x = rand(shape, dt, 12)
    tol = 1e-4 if dt == "f32" else 1e-10
    check_gpu(lambda v: mx.linalg.svd(v, compute_uv=False), x, prims=("SVD",), rtol=tol, atol=tol * 10,
              what=f"singular values {dt} {shape}")
    u, s, vt = (np.array(t).astype(np.float64) for t in mx.linalg.svd(x))
    m, n = shape[-2:]
    k = min(m, n)
    rec = (u[..., :, :k] * s[..., None, :]) @ vt[..., :k, :]
    np.testing.assert_allclose(rec, a, atol=tol * 20 * max(1.0, np.abs(a).max()))
    np.testing.assert_allclose(np.swapaxes(u, -1, -2) @ u, np.broadcast_to(np.eye(m), u.shape), atol=tol * 20)
    np.testing.assert_allclose(vt @ np.swapaxes(vt, -1, -2), np.broadcast_to(np.eye(n), vt.shape), atol=tol * 20)
