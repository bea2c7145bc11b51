"""Linalg launcher: MLX's Cholesky, Inverse, Eigh, LUF, QRF and SVD (mx.linalg.cholesky,
inv, tri_inv, eigh, eigvalsh, lu_factor, lu, qr, svd) through the solver library (runtime/solver:
hipSOLVER / cuSOLVER) and hip_kernels/linalg.hip.

Beyond MLX's CUDA backend, which runs linalg on the CPU. float32 and float64, as MLX
accepts; any input layout (copied row-contiguous first); a batch of matrices runs one
library call each.

The library is column-major and reads MLX's row-major matrix A as A^T:

- Cholesky(upper): A = L L^T, L lower (MLX's default) is, read column-major, the upper
  factor of A^T = A, so potrf runs with the opposite fill mode on a row-contiguous copy
  of A, and the triangle it leaves untouched (A's own entries) is cleared. Like MLX, a
  matrix that is not positive definite raises nothing (MLX's LAPACK leaves a partial
  factor; the library leaves its own, which differs: only positive definite inputs are
  compared).
- Inverse(tri=False): LU with partial pivoting of A^T (the copy) and solves on identity
  right-hand sides give A^-T column-major, which is A^-1 read row-major (MLX's LAPACK
  path factors the same buffer the same way). A zero pivot raises MLX's error,
  "[Inverse::eval_cpu] LU factorization failed with error code k", after a sync.
- Inverse(tri=True, upper): the other triangle of the copy is cleared first, the first
  zero diagonal entry (if any) raises MLX's "triangular inversion failed with error code
  k", and the result's other triangle is cleared.
- Eigh(UPLO, vectors): syevd on the copy with the opposite fill mode ('L' reads A's lower
  triangle); eigenvalues ascending, as LAPACK's; eigenvector k is column k of the
  column-major result, so a transposing copy writes MLX's layout (vectors as columns).
  Eigenvectors are unique only up to sign (and rotation inside repeated eigenvalues), so
  the tests check A v = w v and orthonormality rather than MLX's exact vectors. A failure
  to converge raises MLX's "[Eigh::eval_cpu] Eigenvalue decomposition failed with error
  code k". complex64 (MLX's heevd path): MLX's CPU fallback.
- LUF (lu_factor, lu): getrf on a transposed copy (so the library factors A itself, m x n),
  transposed back into LU; our kernel turns the library's 1-based row swaps into MLX's
  0-based pivots and follows every row through them for MLX's row permutation. Like MLX,
  a singular matrix raises nothing (its U has a zero pivot).
- QRF (qr): geqrf on the transposed copy, R read from the factor's upper part (the
  reflectors below it cleared), then orgqr forms Q in place and Q is read back; Householder
  signs as LAPACK's (a column of Q and the matching row of R may still differ in sign from
  MLX's where the two libraries round differently, so tests check Q R = A, Q^T Q = I and R
  upper triangular, and MLX's values up to those signs).
- SVD(compute_uv): gesvd with full U and V^T (the libraries take m >= n): a tall A goes
  through a transposed copy and transposing copies of U and V^T back; a wide A is factored
  as A^T, whose U' and V'^T buffers read row-major are A's V^T and U. Singular vectors are
  unique up to sign (and rotation for repeated values): tests check U S V^T = A and
  orthonormality, and singular values against MLX's. A failure to converge raises MLX's
  "[SVD::eval_cpu] SVD failed with error code k".

Checked on the GPU by tests/ops/test_linalg_gpu.py (float32 and float64).
"""

from __future__ import annotations

import ctypes
import dataclasses
import struct

from .. import kernel_table as kt
from ..launch import Launch
from ..plan import ITEMSIZE, HostCall, Layout, Plan, inp, out, tmp
from . import elementwise as ew

FAMILY = "linalg"
PRIMITIVES = {"Cholesky": "cholesky", "Inverse": "inverse", "Eigh": "eigh", "LUF": "luf", "QRF": "qrf",
              "SVD": "svd"}

