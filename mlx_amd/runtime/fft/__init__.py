"""FFTs through the vendor library: hipFFT on AMD, cuFFT on the NVIDIA test GPU.

``Transform`` is one batched transform over the innermost dims of row-contiguous
buffers, pure data (plans carry it): ``kind`` "c2c" (``inverse`` picks the direction),
"r2c" or "c2r"; ``n`` the real-space lengths (1 to 3 of them, the innermost last);
``batch`` transforms one after the other. The libraries never scale: the caller does.

``run(ctx, t, src, dst, stream)`` executes it. Per distinct (kind, n, batch) the library
plan is made once (work-area allocation off) and cached in the engine; one work area from
the device pool serves every plan (one stream: executions never overlap), grown when a
plan needs more. ``available(vendor)`` says whether the library loads (planning declines
the node when it does not, so MLX's CPU fallback runs it); the missing library is named,
with its package, in a one-time warning.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses

from ..vendorlib import Engine, Lazy, PerDriver, vendor_of
from . import table as T

ENV = "MLX_AMD_FFT"      # "auto" (default) or "none": never plan FFTs on the GPU
MAX_PLANS = 64           # library plans kept per engine (each holds twiddles on the device)


@dataclasses.dataclass(frozen=True)
class Transform:
    kind: str              # "c2c", "r2c", "c2r"
    n: tuple               # real-space lengths, outermost first
    batch: int
    inverse: bool = False  # c2c only

    def key(self) -> tuple:
        return (self.kind, self.n, self.batch)


_libs = Lazy(T.load, ENV, "FFT library unavailable, FFTs run on the CPU")


# library(vendor): the loaded library (raises DriverUnavailable naming the package);
# available(vendor): whether FFT nodes may be planned (it loads, MLX_AMD_FFT is not "none")
library, available = _libs.library, _libs.available


class FftEngine(Engine):
    def __init__(self, driver, pool, lib=None):
        super().__init__(driver, pool, lib, library, T.make_check)
        self.handle_t = T.HANDLE_TYPES[self.vendor][0]
        self.plans: collections.OrderedDict = collections.OrderedDict()   # key -> (handle, work bytes)

    def _plan(self, t: Transform):
        key = t.key()
        p = self.plans.get(key)
        if p is not None:
            self.plans.move_to_end(key)
            return p
        if len(self.plans) >= MAX_PLANS:
            self.driver.synchronize()   # the oldest plan may still be queued
            _, (old, _) = self.plans.popitem(last=False)
            self.lib.destroy(old)
        lib, check = self.lib, self.check
        h = self.handle_t()
        check(lib.create(ctypes.byref(h)), "create", "&plan")
        try:
            check(lib.set_auto_allocation(h, 0), "set_auto_allocation", h, 0)
            rank = len(t.n)
            n = (ctypes.c_longlong * rank)(*t.n)
            ws = ctypes.c_size_t(0)
            check(lib.make_plan_many64(h, rank, n, None, 1, 0, None, 1, 0, T.TYPES[t.kind], t.batch,
                                       ctypes.byref(ws)),
                  "make_plan_many64", h, rank, list(t.n), "NULL", 1, 0, "NULL", 1, 0, t.kind, t.batch, "&ws")
        except BaseException:
            lib.destroy(h)
            raise
        p = self.plans[key] = (h, int(ws.value))
        return p

    def execute(self, t: Transform, src: int, dst: int, stream) -> None:
        lib, check = self.lib, self.check
        with self.lock:
            h, need = self._plan(t)
            check(lib.set_stream(h, stream), "set_stream", h, stream)
            if need:
                ws = self.work.get(need)
                check(lib.set_work_area(h, ws), "set_work_area", h, hex(ws))
            if t.kind == "c2c":
                d = T.DIRECTION["inverse" if t.inverse else "forward"]
                check(lib.exec_c2c(h, src, dst, d), "exec_c2c", h, hex(src), hex(dst), d)
            elif t.kind == "r2c":
                check(lib.exec_r2c(h, src, dst), "exec_r2c", h, hex(src), hex(dst))
            else:
                check(lib.exec_c2r(h, src, dst), "exec_c2r", h, hex(src), hex(dst))

    def close(self) -> None:
        for h, _ in self.plans.values():
            self.lib.destroy(h)
        self.plans.clear()
        self.work.release()


_per_driver = PerDriver(FftEngine)
engine = _per_driver.get          # engine(ctx): the driver's FftEngine
close_all = _per_driver.close_all


def run(ctx, t: Transform, src: int, dst: int, stream) -> None:
    engine(ctx).execute(t, src, dst, stream)


__all__ = ["Transform", "run", "engine", "available", "library", "vendor_of", "close_all", "FftEngine"]
