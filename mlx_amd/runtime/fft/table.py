"""The one binding table of the FFT libraries: hipFFT (AMD) and cuFFT (the NVIDIA test GPU).

Each row is (logical name, hipFFT symbol, cuFFT symbol, restype, argtypes). The two
APIs correspond call for call, with one difference the rows abstract: a plan handle is a
pointer on hipFFT (``struct hipfftHandle_t*``) and an ``int`` on cuFFT. ``H`` / ``pH``
in a row stand for the handle / a pointer to one and become the vendor's type when the
rows are bound (``rows_for``). Symbols resolve lazily, on first use.
``tools/check_hip_bindings.py`` (with the hipFFT section in the fft report) and
``tests/driver/test_fft_table.py`` check every hipFFT row against Debian's ROCm 6.4
``libhipfft.so`` and ``hipfft.h``.

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
I64 = ctypes.c_longlong
pI = ctypes.POINTER(ctypes.c_int)
pI64 = ctypes.POINTER(ctypes.c_longlong)
pZ = ctypes.POINTER(ctypes.c_size_t)


class _HandleMarker:
    """Placeholder for the vendor's plan handle type in a row (see the module text)."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


H = _HandleMarker("H")
pH = _HandleMarker("pH")

HANDLE_TYPES = {"hip": (ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)),
                "cuda": (ctypes.c_int, ctypes.POINTER(ctypes.c_int))}


TABLE: tuple[Entry, ...] = tuple(Entry(*row) for row in (
    ("get_version",        "hipfftGetVersion",        "cufftGetVersion",        I, (pI,)),
    # plans: create, turn off the library's own work-area allocation (ours comes from the
    # pool), make (64-bit sizes: arrays past 2^31 elements), destroy
    ("create",             "hipfftCreate",            "cufftCreate",            I, (pH,)),
    ("set_auto_allocation", "hipfftSetAutoAllocation", "cufftSetAutoAllocation", I, (H, I)),
    # plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, &work size
    ("make_plan_many64",   "hipfftMakePlanMany64",    "cufftMakePlanMany64",    I,
                           (H, I, pI64, pI64, I64, I64, pI64, I64, I64, I, I64, pZ)),
    ("get_size",           "hipfftGetSize",           "cufftGetSize",           I, (H, pZ)),
    ("destroy",            "hipfftDestroy",           "cufftDestroy",           I, (H,)),
    # per call: stream and work area, then the transform
    ("set_stream",         "hipfftSetStream",         "cufftSetStream",         I, (H, P)),
    ("set_work_area",      "hipfftSetWorkArea",       "cufftSetWorkArea",       I, (H, P)),
    ("exec_c2c",           "hipfftExecC2C",           "cufftExecC2C",           I, (H, P, P, I)),
    ("exec_r2c",           "hipfftExecR2C",           "cufftExecR2C",           I, (H, P, P)),
    ("exec_c2r",           "hipfftExecC2R",           "cufftExecC2R",           I, (H, P, P)),
))

BY_NAME: dict[str, Entry] = {e.name: e for e in TABLE}

# hipfft.h / cufft.h: the values agree between the two (checked for hipFFT by the tests)
TYPES = {"r2c": 0x2A, "c2r": 0x2C, "c2c": 0x29}
DIRECTION = {"forward": -1, "inverse": 1}
STATUS = {
    "hip": {0: "HIPFFT_SUCCESS", 1: "HIPFFT_INVALID_PLAN", 2: "HIPFFT_ALLOC_FAILED",
            3: "HIPFFT_INVALID_TYPE", 4: "HIPFFT_INVALID_VALUE", 5: "HIPFFT_INTERNAL_ERROR",
            6: "HIPFFT_EXEC_FAILED", 7: "HIPFFT_SETUP_FAILED", 8: "HIPFFT_INVALID_SIZE",
            9: "HIPFFT_UNALIGNED_DATA", 10: "HIPFFT_INCOMPLETE_PARAMETER_LIST",
            11: "HIPFFT_INVALID_DEVICE", 12: "HIPFFT_PARSE_ERROR", 13: "HIPFFT_NO_WORKSPACE",
            14: "HIPFFT_NOT_IMPLEMENTED", 16: "HIPFFT_NOT_SUPPORTED"},
    "cuda": {0: "CUFFT_SUCCESS", 1: "CUFFT_INVALID_PLAN", 2: "CUFFT_ALLOC_FAILED",
             3: "CUFFT_INVALID_TYPE", 4: "CUFFT_INVALID_VALUE", 5: "CUFFT_INTERNAL_ERROR",
             6: "CUFFT_EXEC_FAILED", 7: "CUFFT_SETUP_FAILED", 8: "CUFFT_INVALID_SIZE",
             9: "CUFFT_UNALIGNED_DATA", 10: "CUFFT_INCOMPLETE_PARAMETER_LIST",
             11: "CUFFT_INVALID_DEVICE", 12: "CUFFT_PARSE_ERROR", 13: "CUFFT_NO_WORKSPACE",
             14: "CUFFT_NOT_IMPLEMENTED", 15: "CUFFT_LICENSE_ERROR", 16: "CUFFT_NOT_SUPPORTED"},
}
HINTS = {2: "the GPU is out of memory", 8: "a transform size or batch the library refuses",
         4: "a size, stride or pointer the library refuses", 11: "the plan belongs to another device",
         16: "this transform is not supported by this library build"}


def concrete(argtypes: tuple, vendor: str) -> tuple:
    h, ph = HANDLE_TYPES[vendor]
    return tuple(h if t is H else ph if t is pH else t for t in argtypes)


def rows_for(vendor: str) -> list:
    """The rows one vendor serves, with its handle type in place of H / pH."""
    return [e._replace(argtypes=concrete(e.argtypes, vendor), restype=e.restype)
            for e in TABLE if symbols(e, vendor)]


class FftError(DriverError):
    """An FFT library call failed: call text, status name and code, and a hint."""


def Library(cdll, vendor: str, path: str) -> _Library:
    """The driver table's lazy binder over this table's rows for one vendor."""
    return _Library(cdll, vendor, path, {e.name: e for e in rows_for(vendor)})


def make_check(lib) -> callable:
    """``check(status, call, *args)``: raise FftError naming the call, the status and a hint."""
    from ..vendorlib import status_check

    return status_check(lib, FftError, STATUS[lib.vendor], HINTS)


# library files tried in order, install hint
LIBRARIES = {
    "cuda": (("libcufft.so.12", "libcufft.so.11", "libcufft.so"),
             "install CUDA's libcufft (the CUDA toolkit, or the nvidia-cufft wheel that PyTorch ships)"),
    "hip": (("libhipfft.so", "libhipfft.so.0"),
            "install hipFFT (Debian/Ubuntu package libhipfft0; ROCm's apt repository: hipfft)"),
}


def load(vendor: str, env=os.environ, opener=ctypes.CDLL):
    """dlopen the vendor's FFT library; DriverUnavailable names the package to install."""
    from ..vendorlib import load as load_vendor

    return load_vendor(LIBRARIES, Library, vendor, env, opener)


__all__ = ["TABLE", "BY_NAME", "Entry", "H", "pH", "TYPES", "DIRECTION", "STATUS", "FftError",
           "Library", "load", "make_check", "rows_for", "symbols"]