DTYPES = ("float32", "float64")
_ARGS = struct.Struct("<qqii")      # LinalgArgs after its three pointers: n, batch, keep_upper, k
_PTRS = 3
THREADS = 256                       # mlxa::linalg::kThreads
MAX_N = (1 << 31) - 1               # the libraries' int dimensions


def _kernel(fn, dtype):
    return kt.table("linalg").kernel(kt, fn, dtype)


def _launch(fn, dtype, n, batch, refs, keep_upper=0, items=None, device=None, k=0, kernel=None):
    items = n * n * batch if items is None else items
    grid, block = ew.grid_for(items, device)
    refs = tuple(refs) + (refs[0],) * (_PTRS - len(refs))     # unused pointer fields
    return Launch(FAMILY, kernel or _kernel(fn, dtype), grid, block, 0, _PTRS,
                  _ARGS.pack(n, batch, int(keep_upper), int(k)), refs=refs)


@dataclasses.dataclass(frozen=True)
class SolverCall:
    """HostCall: one solver-engine call over a batch (runtime/solver:
    ``method(*params, *resolved refs, stream)``)."""

    method: str           # potrf, inverse_t, syevd, getrf
    params: tuple

    def __call__(self, ptrs, stream, ctx):
        from .. import solver

        getattr(solver.engine(ctx), self.method)(*self.params, *ptrs, stream)


@dataclasses.dataclass(frozen=True)
class InfoCheck:
    """HostCall: MLX's RuntimeError for the first matrix whose code (int32 per matrix at
    ptrs[0]) is not zero, after the stream drains. ``solves``: a second run of codes (the
    solves' own) that must all be zero."""

    what: str             # "LU factorization", "triangular inversion", "Eigenvalue decomposition"
    batch: int
    solves: bool = False
    prim: str = "Inverse"

    def __call__(self, ptrs, stream, ctx):
        n = self.batch * (2 if self.solves else 1)
        codes = (ctypes.c_int32 * n)()
        ctx.driver.memcpy_dtoh(ctypes.addressof(codes), ptrs[0], 4 * n, stream)
        ctx.driver.stream_synchronize(stream)
        for k in codes[: self.batch]:
            if k:
                raise RuntimeError(f"[{self.prim}::eval_cpu] {self.what} failed with error code {k}")
        for k in codes[self.batch:]:
            if k:
                raise RuntimeError(f"[{self.prim}::eval_cpu] the solve after the LU factorization failed "
                                   f"with error code {k}")


def _square(node):
    """(x, n, batch) of a one-input node on a batch of square float32/float64 matrices."""
    if len(node.ins) != 1 or len(node.outs) != 1:
        return None
    x, o = node.ins[0], node.out
    if x.dtype not in DTYPES or o.dtype != x.dtype or x.shape != o.shape or x.ndim < 2:
        return None
    n = x.shape[-1]
    if x.shape[-2] != n or n > MAX_N:
        return None
    batch = 1
    for d in x.shape[:-2]:
        batch *= d
    return x, n, batch


def _flags(params, count):
    """A state() of `count` bools, possibly unwrapped."""
    if count == 1 and isinstance(params, bool):
        return (params,)
    if isinstance(params, tuple) and len(params) == 1 and isinstance(params[0], tuple):
        params = params[0]
    if not isinstance(params, tuple) or len(params) != count or not all(isinstance(p, bool) for p in params):
        return None
    return params


def _prepare(node, nflags, copy_to, device):
    """(x, n, batch, flags, the launch copying x row-contiguous to ``copy_to``), an empty
    Plan for no matrices, or None when the node is not ours."""
    got, flags = _square(node), _flags(node.params, nflags)
    if got is None or flags is None:
        return None
    x, n, batch = got
    if n == 0 or batch == 0:
        return Plan(())
    copy = ew.dense_copy_launch(x, x.shape, inp(0), copy_to, device)
    return None if copy is None else (x, n, batch, flags, copy)


