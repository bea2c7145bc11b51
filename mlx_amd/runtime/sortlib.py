"""The vendor's device-wide radix sort (hip_kernels/lib/sortlib.hip: hipCUB/rocPRIM on AMD,
CUB on the NVIDIA test GPU) for the long rows of Sort / ArgSort (ops/sort.py).

``get(arch)`` is the bound library for a device arch, or None where this build has none
(the emulator, generic AMD targets, archs rocPRIM lacks, MLX_AMD_LIBRARIES=none, or a
host where it does not load): planning then keeps our own radix passes.
"""

from __future__ import annotations

import ctypes
import threading

from . import modules

ABI = 1                 # MLXA_SORTLIB_ABI in sortlib.hip
NAME = "sortlib"


class SortLibError(RuntimeError):
    pass


class SortLib:
    def __init__(self, cdll):
        self.abi = cdll.mlxa_sortlib_abi
        self.abi.restype, self.abi.argtypes = ctypes.c_int, []
        f = cdll.mlxa_sort_pairs
        f.restype = ctypes.c_int
        f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                      ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                      ctypes.c_int64, ctypes.c_int, ctypes.c_void_p]
        self._pairs = f
        self._sizes: dict = {}
        self._lock = threading.Lock()

    def temp_bytes(self, key_bytes: int, value_bytes: int, n: int) -> int:
        """Temporary storage one sort of n pairs needs (asked of the library once per shape)."""
        k = (key_bytes, value_bytes, n)
        with self._lock:
            if k not in self._sizes:
                size = ctypes.c_size_t(0)
                rc = self._pairs(key_bytes, value_bytes, None, ctypes.byref(size), None, None, None, None,
                                 n, 8 * key_bytes, None)
                if rc:
                    raise SortLibError(f"mlxa_sort_pairs({key_bytes}, {value_bytes}, n={n}) size query "
                                       f"failed: status {rc}")
                self._sizes[k] = max(16, size.value)
            return self._sizes[k]

    def sort_pairs(self, key_bytes, value_bytes, temp, temp_bytes, k_in, k_out, v_in, v_out, n, stream):
        size = ctypes.c_size_t(temp_bytes)
        rc = self._pairs(key_bytes, value_bytes, temp, ctypes.byref(size), k_in, k_out, v_in, v_out,
                         n, 8 * key_bytes, stream)
        if rc:
            raise SortLibError(f"mlxa_sort_pairs({key_bytes}, {value_bytes}, n={n}) failed: status {rc}")


_bound: dict = {}       # the loaded library's handle -> its binding


def get(arch: str):
    """The bound library for ``arch``, or None."""
    cdll, _ = modules.library(NAME, arch)      # cached there, MLX_AMD_LIBRARIES checked there
    if cdll is None:
        return None
    if cdll._handle not in _bound:
        try:
            lib = SortLib(cdll)
            _bound[cdll._handle] = lib if lib.abi() == ABI else None
        except AttributeError:   # a library without our entry points
            _bound[cdll._handle] = None
    return _bound[cdll._handle]


def why_not(arch: str) -> str:
    """Why ``get(arch)`` is None ('' when it is not)."""
    if get(arch) is not None:
        return ""
    cdll, reason = modules.library(NAME, arch)
    return reason or "entry points or ABI do not match"
