"""GEMM through rocBLAS: the AMD fallback where hipBLASLt has no kernels (RDNA2 gfx1030,
gfx906/gfx908, ...) or no type (float64, complex64). Column-major ``Gemm`` as in lt.py;
``rocblas_gemm_strided_batched_ex`` takes every shape in one call (32-bit sizes)."""

from __future__ import annotations

import ctypes
import threading

from . import table as T
from .lt import NotSupported, scalar_bytes

# rocblas-types.h values
OP = {"N": 111, "T": 112}
DTYPE = {"float16": 150, "float32": 151, "float64": 152, "complex64": 154, "bfloat16": 168}
COMPUTE = {"float16": 151, "bfloat16": 151, "float32": 151, "float64": 152, "complex64": 154}
GEMM_ALGO_STANDARD = 0
STATUS = {0: "rocblas_status_success", 1: "rocblas_status_invalid_handle",
          2: "rocblas_status_not_implemented", 3: "rocblas_status_invalid_pointer",
          4: "rocblas_status_invalid_size", 5: "rocblas_status_memory_error",
          6: "rocblas_status_internal_error", 7: "rocblas_status_perf_degraded",
          8: "rocblas_status_size_query_mismatch", 9: "rocblas_status_size_increased",
          10: "rocblas_status_size_unchanged", 11: "rocblas_status_invalid_value",
          12: "rocblas_status_continue", 13: "rocblas_status_check_numerics_fail",
          14: "rocblas_status_excluded_from_build", 15: "rocblas_status_arch_mismatch"}
NOT_SUPPORTED = (2, 14, 15)
_HINTS = {14: "this rocBLAS build has no kernels for this GPU's arch",
          15: "this rocBLAS build has no kernels for this GPU's arch",
          5: "the GPU is out of memory", 4: "a size or leading dimension rocBLAS refuses"}
_I32 = 2**31 - 1


class RocblasEngine:
    name = "rocblas"

    def __init__(self, driver, pool, lib=None):
        self.lib = lib or T.load("rocblas", "hip")
        self.check = T.make_check(self.lib, self._describe, lambda s: _HINTS.get(s, ""))
        h = ctypes.c_void_p()
        driver.synchronize()
        self.check(self.lib.rb_create(ctypes.byref(h)), "rb_create", "&handle")
        self.handle, self.stream = h, object()
        self.lock = threading.Lock()

    def _describe(self, status: int) -> tuple:
        name = STATUS.get(status, f"rocblas_status {status}")
        try:
            s = self.lib.rb_status_string(status)
            return name, s.decode(errors="replace") if s else name
        except Exception:
            return name, name

    def supports(self, dtype: str, arch: str) -> bool:
        return dtype in DTYPE

    def matmul(self, g, a: int, b: int, c: int, d: int, stream) -> None:
        if max(g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.batch) > _I32:
            raise NotSupported("rocBLAS takes 32-bit sizes and leading dimensions")
        dt, ct = DTYPE[g.dtype], COMPUTE[g.dtype]
        alpha, beta = scalar_bytes(g.dtype, g.alpha), scalar_bytes(g.dtype, g.beta)
        with self.lock:
            if stream is not self.stream:
                self.check(self.lib.rb_set_stream(self.handle, stream), "rb_set_stream", self.handle, stream)
                self.stream = stream
            status = self.lib.rb_gemm_strided_batched_ex(
                self.handle, OP["T" if g.trans_a else "N"], OP["T" if g.trans_b else "N"],
                g.m, g.n, g.k, alpha, a, dt, g.lda, g.stride_a, b, dt, g.ldb, g.stride_b,
                beta, c, dt, g.ldc, g.stride_c, d, dt, g.ldc, g.stride_c, g.batch, ct,
                GEMM_ALGO_STANDARD, 0, 0)
            if status in NOT_SUPPORTED:
                raise NotSupported(f"rocBLAS: {STATUS.get(status, status)} for {g}")
            self.check(status, "rb_gemm_strided_batched_ex", self.handle, g.trans_a, g.trans_b, g.m, g.n,
                       g.k, g.alpha, hex(a), g.dtype, g.lda, g.stride_a, hex(b), g.dtype, g.ldb, g.stride_b,
                       g.beta, hex(c), g.dtype, g.ldc, g.stride_c, hex(d), g.dtype, g.ldc, g.stride_c, g.batch)

    def close(self) -> None:
        if self.handle.value:
            self.lib.rb_destroy(self.handle)
            self.handle = ctypes.c_void_p()
