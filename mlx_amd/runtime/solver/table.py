"""The one binding table of the dense solver libraries: hipSOLVER (AMD) and cuSOLVER's
dense API (the NVIDIA test GPU).

Each row is (logical name, hipSOLVER symbol, cuSOLVER symbol, restype, argtypes). The two
APIs correspond call for call except where cuSOLVER takes no workspace: its getrf has no
``lwork`` and its getrs neither a workspace nor a size query, so those are vendor-only
rows (``getrf_ws`` / ``getrs_ws`` on hipSOLVER, ``getrf`` / ``getrs`` on cuSOLVER);
``runtime/solver/__init__.py`` calls whichever the vendor has. The enum values differ
(hipSOLVER numbers its fill modes and operations from 111 / 121, cuBLAS's from 0): see
``ENUMS``. ``tools/check_hip_bindings.py`` checks the hipSOLVER rows and enums against
Debian's ROCm 6.4 ``libhipsolver`` and ``hipsolver.h``; the cuSOLVER rows are checked on
a machine with ``cusolverDn.h`` (``tests/driver/test_solver_table.py``).

Standard library only.
"""

from __future__ import annotations

import ctypes
import os

from ..driver.base import DriverError
from ..driver.table import Entry  # noqa: F401  (the driver table's row type, re-exported)
from ..driver.table import Library as _Library
from ..driver.table import symbols

P = ctypes.c_void_p
I = ctypes.c_int
C = ctypes.c_byte          # signed char (gesvd's job letters)
pI = ctypes.POINTER(ctypes.c_int)
pP = ctypes.POINTER(ctypes.c_void_p)


def _typed(prefix_hip, prefix_cu, name, rest, restype=I, args=()):
    """The float32 and float64 rows of one routine."""
    return [(f"{t}{name}", f"hipsolver{T}{rest}" if prefix_hip else None,
             f"cusolverDn{T}{rest}" if prefix_cu else None, restype, args) for t, T in (("s", "S"), ("d", "D"))]


_ROWS = [
    ("create",     "hipsolverCreate",    "cusolverDnCreate",    I, (pP,)),
    ("destroy",    "hipsolverDestroy",   "cusolverDnDestroy",   I, (P,)),
    ("set_stream", "hipsolverSetStream", "cusolverDnSetStream", I, (P, P)),
]
# potrf: handle, uplo, n, A, lda, (&lwork | work, lwork, info)
_ROWS += _typed(1, 1, "potrf_buffer_size", "potrf_bufferSize", I, (P, I, I, P, I, pI))
_ROWS += _typed(1, 1, "potrf", "potrf", I, (P, I, I, P, I, P, I, P))
# getrf: handle, m, n, A, lda, ...
_ROWS += _typed(1, 1, "getrf_buffer_size", "getrf_bufferSize", I, (P, I, I, P, I, pI))
_ROWS += _typed(1, 0, "getrf_ws", "getrf", I, (P, I, I, P, I, P, I, P, P))     # work, lwork, ipiv, info
_ROWS += _typed(0, 1, "getrf", "getrf", I, (P, I, I, P, I, P, P, P))           # work, ipiv, info
# getrs: handle, trans, n, nrhs, A, lda, ipiv, B, ldb, ...
_ROWS += _typed(1, 0, "getrs_buffer_size", "getrs_bufferSize", I, (P, I, I, I, P, I, P, P, I, pI))
_ROWS += _typed(1, 0, "getrs_ws", "getrs", I, (P, I, I, I, P, I, P, P, I, P, I, P))   # work, lwork, info
_ROWS += _typed(0, 1, "getrs", "getrs", I, (P, I, I, I, P, I, P, P, I, P))             # info

# syevd: handle, jobz, uplo, n, A, lda, W, (&lwork | work, lwork, info)
_ROWS += _typed(1, 1, "syevd_buffer_size", "syevd_bufferSize", I, (P, I, I, I, P, I, P, pI))
_ROWS += _typed(1, 1, "syevd", "syevd", I, (P, I, I, I, P, I, P, P, I, P))

# geqrf: handle, m, n, A, lda, (&lwork | tau, work, lwork, info)
_ROWS += _typed(1, 1, "geqrf_buffer_size", "geqrf_bufferSize", I, (P, I, I, P, I, pI))
_ROWS += _typed(1, 1, "geqrf", "geqrf", I, (P, I, I, P, I, P, P, I, P))
# orgqr: handle, m, n, k, A, lda, tau, (&lwork | work, lwork, info)
_ROWS += _typed(1, 1, "orgqr_buffer_size", "orgqr_bufferSize", I, (P, I, I, I, P, I, P, pI))
_ROWS += _typed(1, 1, "orgqr", "orgqr", I, (P, I, I, I, P, I, P, P, I, P))

