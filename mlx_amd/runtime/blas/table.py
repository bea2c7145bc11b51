"""The one binding table of the GEMM libraries: hipBLASLt / cuBLASLt, and rocBLAS.

Each row is (logical name, HIP-side symbol, CUDA symbol, restype, argtypes, library).
``library`` is "lt" (hipBLASLt on AMD, cuBLASLt on NVIDIA: the two APIs correspond
call for call, so one row names both) or "rocblas" (AMD only: the fallback where
hipBLASLt lacks the type or the arch). Symbols resolve lazily, on first use.
``tools/check_hip_bindings.py`` checks every HIP-side row against Debian's ROCm 6.4
headers and libraries; ``tests/driver/test_blas_table.py`` checks the table itself.

Vendor constants (enums, struct sizes, status names) live in ``lt.py`` (one dict per
vendor) and ``rocblas.py``; this module only knows calls. Standard library only.
"""

from __future__ import annotations

import ctypes
import glob
import os
import site
import sys
from typing import NamedTuple

from ..driver.base import DriverError, DriverUnavailable
from ..driver.table import Library as _Library
from ..driver.table import format_arg, loaded_path, open_library, symbols

P = ctypes.c_void_p
S = ctypes.c_char_p
I = ctypes.c_int
U32 = ctypes.c_uint32
I64 = ctypes.c_int64
U64 = ctypes.c_uint64
Z = ctypes.c_size_t
pI = ctypes.POINTER(ctypes.c_int)
pP = ctypes.POINTER(ctypes.c_void_p)


class Entry(NamedTuple):
    name: str
    hip: object          # symbol in libhipblaslt / librocblas, or None
    cuda: object         # symbol in libcublasLt, or None
    restype: object
    argtypes: tuple
    library: str = "lt"


TABLE: tuple[Entry, ...] = tuple(Entry(*row) for row in (
    # handles
    ("lt_create",              "hipblasLtCreate",              "cublasLtCreate",              I, (pP,)),
    ("lt_destroy",             "hipblasLtDestroy",             "cublasLtDestroy",             I, (P,)),
    # versions: hipBLASLt writes it through a handle, cuBLASLt returns it
    ("lt_get_version",         "hipblasLtGetVersion",          None,                          I, (P, pI)),
    ("lt_version",             None,                           "cublasLtGetVersion",          Z, ()),
    ("lt_status_name",         None,                           "cublasLtGetStatusName",       S, (I,)),
    ("lt_status_string",       None,                           "cublasLtGetStatusString",     S, (I,)),
    # matrix layouts: (type, rows, cols, ld) column-major, then batch attributes
    ("lt_layout_create",       "hipblasLtMatrixLayoutCreate",  "cublasLtMatrixLayoutCreate",  I, (pP, I, U64, U64, I64)),
    ("lt_layout_destroy",      "hipblasLtMatrixLayoutDestroy", "cublasLtMatrixLayoutDestroy", I, (P,)),
    ("lt_layout_set",          "hipblasLtMatrixLayoutSetAttribute", "cublasLtMatrixLayoutSetAttribute", I, (P, I, P, Z)),
    # matmul descriptors: (compute type, scale type), then transposes
    ("lt_desc_create",         "hipblasLtMatmulDescCreate",    "cublasLtMatmulDescCreate",    I, (pP, I, I)),
    ("lt_desc_destroy",        "hipblasLtMatmulDescDestroy",   "cublasLtMatmulDescDestroy",   I, (P,)),
    ("lt_desc_set",            "hipblasLtMatmulDescSetAttribute", "cublasLtMatmulDescSetAttribute", I, (P, I, P, Z)),
    # heuristic algorithm choice
    ("lt_pref_create",         "hipblasLtMatmulPreferenceCreate", "cublasLtMatmulPreferenceCreate", I, (pP,)),
    ("lt_pref_destroy",        "hipblasLtMatmulPreferenceDestroy", "cublasLtMatmulPreferenceDestroy", I, (P,)),
    ("lt_pref_set",            "hipblasLtMatmulPreferenceSetAttribute", "cublasLtMatmulPreferenceSetAttribute", I, (P, I, P, Z)),
    ("lt_heuristic",           "hipblasLtMatmulAlgoGetHeuristic", "cublasLtMatmulAlgoGetHeuristic", I,
                               (P, P, P, P, P, P, P, I, P, pI)),
    # D = alpha * op(A) op(B) + beta * C
    ("lt_matmul",              "hipblasLtMatmul",              "cublasLtMatmul",              I,
                               (P, P, P, P, P, P, P, P, P, P, P, P, P, P, Z, P)),
    # rocBLAS (AMD): archs and types hipBLASLt does not serve (gfx1030, float64, complex64)
    ("rb_create",              "rocblas_create_handle",        None, I, (pP,), "rocblas"),
    ("rb_destroy",             "rocblas_destroy_handle",       None, I, (P,), "rocblas"),
    ("rb_set_stream",          "rocblas_set_stream",           None, I, (P, P), "rocblas"),
    ("rb_status_string",       "rocblas_status_to_string",     None, S, (I,), "rocblas"),
    # handle, transA, transB, m, n, k, alpha, A, a_type, lda, stride_a, B, b_type, ldb,
    # stride_b, beta, C, c_type, ldc, stride_c, D, d_type, ldd, stride_d, batch_count,
    # compute_type, algo, solution_index, flags
    ("rb_gemm_strided_batched_ex", "rocblas_gemm_strided_batched_ex", None, I,
                               (P, I, I, I, I, I, P, P, I, I, I64, P, I, I, I64, P, P, I, I, I64,
                                P, I, I, I64, I, I, I, I, U32), "rocblas"),
))