def plan_cholesky(node, device):
    got = _prepare(node, 1, out(0), device)
    if not isinstance(got, tuple):
        return got
    x, n, batch, (upper,), copy = got
    return Plan((copy,
                 HostCall(SolverCall("potrf", (x.dtype, bool(upper), n, batch)), (out(0), tmp(0)),
                          what=f"potrf {x.dtype} {n}x{n} x{batch}"),
                 _launch("tri", x.dtype, n, batch, (out(0), out(0)), keep_upper=upper, device=device, k=n)),
                temps=(4 * batch,))


def plan_inverse(node, device):
    got = _prepare(node, 2, tmp(0), device)
    if not isinstance(got, tuple):
        return got
    x, n, batch, (tri, upper), copy = got
    dt = x.dtype
    # temporaries: the copy (LU factors), pivots, codes (factorizations, solves), zero-diagonal codes
    temps = [batch * n * n * ITEMSIZE[dt], 4 * n * batch, 8 * batch] + ([4 * batch] if tri else [])
    steps = [copy]
    if tri:
        steps += [_launch("tri", dt, n, batch, (tmp(0), tmp(0)), keep_upper=upper, device=device, k=n),
                  _launch("diag", dt, n, batch, (tmp(0), tmp(3)), items=batch, device=device)]
    steps += [_launch("eye", dt, n, batch, (out(0), out(0)), device=device),
              HostCall(SolverCall("inverse_t", (dt, n, batch)), (tmp(0), out(0), tmp(1), tmp(2)),
                       what=f"getrf+getrs {dt} {n}x{n} x{batch}")]
    if tri:
        steps += [HostCall(InfoCheck("triangular inversion", batch), (tmp(3),), what="zero diagonal check"),
                  _launch("tri", dt, n, batch, (out(0), out(0)), keep_upper=upper, device=device, k=n)]
    else:
        steps.append(HostCall(InfoCheck("LU factorization", batch, solves=True), (tmp(2),),
                              what="zero pivot check"))
    return Plan(tuple(steps), temps=tuple(temps))


def plan_eigh(node, device):
    """Eigh(UPLO, compute_eigenvectors): outputs (values) or (values, vectors)."""
    p = node.params
    if isinstance(p, tuple) and len(p) == 1 and isinstance(p[0], tuple):
        p = p[0]
    if not (isinstance(p, tuple) and len(p) == 2 and p[0] in ("L", "U") and isinstance(p[1], bool)):
        return None
    uplo, vectors = p
    if len(node.ins) != 1 or len(node.outs) != (2 if vectors else 1):
        return None
    x = node.ins[0]
    if x.dtype not in DTYPES or x.ndim < 2 or x.shape[-1] != x.shape[-2] or x.shape[-1] > MAX_N:
        return None
    w = node.outs[0]
    n = x.shape[-1]
    if w.dtype != x.dtype or w.shape != x.shape[:-1] or (vectors and node.outs[1].shape != x.shape):
        return None
    batch = 1
    for d in x.shape[:-2]:
        batch *= d
    if n == 0 or batch == 0:
        return Plan(())
    copy = ew.dense_copy_launch(x, x.shape, inp(0), tmp(0), device)
    if copy is None:
        return None
    # 'L' reads A's lower triangle, the upper one of the column-major view
    steps = [copy, HostCall(SolverCall("syevd", (x.dtype, vectors, uplo == "U", n, batch)),
                            (tmp(0), out(0), tmp(1)), what=f"syevd {x.dtype} {n}x{n} x{batch}"),
             HostCall(InfoCheck("Eigenvalue decomposition", batch, prim="Eigh"), (tmp(1),),
                      what="convergence check")]
    if vectors:
        # eigenvector k is column k of the column-major result: row k of the buffer
        st = list(Layout.row_major(x.shape, x.dtype).strides)
        st[-1], st[-2] = st[-2], st[-1]
        back = ew.dense_copy_launch(Layout.strided(x.shape, tuple(st), x.dtype), x.shape, tmp(0), out(1), device)
        if back is None:
            return None
        steps.append(back)
    return Plan(tuple(steps), temps=(batch * n * n * ITEMSIZE[x.dtype], 4 * batch))


