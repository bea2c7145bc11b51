"""Dense factorizations through the vendor library: hipSOLVER on AMD, cuSOLVER on the
NVIDIA test GPU (runtime/solver/table.py binds both).

The libraries are column-major; the buffers are MLX's row-major matrices, which the
library reads as their transposes. The launcher (runtime/ops/linalg.py) accounts for
that (a Cholesky factor's triangle flips; A^-T computed on A's buffer is A^-1 read
row-major). ``engine(ctx)`` is one library handle per driver, bound to the evaluator's
stream at every call, with one workspace from the device pool grown on demand (one
stream: calls never overlap). ``available(vendor)`` says whether the library loads;
planning declines linalg nodes when it does not (MLX's CPU fallback runs them), with a
one-time warning naming the package.
"""

from __future__ import annotations

import ctypes

from ..vendorlib import Engine, Lazy, PerDriver, vendor_of
from . import table as T

ENV = "MLX_AMD_SOLVER"     # "auto" (default) or "none": never plan linalg on the GPU
ITEMSIZE = {"float32": 4, "float64": 8}
PREFIX = {"float32": "s", "float64": "d"}

_libs = Lazy(T.load, ENV, "solver library unavailable, linalg runs on the CPU")


library, available = _libs.library, _libs.available


class SolverEngine(Engine):
    def __init__(self, driver, pool, lib=None):
        super().__init__(driver, pool, lib, library, T.make_check)
        self.enums = {k: v for k, (_, v) in T.ENUMS[self.vendor].items()}
        h = ctypes.c_void_p()
        self.check(self.lib.create(ctypes.byref(h)), "create", "&handle")
        self.handle = h

    def _bind(self, stream) -> None:
        self.check(self.lib.set_stream(self.handle, stream), "set_stream", self.handle, stream)

    # Every call: its parameters, then the buffers (device addresses), then the stream;
    # matrices sit back to back, n x n (or m x n) each.

    def potrf(self, dtype: str, lower_col: bool, n: int, batch: int, a: int, info: int, stream) -> None:
        """Cholesky of `batch` column-major n x n matrices in place; one int32 info per
        matrix at `info`."""
        lib, check, p = self.lib, self.check, PREFIX[dtype]
        uplo = self.enums["fill_lower" if lower_col else "fill_upper"]
        with self.lock:
            self._bind(stream)
            lw = ctypes.c_int(0)
            fn = f"{p}potrf_buffer_size"
            check(getattr(lib, fn)(self.handle, uplo, n, a, n, ctypes.byref(lw)), fn, uplo, n, hex(a), n, "&lwork")
            work = self.work.get(max(lw.value, 1) * ITEMSIZE[dtype])
            fn = f"{p}potrf"
            call = getattr(lib, fn)
            for b in range(batch):
                ab, ib = a + b * n * n * ITEMSIZE[dtype], info + 4 * b
                check(call(self.handle, uplo, n, ab, n, work, lw.value, ib), fn, uplo, n, hex(ab), n,
                      hex(work), lw.value, hex(ib))

    def inverse_t(self, dtype: str, n: int, batch: int, a: int, x: int, ipiv: int, info: int,
                  stream) -> None:
        """X := A^-1 for `batch` column-major matrices (LU with partial pivoting of A in
        place, then A X = X on identity right-hand sides already in X). ipiv: n int32 per
        matrix; info: 2 * batch int32, the factorizations' (a zero pivot's 1-based index)
        then the solves' (getrs writes its own: it must not hide a singular factor)."""
        lib, check, p = self.lib, self.check, PREFIX[dtype]
        op_n = self.enums["op_n"]
        hip = self.vendor == "hip"
        with self.lock:
            self._bind(stream)
            lw = ctypes.c_int(0)
            fn = f"{p}getrf_buffer_size"
            check(getattr(lib, fn)(self.handle, n, n, a, n, ctypes.byref(lw)), fn, n, n, hex(a), n, "&lwork")
            need = lw.value
            if hip:   # hipSOLVER's getrs takes a workspace too (cuSOLVER's does not)
                lw2 = ctypes.c_int(0)
                fn = f"{p}getrs_buffer_size"
                check(getattr(lib, fn)(self.handle, op_n, n, n, a, n, ipiv, x, n, ctypes.byref(lw2)),
                      fn, op_n, n, n, hex(a), n, hex(ipiv), hex(x), n, "&lwork")
                need = max(need, lw2.value)
            work = self.work.get(max(need, 1) * ITEMSIZE[dtype])
            stride = n * n * ITEMSIZE[dtype]
            for b in range(batch):
                ab, xb, pb = a + b * stride, x + b * stride, ipiv + 4 * n * b
                fi, si = info + 4 * b, info + 4 * (batch + b)
                if hip:
                    fn = f"{p}getrf_ws"
                    check(getattr(lib, fn)(self.handle, n, n, ab, n, work, need, pb, fi), fn, n, n, hex(ab), n,
                          hex(work), need, hex(pb), hex(fi))
                    fn = f"{p}getrs_ws"
                    check(getattr(lib, fn)(self.handle, op_n, n, n, ab, n, pb, xb, n, work, need, si), fn,
                          op_n, n, n, hex(ab), n, hex(pb), hex(xb), n, hex(work), need, hex(si))
                else:
                    fn = f"{p}getrf"
                    check(getattr(lib, fn)(self.handle, n, n, ab, n, work, pb, fi), fn, n, n, hex(ab), n,
                          hex(work), hex(pb), hex(fi))
                    fn = f"{p}getrs"
                    check(getattr(lib, fn)(self.handle, op_n, n, n, ab, n, pb, xb, n, si), fn, op_n, n, n,
                          hex(ab), n, hex(pb), hex(xb), n, hex(si))

    def getrf(self, dtype: str, m: int, n: int, batch: int, a: int, ipiv: int, info: int, stream) -> None:
        """LU with partial pivoting of `batch` column-major m x n matrices in place; ipiv:
        min(m, n) int32 per matrix (1-based rows swapped), info: one int32 per matrix."""
        lib, check, p = self.lib, self.check, PREFIX[dtype]
        k, item = min(m, n), ITEMSIZE[dtype]
        with self.lock:
            self._bind(stream)
            lw = ctypes.c_int(0)
            fn = f"{p}getrf_buffer_size"
            check(getattr(lib, fn)(self.handle, m, n, a, m, ctypes.byref(lw)), fn, m, n, hex(a), m, "&lwork")
            work = self.work.get(max(lw.value, 1) * item)
            for b in range(batch):
                ab, pb, ib = a + b * m * n * item, ipiv + 4 * k * b, info + 4 * b
                if self.vendor == "hip":
                    fn = f"{p}getrf_ws"
                    check(getattr(lib, fn)(self.handle, m, n, ab, m, work, lw.value, pb, ib), fn, m, n, hex(ab), m,
                          hex(work), lw.value, hex(pb), hex(ib))
                else:
                    fn = f"{p}getrf"
                    check(getattr(lib, fn)(self.handle, m, n, ab, m, work, pb, ib), fn, m, n, hex(ab), m,
                          hex(work), hex(pb), hex(ib))

    def geqrf(self, dtype: str, m: int, n: int, batch: int, a: int, tau: int, info: int, stream) -> None:
        """Householder QR of `batch` column-major m x n matrices in place (R above the
        diagonal, reflectors below); tau: min(m, n) scalars per matrix."""
        self._qr("geqrf", dtype, m, n, batch, a, tau, info, stream)

    def orgqr(self, dtype: str, m: int, n: int, batch: int, a: int, tau: int, info: int, stream) -> None:
        """Q (m x min(m, n), column-major, in the first columns) from geqrf's reflectors."""
        self._qr("orgqr", dtype, m, n, batch, a, tau, info, stream)

    def _qr(self, which, dtype, m, n, batch, a, tau, info, stream) -> None:
        lib, check, p = self.lib, self.check, PREFIX[dtype]
        k, item = min(m, n), ITEMSIZE[dtype]
        cols = n if which == "geqrf" else k          # orgqr forms m x k
        with self.lock:
            self._bind(stream)
            lw = ctypes.c_int(0)
            fn = f"{p}{which}_buffer_size"
            if which == "geqrf":
                check(getattr(lib, fn)(self.handle, m, n, a, m, ctypes.byref(lw)), fn, m, n, hex(a), m, "&lwork")
            else:
                check(getattr(lib, fn)(self.handle, m, k, k, a, m, tau, ctypes.byref(lw)), fn, m, k, k, hex(a), m,
                      hex(tau), "&lwork")
            work = self.work.get(max(lw.value, 1) * item)
            fn = f"{p}{which}"
            call = getattr(lib, fn)
            for b in range(batch):
                ab, tb, ib = a + b * m * n * item, tau + b * k * item, info + 4 * b
                args = (m, n) if which == "geqrf" else (m, cols, k)
                check(call(self.handle, *args, ab, m, tb, work, lw.value, ib), fn, *args, hex(ab), m, hex(tb),
                      hex(work), lw.value, hex(ib))

    def gesvd(self, dtype: str, vectors: bool, m: int, n: int, batch: int, a: int, s: int, u: int, vt: int,
              info: int, stream) -> None:
        """SVD of `batch` column-major m x n matrices, m >= n (the library's rule): singular
        values (n per matrix, descending) at s and, with ``vectors``, all of U (m x m) and V^T
        (n x n), column-major. A is destroyed."""
        lib, check, p = self.lib, self.check, PREFIX[dtype]
        item = ITEMSIZE[dtype]
        job = ord("A") if vectors else ord("N")
        with self.lock:
            self._bind(stream)
            lw = ctypes.c_int(0)
            if self.vendor == "hip":
                fn = f"{p}gesvd_buffer_size_ws"
                check(getattr(lib, fn)(self.handle, job, job, m, n, ctypes.byref(lw)), fn, job, job, m, n, "&lwork")
            else:
                fn = f"{p}gesvd_buffer_size"
                check(getattr(lib, fn)(self.handle, m, n, ctypes.byref(lw)), fn, m, n, "&lwork")
            work = self.work.get((max(lw.value, 1) + n) * item)     # + rwork (n values)
            rwork = work + max(lw.value, 1) * item
            fn = f"{p}gesvd"
            call = getattr(lib, fn)
            for b in range(batch):
                ab, sb, ib = a + b * m * n * item, s + b * n * item, info + 4 * b
                ub = u + b * m * m * item if vectors else None
                vb = vt + b * n * n * item if vectors else None
                check(call(self.handle, job, job, m, n, ab, m, sb, ub, m, vb, n, work, lw.value, rwork, ib), fn,
                      chr(job), chr(job), m, n, hex(ab), m, hex(sb), ub, m, vb, n, hex(work), lw.value, hex(rwork),
                      hex(ib))

    def syevd(self, dtype: str, vectors: bool, lower_col: bool, n: int, batch: int, a: int, w: int,
              info: int, stream) -> None:
        """Eigenvalues (ascending, n per matrix at w) and, with ``vectors``, eigenvectors (the
        columns of each column-major matrix, in place) of `batch` symmetric matrices; the
        library reads the ``lower_col`` triangle. One int32 info per matrix."""
        lib, check, p = self.lib, self.check, PREFIX[dtype]
        jobz = self.enums["eig_vector" if vectors else "eig_novector"]
        uplo = self.enums["fill_lower" if lower_col else "fill_upper"]
        item = ITEMSIZE[dtype]
        with self.lock:
            self._bind(stream)
            lw = ctypes.c_int(0)
            fn = f"{p}syevd_buffer_size"
            check(getattr(lib, fn)(self.handle, jobz, uplo, n, a, n, w, ctypes.byref(lw)), fn, jobz, uplo, n,
                  hex(a), n, hex(w), "&lwork")
            work = self.work.get(max(lw.value, 1) * item)
            fn = f"{p}syevd"
            call = getattr(lib, fn)
            for b in range(batch):
                ab, wb, ib = a + b * n * n * item, w + b * n * item, info + 4 * b
                check(call(self.handle, jobz, uplo, n, ab, n, wb, work, lw.value, ib), fn, jobz, uplo, n,
                      hex(ab), n, hex(wb), hex(work), lw.value, hex(ib))

    def close(self) -> None:
        self.work.release()
        self.lib.destroy(self.handle)


_per_driver = PerDriver(SolverEngine)
engine = _per_driver.get          # engine(ctx): the driver's SolverEngine
close_all = _per_driver.close_all


__all__ = ["SolverEngine", "engine", "available", "library", "vendor_of", "close_all", "ITEMSIZE"]