BY_NAME: dict[str, Entry] = {e.name: e for e in TABLE}


def rows(library: str, vendor: str) -> list:
    """The entries one library of one vendor serves."""
    return [e for e in TABLE if e.library == library and symbols(e, vendor)]


class BlasError(DriverError):
    """A GEMM library call failed: call text, status name and code, and a hint."""


def Library(cdll, vendor: str, library: str, path: str) -> _Library:
    """The driver table's lazy binder over this table's rows of one library."""
    lib = _Library(cdll, vendor, path, {e.name: e for e in TABLE if e.library == library})
    lib.library = library
    return lib


def make_check(lib: Library, describe, hint) -> callable:
    """``check(status, call, *args)``: raise BlasError naming the call, the status and a hint."""

    def check(status: int, call: str, *args) -> None:
        if status:
            sym = lib.symbol(call)
            text = f"{sym}({', '.join(map(format_arg, args))})"
            name, message = describe(status)
            h = hint(status)
            raise BlasError(text, status, name, message + (f" ({h})" if h else ""))

    return check


# --- finding the libraries ----------------------------------------------------------------

def site_dirs() -> list:
    """site-packages folders of this interpreter (where PyTorch's CUDA wheels put cuBLASLt)."""
    out = []
    try:
        out += site.getsitepackages()
    except Exception:
        pass
    try:
        out.append(site.getusersitepackages())
    except Exception:
        pass
    out += [p for p in sys.path if p.endswith("site-packages")]
    seen, res = set(), []
    for d in out:
        if d and d not in seen and os.path.isdir(d):
            seen.add(d)
            res.append(d)
    return res


def cuda_dirs(env=os.environ) -> list:
    dirs = [os.path.join(env[v], "lib64") for v in ("CUDA_PATH", "CUDA_HOME") if env.get(v)]
    dirs += ["/usr/local/cuda/lib64"]
    for sp in site_dirs():
        # nvidia/cublas/lib (CUDA 12 wheels), nvidia/cu13/lib (CUDA 13 wheels), ...
        dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
    return dirs


def rocm_dirs(env=os.environ) -> list:
    from ..driver.hip import search_dirs
    return search_dirs(env)


# library -> (vendor, file names tried in order, install hint)
LIBRARIES = {
    ("lt", "cuda"): (("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"),
                     "install CUDA's libcublasLt (the CUDA toolkit, or the nvidia-cublas wheel that PyTorch ships)"),
    ("lt", "hip"): (("libhipblaslt.so", "libhipblaslt.so.1", "libhipblaslt.so.0"),
                    "install hipBLASLt (Debian/Ubuntu package libhipblaslt1; ROCm's apt repository: hipblaslt)"),
    ("rocblas", "hip"): (("librocblas.so", "librocblas.so.4", "librocblas.so.5", "librocblas.so.0"),
                         "install rocBLAS (Debian/Ubuntu package librocblas4; ROCm's apt repository: rocblas)"),
}


def open_vendor_library(names, hint: str, vendor: str, env=os.environ, opener=ctypes.CDLL):
    """(CDLL, path) of the first of ``names`` found where that vendor's libraries live (the
    GEMM and FFT libraries); DriverUnavailable names the package to install otherwise."""
    dirs = cuda_dirs(env) if vendor == "cuda" else rocm_dirs(env)
    cdll, path, tried = open_library(dirs, names, opener)
    if cdll is None:
        raise DriverUnavailable(f"{names[0]} not found: {hint}", tried)
    if not os.path.isabs(path):
        path = loaded_path(names[0].split(".so")[0]) or path
    return cdll, path


def load(library: str, vendor: str, env=os.environ, opener=ctypes.CDLL) -> Library:
    """dlopen a GEMM library; DriverUnavailable names the package to install when it is missing."""
    names, hint = LIBRARIES[(library, vendor)]
    cdll, path = open_vendor_library(names, hint, vendor, env, opener)
    return Library(cdll, vendor, library, path)


__all__ = ["TABLE", "BY_NAME", "Entry", "Library", "BlasError", "symbols", "rows", "load", "make_check"]
