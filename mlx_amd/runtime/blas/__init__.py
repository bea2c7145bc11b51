"""The one GEMM interface: ``run(ctx, gemm, a, b, c, d, stream)``.

Behind it, in order of preference for the device: hipBLASLt then rocBLAS on AMD,
cuBLASLt on the NVIDIA test GPU (``lt.py``, ``rocblas.py``; calls from the one binding
table in ``table.py``). ``run`` returns False when no library can take the problem (not
installed, no kernel for this type/arch/alignment): the caller then runs our own
portable kernel. A missing library is reported once, as a warning naming the package.

``Gemm`` is one column-major strided-batched problem, pure data (plans carry it):
D[m, n] = alpha * op(A) op(B) + beta * C, with C == D (ldc for both).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import warnings

from ..driver.base import DriverUnavailable
from .lt import NotSupported

ENV = "MLX_AMD_BLAS"   # "auto" (default), or "none": never use a vendor library


@dataclasses.dataclass(frozen=True)
class Gemm:
    dtype: str
    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    lda: int
    ldb: int
    ldc: int
    batch: int = 1
    stride_a: int = 0     # elements
    stride_b: int = 0
    stride_c: int = 0
    alpha: float = 1.0
    beta: float = 0.0

    def __post_init__(self):
        # the problem without alpha/beta (call arguments); built once: a prefill asks ~140
        # times and dataclasses.astuple costs ~45 us a call
        object.__setattr__(self, "_key", tuple(getattr(self, f.name) for f in dataclasses.fields(self)[:13]))

    def key(self) -> tuple:
        return self._key


_lock = threading.Lock()
_engines: dict = {}        # id(driver) -> (driver, {name: engine or the error it raised}, usable engines)
_warned: set = set()


def _factories(platform: str) -> list:
    if platform == "emu":    # no vendor library on the emulator: the portable kernels
        return []
    from .lt import LtEngine
    if platform == "nvidia":
        return [("lt", LtEngine)]
    from .rocblas import RocblasEngine
    return [("lt", LtEngine), ("rocblas", RocblasEngine)]


def _open(ctx) -> tuple:
    """Every engine of ctx's driver, or the error that kept it from opening (reported once)."""
    drv, made, usable = ctx.driver, {}, []
    for name, make in _factories(drv.platform):
        try:
            eng = make(drv, ctx.residency.device_pool)
        except DriverUnavailable as e:
            made[name] = e
            if name not in _warned:
                _warned.add(name)
                warnings.warn(f"mlx-amd: GEMM library unavailable, using the portable kernel: {e}",
                              RuntimeWarning, stacklevel=5)   # past engines, _candidates, run/native
            continue
        made[name] = eng
        usable.append(eng)
    return drv, made, usable


def engines(ctx) -> list:
    """The usable engines for ctx's driver, opened on its first use (missing ones skipped)."""
    drv = ctx.driver
    rec = _engines.get(id(drv))
    if rec is None or rec[0] is not drv:
        with _lock:
            rec = _engines.get(id(drv))
            if rec is None or rec[0] is not drv:
                rec = _engines[id(drv)] = _open(ctx)
    return rec[2]


def _candidates(ctx, dtype: str):
    """The engines that may take a ``dtype`` GEMM on ctx's device, in order of preference
    (none when MLX_AMD_BLAS=none)."""
    if os.environ.get(ENV, "auto") == "none":
        return
    arch = getattr(ctx.props, "arch", "")
    for eng in engines(ctx):
        if eng.supports(dtype, arch):
            yield eng


def run(ctx, g: Gemm, a: int, b: int, c: int, d: int, stream) -> bool:
    """Run ``g`` through the first library that takes it; False if none does."""
    for eng in _candidates(ctx, g.dtype):
        try:
            eng.matmul(g, a, b, c, d, stream)
            return True
        except NotSupported:
            continue
    return False


def native(ctx, g: Gemm, aligns: tuple):
    """(native-call fields (LtEngine.native), engine) of the library ``run`` would use for
    ``g`` at addresses aligned to ``aligns`` (A, B, C, D), or None when that library has no
    native form or none takes the problem (the replay then calls back into Python)."""
    for eng in _candidates(ctx, g.dtype):
        if not hasattr(eng, "native"):
            return None
        try:
            return eng.native(g, aligns), eng
        except NotSupported:
            continue
    return None


def tunings(ctx) -> list:
    """Every GEMM problem whose algorithm candidates were timed on ctx's device (lt.py,
    ``MLX_AMD_GEMM_TUNE``): the problem, ms per candidate in the heuristic's order (None:
    not timed, no scratch), the index kept and the seconds the timing took."""
    rec = _engines.get(id(ctx.driver))
    out = []
    for eng in (rec[2] if rec is not None and rec[0] is ctx.driver else ()):
        for g, aligns, times, best, secs in getattr(eng, "tunings", ()):
            out.append({"engine": eng.name, "gemm": g, "aligns": aligns, "ms": times, "chosen": best,
                        "seconds": secs})
    return out


def close_all() -> None:
    with _lock:
        for _, _, usable in _engines.values():
            for e in usable:
                e.close()
        _engines.clear()


__all__ = ["Gemm", "run", "native", "engines", "tunings", "close_all", "NotSupported"]