# gesvd (m >= n): handle, jobu, jobvt, m, n, A, lda, S, U, ldu, VT, ldvt, work, lwork, rwork, info;
# the size query takes the job letters on hipSOLVER only
_ROWS += _typed(1, 0, "gesvd_buffer_size_ws", "gesvd_bufferSize", I, (P, C, C, I, I, pI))
_ROWS += _typed(0, 1, "gesvd_buffer_size", "gesvd_bufferSize", I, (P, I, I, pI))
_ROWS += _typed(1, 1, "gesvd", "gesvd", I, (P, C, C, I, I, P, I, P, P, I, P, I, P, I, P, P))

TABLE: tuple[Entry, ...] = tuple(Entry(*row) for row in _ROWS)
BY_NAME: dict[str, Entry] = {e.name: e for e in TABLE}

# enum values per vendor (C names for the header checks)
ENUMS = {
    "hip": {"fill_upper": ("HIPSOLVER_FILL_MODE_UPPER", 121), "fill_lower": ("HIPSOLVER_FILL_MODE_LOWER", 122),
            "op_n": ("HIPSOLVER_OP_N", 111), "eig_novector": ("HIPSOLVER_EIG_MODE_NOVECTOR", 201),
            "eig_vector": ("HIPSOLVER_EIG_MODE_VECTOR", 202)},
    "cuda": {"fill_upper": ("CUBLAS_FILL_MODE_UPPER", 1), "fill_lower": ("CUBLAS_FILL_MODE_LOWER", 0),
             "op_n": ("CUBLAS_OP_N", 0), "eig_novector": ("CUSOLVER_EIG_MODE_NOVECTOR", 0),
             "eig_vector": ("CUSOLVER_EIG_MODE_VECTOR", 1)},
}
STATUS = {
    "hip": {0: "HIPSOLVER_STATUS_SUCCESS", 1: "HIPSOLVER_STATUS_NOT_INITIALIZED",
            2: "HIPSOLVER_STATUS_ALLOC_FAILED", 3: "HIPSOLVER_STATUS_INVALID_VALUE",
            4: "HIPSOLVER_STATUS_MAPPING_ERROR", 5: "HIPSOLVER_STATUS_EXECUTION_FAILED",
            6: "HIPSOLVER_STATUS_INTERNAL_ERROR", 7: "HIPSOLVER_STATUS_NOT_SUPPORTED",
            8: "HIPSOLVER_STATUS_ARCH_MISMATCH", 9: "HIPSOLVER_STATUS_HANDLE_IS_NULLPTR",
            10: "HIPSOLVER_STATUS_INVALID_ENUM", 11: "HIPSOLVER_STATUS_UNKNOWN"},
    "cuda": {0: "CUSOLVER_STATUS_SUCCESS", 1: "CUSOLVER_STATUS_NOT_INITIALIZED",
             2: "CUSOLVER_STATUS_ALLOC_FAILED", 3: "CUSOLVER_STATUS_INVALID_VALUE",
             4: "CUSOLVER_STATUS_ARCH_MISMATCH", 5: "CUSOLVER_STATUS_MAPPING_ERROR",
             6: "CUSOLVER_STATUS_EXECUTION_FAILED", 7: "CUSOLVER_STATUS_INTERNAL_ERROR",
             8: "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED", 9: "CUSOLVER_STATUS_NOT_SUPPORTED"},
}


def rows_for(vendor: str) -> list:
    return [e for e in TABLE if symbols(e, vendor)]


class SolverError(DriverError):
    """A solver library call failed: call text, status name and code."""


def Library(cdll, vendor: str, path: str) -> _Library:
    """The driver table's lazy binder over this table's rows for one vendor."""
    return _Library(cdll, vendor, path, {e.name: e for e in rows_for(vendor)})


def make_check(lib) -> callable:
    """``check(status, call, *args)``: raise SolverError naming the call and the status."""
    from ..vendorlib import status_check

    return status_check(lib, SolverError, STATUS[lib.vendor])


# library files tried in order, install hint
LIBRARIES = {
    "cuda": (("libcusolver.so.12", "libcusolver.so.11", "libcusolver.so"),
             "install CUDA's libcusolver (the CUDA toolkit, or the nvidia-cusolver wheel that PyTorch ships)"),
    "hip": (("libhipsolver.so", "libhipsolver.so.0"),
            "install hipSOLVER (Debian/Ubuntu package libhipsolver0; ROCm's apt repository: hipsolver)"),
}


def load(vendor: str, env=os.environ, opener=ctypes.CDLL):
    """dlopen the vendor's solver library; DriverUnavailable names the package to install."""
    from ..vendorlib import load as load_vendor

    return load_vendor(LIBRARIES, Library, vendor, env, opener)


__all__ = ["TABLE", "BY_NAME", "Entry", "ENUMS", "STATUS", "SolverError", "Library", "load",
           "make_check", "rows_for", "symbols"]