def plan_luf(node, device):
    """LUF: outputs (LU, pivots, row permutation) of A = P L U (rows pivoted), any m x n."""
    got = _matrices(node, 3)
    if got is None:
        return None
    x, m, n, k, bshape, batch = got
    lu, piv, perm = node.outs
    if (lu.shape != x.shape or lu.dtype != x.dtype or piv.shape != bshape + (k,) or piv.dtype != "uint32"
            or perm.shape != bshape + (m,) or perm.dtype != "uint32"):
        return None
    if m == 0 or n == 0 or batch == 0:
        return Plan(())
    # the library factors column-major A: the copy is A^T row-major, and back
    at = _transposed_copy(x, bshape, m, n, inp(0), tmp(0), device)
    back = _from_column_major(x.dtype, bshape, m, n, m, n, tmp(0), out(0), device)
    if at is None or back is None:
        return None
    return Plan((at,
                 HostCall(SolverCall("getrf", (x.dtype, m, n, batch)), (tmp(0), tmp(1), tmp(2)),
                          what=f"getrf {x.dtype} {m}x{n} x{batch}"),
                 back,
                 _launch(None, None, m, batch, (tmp(1), out(1), out(2)), items=m * batch, device=device, k=k,
                         kernel=kt.table("linalg").LUPIV)),
                temps=(batch * m * n * ITEMSIZE[x.dtype], 4 * k * batch, 4 * batch))


def _matrices(node, nouts):
    """(x, m, n, min(m, n), batch shape, batch) of a one-input node on m x n float32/float64
    matrices with ``nouts`` outputs."""
    if len(node.ins) != 1 or len(node.outs) != nouts:
        return None
    x = node.ins[0]
    if x.dtype not in DTYPES or x.ndim < 2 or max(x.shape[-2:]) > MAX_N:
        return None
    batch = 1
    for d in x.shape[:-2]:
        batch *= d
    m, n = x.shape[-2:]
    return x, m, n, min(m, n), x.shape[:-2], batch


def _transposed_copy(x, bshape, m, n, src, dst, device):
    """x (m x n, any strides) into ``dst`` as A^T row-major: the library's column-major A."""
    xs = x.strides
    return ew.dense_copy_launch(Layout.strided(bshape + (n, m), xs[:-2] + (xs[-1], xs[-2]), x.dtype),
                                bshape + (n, m), src, dst, device)


def _from_column_major(dtype, bshape, m, n, rows, cols, src, dst, device):
    """The top-left rows x cols of column-major m x n matrices at ``src`` into ``dst`` row-major."""
    bst = Layout.row_major(bshape + (m, n), dtype).strides[:-2]
    return ew.dense_copy_launch(Layout.strided(bshape + (rows, cols), bst + (1, m), dtype), bshape + (rows, cols),
                                src, dst, device)


