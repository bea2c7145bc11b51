"""GEMM through hipBLASLt (AMD) or cuBLASLt (the NVIDIA test GPU): one engine, two
vendor constant sets.

Everything is column-major here (``Gemm`` in ``blas/__init__.py``): the row-major MLX
product is turned around by the launcher. Per distinct problem (shape, strides,
dtypes, pointer alignment) the matmul descriptor, the four layouts and the heuristic's
algorithm are built once and cached; one workspace from the device pool serves every
call (one stream: calls never overlap).

float32 runs with compute type 32F (never TF32 or XF32): MLX's CPU computes in true
fp32 and results must agree within fp32 tolerance. float16/bfloat16 accumulate in fp32
and take float alpha/beta; float64 computes in 64F; complex64 is a C GEMM in 32F.

The heuristic's first algorithm is not always the fastest (hipBLASLt's is known to miss
often; PyTorch's TunableOp exists for that). So the heuristic is asked for up to
``TUNE_CANDIDATES`` algorithms, and a problem that repeats (a replay records it: the graph
was seen twice) times them once on scratch operands and keeps the fastest
(``MLX_AMD_GEMM_TUNE``).
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import threading
import time

from ..driver.base import DriverUnavailable
from .. import switches
from . import table as T

# Per-vendor header values (cublasLt.h / library_types.h; hipblaslt.h / hipblas-common.h
# / hip/library_types.h). tools/check_hip_bindings.py compiles the HIP ones against the
# headers; cuBLASLt's are the documented ABI of CUDA 12 and 13.
VENDORS = {
    "cuda": {
        "dtype": {"float32": 0, "float64": 1, "float16": 2, "complex64": 4, "bfloat16": 14},
        "compute": {"32F": 68, "64F": 70},
        "op": {"N": 0, "T": 1},
        "desc": {"TRANSA": 3, "TRANSB": 4},
        "layout": {"BATCH_COUNT": 5, "STRIDED_BATCH_OFFSET": 6},
        "pref": {"MAX_WORKSPACE_BYTES": 1, "MIN_ALIGNMENT_A_BYTES": 5, "MIN_ALIGNMENT_B_BYTES": 6,
                 "MIN_ALIGNMENT_C_BYTES": 7, "MIN_ALIGNMENT_D_BYTES": 8},
        # sizeof(cublasLtMatmulAlgo_t), sizeof(cublasLtMatmulHeuristicResult_t) and the
        # offsets of workspaceSize and state in the latter
        "algo_bytes": 64, "result_bytes": 96, "ws_at": 64, "state_at": 72,
        "status": {0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED",
                   3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
                   8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
                   13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR",
                   15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR"},
        "not_supported": (15,),
        "workspace": 32 << 20,   # what cuBLASLt asks for on Hopper
    },
    "hip": {
        "dtype": {"float32": 0, "float64": 1, "float16": 2, "complex64": 4, "bfloat16": 14},
        "compute": {"32F": 2, "64F": 7},
        "op": {"N": 111, "T": 112},
        "desc": {"TRANSA": 0, "TRANSB": 1},
        "layout": {"BATCH_COUNT": 0, "STRIDED_BATCH_OFFSET": 1},
        "pref": {"MAX_WORKSPACE_BYTES": 1},
        "algo_bytes": 24, "result_bytes": 56, "ws_at": 24, "state_at": 32,
        "status": {0: "HIPBLAS_STATUS_SUCCESS", 1: "HIPBLAS_STATUS_NOT_INITIALIZED",
                   2: "HIPBLAS_STATUS_ALLOC_FAILED", 3: "HIPBLAS_STATUS_INVALID_VALUE",
                   4: "HIPBLAS_STATUS_MAPPING_ERROR", 5: "HIPBLAS_STATUS_EXECUTION_FAILED",
                   6: "HIPBLAS_STATUS_INTERNAL_ERROR", 7: "HIPBLAS_STATUS_NOT_SUPPORTED",
                   8: "HIPBLAS_STATUS_ARCH_MISMATCH", 9: "HIPBLAS_STATUS_HANDLE_IS_NULLPTR",
                   10: "HIPBLAS_STATUS_INVALID_ENUM", 11: "HIPBLAS_STATUS_UNKNOWN"},
        "not_supported": (7, 8),
        "workspace": 32 << 20,
    },
}

# Where hipBLASLt has kernels (ROCm 6.4) and for which types; elsewhere rocBLAS serves.
HIPBLASLT_ARCHS = frozenset({"gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1101", "gfx1151",
                             "gfx1200", "gfx1201"})
HIPBLASLT_DTYPES = frozenset({"float32", "float16", "bfloat16"})
CUBLASLT_DTYPES = frozenset({"float32", "float16", "bfloat16", "float64", "complex64"})

_HINTS = {
    "cuda": {15: "no cuBLASLt kernel for this type/layout/alignment", 7: "a size, stride or "
             "alignment the library refuses", 3: "the GPU is out of memory", 8: "this GPU is too old"},
    "hip": {7: "no hipBLASLt kernel for this type/arch: rocBLAS is the fallback", 3: "a size, "
            "stride or pointer the library refuses", 2: "the GPU is out of memory",
            8: "hipBLASLt was built without this arch"},
}


TUNE_ENV = "MLX_AMD_GEMM_TUNE"
TUNE_MODES = ("repeat", "always", "off")
TUNE_CANDIDATES = 8       # algorithms asked of the heuristic
TUNE_REPS = 3             # timed calls of each, after one warm-up call
TUNE_SKIP_US = 25.0       # the heuristic's choice runs faster than this: launch-bound, kept untimed
TUNE_SCRATCH = 256 << 20  # most bytes of scratch operands one timing takes from the pool
ITEM = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "complex64": 8}


def tune_mode(env=os.environ) -> str:
    """When to time the heuristic's candidates: ``repeat`` (default) when a replay records the
    problem, ``always`` at its first call too, ``off`` never (the heuristic's first)."""
    return switches.choice(TUNE_ENV, TUNE_MODES, "repeat", env)


def operand_bytes(dtype: str, rows: int, cols: int, ld: int, batch: int, stride: int) -> int:
    """Bytes a column-major (strided-batched) operand spans."""
    if rows == 0 or cols == 0 or batch == 0:
        return 0
    return ITEM[dtype] * (ld * (cols - 1) + rows + (batch - 1) * stride)


class NotSupported(Exception):
    """The library has no algorithm for this problem: the next engine (or our kernel) runs it."""


@functools.lru_cache(maxsize=64)
def scalar_bytes(dtype: str, value: float) -> bytes:
    """alpha/beta in the scale type: float for f32/f16/bf16, double for f64, (re, im) floats for c64."""
    if dtype == "float64":
        return bytes(ctypes.c_double(value))
    if dtype == "complex64":
        return bytes((ctypes.c_float * 2)(value, 0.0))
    return bytes(ctypes.c_float(value))


def alignment(ptr: int) -> int:
    return min(256, ptr & -ptr) if ptr else 256


class _Problem:
    """The cached library objects of one problem; destroyed with the engine."""

    __slots__ = ("desc", "layouts", "algo", "ws", "cands", "tuned")


class LtEngine:
    name = "lt"

    def __init__(self, driver, pool, lib=None):
        self.vendor = "cuda" if driver.platform == "nvidia" else "hip"
        self.k = VENDORS[self.vendor]
        self.lib = lib or T.load("lt", self.vendor)
        self.check = T.make_check(self.lib, self._describe, lambda s: _HINTS[self.vendor].get(s, ""))
        self.pool, self.driver = pool, driver
        h = ctypes.c_void_p()
        driver.synchronize()            # binds the device's context in this thread
        self.check(self.lib.lt_create(ctypes.byref(h)), "lt_create", "&handle")
        self.handle = h
        self.problems: dict = {}
        self.tune = tune_mode()
        self.tunings: list = []          # (Gemm, aligns, ms per candidate or None, chosen, seconds)
        self.ws_block = None
        self.lock = threading.Lock()
        self.alive = ctypes.c_int32(1)   # read by native replay steps (native); 0 once closed

    def _describe(self, status: int) -> tuple:
        name = self.k["status"].get(status, f"status {status}")
        msg = ""
        if self.vendor == "cuda":
            try:
                s = self.lib.lt_status_string(status)
                msg = s.decode(errors="replace") if s else ""
            except (DriverUnavailable, AttributeError):
                pass
        return name, msg or name

    def supports(self, dtype: str, arch: str) -> bool:
        if self.vendor == "cuda":
            return dtype in CUBLASLT_DTYPES
        return dtype in HIPBLASLT_DTYPES and arch.split(":")[0] in HIPBLASLT_ARCHS

    def _workspace(self) -> tuple:
        if self.ws_block is None:
            self.ws_block = self.pool.alloc(self.k["workspace"])
        return self.ws_block.data, self.k["workspace"]

    def _set(self, fn: str, obj, attr: str, group: str, value) -> None:
        v = value if isinstance(value, ctypes._SimpleCData) else ctypes.c_int32(value)
        self.check(getattr(self.lib, fn)(obj, self.k[group][attr], ctypes.byref(v), ctypes.sizeof(v)),
                   fn, obj, f"{group.upper()}_{attr}", v.value)

    def _layout(self, dtype, rows, cols, ld, batch, stride):
        lay = ctypes.c_void_p()
        self.check(self.lib.lt_layout_create(ctypes.byref(lay), self.k["dtype"][dtype], rows, cols, ld),
                   "lt_layout_create", "&layout", dtype, rows, cols, ld)
        if batch > 1:
            self._set("lt_layout_set", lay, "BATCH_COUNT", "layout", ctypes.c_int32(batch))
            self._set("lt_layout_set", lay, "STRIDED_BATCH_OFFSET", "layout", ctypes.c_int64(stride))
        return lay

    def _problem(self, g, aligns) -> _Problem:
        key = (g.key(), aligns)
        p = self.problems.get(key)
        if p is not None:
            if p is NotSupported:
                raise NotSupported(f"{self.lib.path}: no algorithm for {g}")
            return p
        k = self.k
        compute = k["compute"]["64F" if g.dtype == "float64" else "32F"]
        scale = k["dtype"]["float64" if g.dtype == "float64" else "complex64" if g.dtype == "complex64"
                           else "float32"]
        p = _Problem()
        desc = ctypes.c_void_p()
        self.check(self.lib.lt_desc_create(ctypes.byref(desc), compute, scale), "lt_desc_create",
                   "&desc", compute, scale)
        p.desc = desc
        self._set("lt_desc_set", desc, "TRANSA", "desc", k["op"]["T" if g.trans_a else "N"])
        self._set("lt_desc_set", desc, "TRANSB", "desc", k["op"]["T" if g.trans_b else "N"])
        ar, ac = (g.k, g.m) if g.trans_a else (g.m, g.k)
        br, bc = (g.n, g.k) if g.trans_b else (g.k, g.n)
        la = self._layout(g.dtype, ar, ac, g.lda, g.batch, g.stride_a)
        lb = self._layout(g.dtype, br, bc, g.ldb, g.batch, g.stride_b)
        lc = self._layout(g.dtype, g.m, g.n, g.ldc, g.batch, g.stride_c)
        p.layouts = (la, lb, lc)
        pref = ctypes.c_void_p()
        self.check(self.lib.lt_pref_create(ctypes.byref(pref)), "lt_pref_create", "&pref")
        try:
            _, wsize = self._workspace()
            self._set("lt_pref_set", pref, "MAX_WORKSPACE_BYTES", "pref", ctypes.c_uint64(wsize))
            if "MIN_ALIGNMENT_A_BYTES" in k["pref"]:
                for which, al in zip("ABCD", aligns):
                    self._set("lt_pref_set", pref, f"MIN_ALIGNMENT_{which}_BYTES", "pref", ctypes.c_uint32(al))
            want = 1 if self.tune == "off" else TUNE_CANDIDATES
            result = ctypes.create_string_buffer(k["result_bytes"] * want)
            count = ctypes.c_int(0)
            status = self.lib.lt_heuristic(self.handle, desc, la, lb, lc, lc, pref, want, result,
                                           ctypes.byref(count))
        finally:
            self.lib.lt_pref_destroy(pref)
        if status in k["not_supported"] or (status == 0 and count.value == 0):
            self._destroy(p)
            self.problems[key] = NotSupported
            raise NotSupported(f"{self.lib.path}: no algorithm for {g}")
        self.check(status, "lt_heuristic", self.handle, desc, "A", "B", "C", "D", "pref", want, "&result",
                   "&count")
        raw, rb, ab = result.raw, k["result_bytes"], k["algo_bytes"]
        p.cands = []
        for i in range(min(count.value, want)):
            r = raw[i * rb:(i + 1) * rb]
            if int.from_bytes(r[k["state_at"]:k["state_at"] + 4], "little", signed=True) != 0:
                continue     # the heuristic's own verdict on this candidate: unusable
            p.cands.append((ctypes.create_string_buffer(r[:ab], ab),
                            int.from_bytes(r[k["ws_at"]:k["ws_at"] + 8], "little")))
        if not p.cands:
            self._destroy(p)
            self.problems[key] = NotSupported
            raise NotSupported(f"{self.lib.path}: no usable algorithm for {g}")
        p.algo, p.ws = p.cands[0]
        p.tuned = len(p.cands) < 2
        self.problems[key] = p
        return p

    def _tune(self, g, p, aligns) -> None:
        """Time each candidate of ``p`` on scratch operands (the real ones may alias: C == D
        with beta != 0) and keep the fastest. Once per problem; the device is synchronized
        first so the timings are of these calls alone. No scratch (too large, or the pool is
        out of memory): the heuristic's first stays."""
        p.tuned = True
        ar, ac = (g.k, g.m) if g.trans_a else (g.m, g.k)
        br, bc = (g.n, g.k) if g.trans_b else (g.k, g.n)
        sizes = (operand_bytes(g.dtype, ar, ac, g.lda, g.batch, g.stride_a),
                 operand_bytes(g.dtype, br, bc, g.ldb, g.batch, g.stride_b),
                 operand_bytes(g.dtype, g.m, g.n, g.ldc, g.batch, g.stride_c))
        if sum(sizes) > TUNE_SCRATCH or 0 in sizes:
            self.tunings.append((g, aligns, None, 0, 0.0))
            return
        t0 = time.perf_counter()
        drv, blocks, events = self.driver, [], []
        try:
            for n in sizes:
                blocks.append(self.pool.alloc(n))
        except MemoryError:
            for b in blocks:
                self.pool.free(b)
            self.tunings.append((g, aligns, None, 0, 0.0))
            return
        try:
            events = [drv.event_create(), drv.event_create()]
            for blk, n in zip(blocks, sizes):   # finite, non-zero values (zeros flatter some kernels)
                drv.memset(blk.data, 0x3C, n)
            drv.synchronize()
            a, b, d = (blk.data for blk in blocks)
            ws, wsize = self._workspace()
            alpha, beta = scalar_bytes(g.dtype, g.alpha), scalar_bytes(g.dtype, g.beta)
            la, lb, lc = p.layouts
            times = []
            for algo, need in p.cands:
                def call():
                    return self.lib.lt_matmul(self.handle, p.desc, alpha, a, la, b, lb, beta, d, lc, d, lc,
                                              algo, ws if need else None, min(need, wsize), None)
                if call():            # the warm-up; a candidate the library refuses is never chosen
                    times.append(math.inf)
                    continue
                drv.event_record(events[0], None)
                failed = any(call() for _ in range(TUNE_REPS))
                drv.event_record(events[1], None)
                drv.event_synchronize(events[1])
                times.append(math.inf if failed else drv.event_elapsed_ms(events[0], events[1]) / TUNE_REPS)
                if len(times) == 1 and times[0] * 1e3 < TUNE_SKIP_US:
                    break             # launch-bound: no candidate can win much
            best = min(range(len(times)), key=times.__getitem__)
            if times[best] < math.inf:
                p.algo, p.ws = p.cands[best]
            self.tunings.append((g, aligns, times, best, time.perf_counter() - t0))
        finally:
            drv.synchronize()          # the scratch is idle before it goes back to the pool
            for e in events:
                drv.event_destroy(e)
            for blk in blocks:
                self.pool.free(blk)

    def matmul(self, g, a: int, b: int, c: int, d: int, stream) -> None:
        """D = alpha * op(A) op(B) + beta * C for one strided batch (column-major ``g``)."""
        aligns = (alignment(a), alignment(b), alignment(c), alignment(d))
        with self.lock:
            p = self._problem(g, aligns)
            if not p.tuned and self.tune == "always":
                self._tune(g, p, aligns)
            ws, wsize = self._workspace()
            alpha, beta = scalar_bytes(g.dtype, g.alpha), scalar_bytes(g.dtype, g.beta)
            la, lb, lc = p.layouts
            st = self.lib.lt_matmul(self.handle, p.desc, alpha, a, la, b, lb, beta, c, lc, d, lc,
                                    p.algo, ws if p.ws else None, min(p.ws, wsize), stream)
            if st:     # the message's arguments only on failure: a prefill makes ~140 calls
                self.check(st, "lt_matmul", self.handle, "desc", g.alpha, hex(a), "A", hex(b), "B", g.beta,
                           hex(c), "C", hex(d), "D", "algo", "workspace", p.ws, stream)

    def native(self, g, aligns) -> tuple:
        """What a replay needs to call the library itself for problem ``g`` at addresses of
        at least ``aligns`` (A, B, C, D as the library names them): the fields of the
        bridge's native library step before its jobs (replay.h, PLibCall). NotSupported
        as matmul raises it."""
        with self.lock:
            p = self._problem(g, aligns)
            if not p.tuned and self.tune != "off":
                self._tune(g, p, aligns)     # a replay records it: the problem repeats
            ws, wsize = self._workspace()
        fn = ctypes.cast(self.lib.lt_matmul, ctypes.c_void_p).value
        la, lb, lc = p.layouts
        return (fn, self.handle.value, p.desc.value, la.value, lb.value, lc.value, ws if p.ws else 0,
                min(p.ws, wsize) if p.ws else 0, scalar_bytes(g.dtype, g.alpha), scalar_bytes(g.dtype, g.beta),
                p.algo.raw, (aligns[0], aligns[1], min(aligns[2], aligns[3])), ctypes.addressof(self.alive))

    def _destroy(self, p) -> None:
        for lay in getattr(p, "layouts", ()):
            self.lib.lt_layout_destroy(lay)
        if getattr(p, "desc", None):
            self.lib.lt_desc_destroy(p.desc)

    def close(self) -> None:
        self.alive.value = 0
        for p in self.problems.values():
            if p is not NotSupported:
                self._destroy(p)
        self.problems.clear()
        if self.ws_block is not None:
            self.pool.free(self.ws_block)
            self.ws_block = None
        if self.handle.value:
            self.lib.lt_destroy(self.handle)
            self.handle = ctypes.c_void_p()