def plan_qrf(node, device):
    """QRF: outputs (Q m x k, R k x n), k = min(m, n), A = Q R with Householder signs as LAPACK's."""
    got = _matrices(node, 2)
    if got is None:
        return None
    x, m, n, k, bshape, batch = got
    q, r = node.outs
    if q.shape != bshape + (m, k) or r.shape != bshape + (k, n) or q.dtype != x.dtype or r.dtype != x.dtype:
        return None
    if m == 0 or n == 0 or batch == 0:
        return Plan(())
    dt = x.dtype
    at = _transposed_copy(x, bshape, m, n, inp(0), tmp(0), device)
    r_out = _from_column_major(dt, bshape, m, n, k, n, tmp(0), out(1), device)
    q_out = _from_column_major(dt, bshape, m, n, m, k, tmp(0), out(0), device)
    if None in (at, r_out, q_out):
        return None
    return Plan((at,
                 HostCall(SolverCall("geqrf", (dt, m, n, batch)), (tmp(0), tmp(1), tmp(2)),
                          what=f"geqrf {dt} {m}x{n} x{batch}"),
                 r_out,                                           # R: the factor's upper part,
                 _launch("tri", dt, k, batch, (out(1), out(1)), keep_upper=1, device=device, k=n,
                         items=k * n * batch),                    # reflectors below cleared
                 HostCall(SolverCall("orgqr", (dt, m, n, batch)), (tmp(0), tmp(1), tmp(2)),
                          what=f"orgqr {dt} {m}x{k} x{batch}"),
                 q_out),
                temps=(batch * m * n * ITEMSIZE[dt], batch * k * ITEMSIZE[dt], 4 * batch))


def plan_svd(node, device):
    """SVD(compute_uv): outputs (U m x m, S k, V^T n x n) or (S)."""
    p = node.params
    if isinstance(p, tuple) and len(p) == 1:
        p = p[0]
    if not isinstance(p, bool):
        return None
    got = _matrices(node, 3 if p else 1)
    if got is None:
        return None
    x, m, n, k, bshape, batch = got
    outs = node.outs
    want = [bshape + (m, m), bshape + (k,), bshape + (n, n)] if p else [bshape + (k,)]
    if [o.shape for o in outs] != want or any(o.dtype != x.dtype for o in outs):
        return None
    if m == 0 or n == 0 or batch == 0:
        return Plan(())
    dt, item = x.dtype, ITEMSIZE[x.dtype]
    s_ref = out(1) if p else out(0)
    if m >= n:
        # the library's tall case on column-major A (a transposed copy); U and V^T come back
        # column-major: transposing copies into MLX's row-major outputs
        at = _transposed_copy(x, bshape, m, n, inp(0), tmp(0), device)
        if at is None:
            return None
        steps = [at, HostCall(SolverCall("gesvd", (dt, p, m, n, batch)), (tmp(0), s_ref, tmp(1), tmp(2), tmp(3)),
                              what=f"gesvd {dt} {m}x{n} x{batch}")]
        if p:
            u = _from_column_major(dt, bshape, m, m, m, m, tmp(1), out(0), device)
            v = _from_column_major(dt, bshape, n, n, n, n, tmp(2), out(2), device)
            if u is None or v is None:
                return None
            steps += [u, v]
        temps = (batch * m * n * item, batch * m * m * item if p else 1, batch * n * n * item if p else 1, 4 * batch)
    else:
        # wide: the row-major copy is A^T column-major (tall): A^T = U' S V'^T gives
        # U = V'^T and V^T = U'^T, which are exactly U' and V'^T's buffers read row-major
        copy = ew.dense_copy_launch(x, x.shape, inp(0), tmp(0), device)
        if copy is None:
            return None
        steps = [copy, HostCall(SolverCall("gesvd", (dt, p, n, m, batch)),
                                (tmp(0), s_ref, out(2) if p else tmp(1), out(0) if p else tmp(1), tmp(2)),
                                what=f"gesvd {dt} {n}x{m} x{batch}")]
        temps = (batch * m * n * item, 1, 4 * batch)
    steps.append(HostCall(InfoCheck("SVD", batch, prim="SVD"), (tmp(len(temps) - 1),), what="convergence check"))
    return Plan(tuple(steps), temps=temps)


def plan_node(node, device):
    if node.prim not in PRIMITIVES:
        return None
    from .. import solver

    if not solver.available(solver.vendor_of(getattr(device, "arch", ""))):
        return None
    plans = {"Cholesky": plan_cholesky, "Inverse": plan_inverse, "Eigh": plan_eigh, "LUF": plan_luf,
             "QRF": plan_qrf, "SVD": plan_svd}
    return plans[node.prim](node, device)
