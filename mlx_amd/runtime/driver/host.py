"""A GPU-less driver: the whole ``base.Driver`` interface on plain host memory.

It lets CI run the memory pools, the residency manager and the evaluator (every
node on MLX's CPU fallback) on machines without a GPU. "Device" memory is host
memory here, so tests can check the contents of every copy directly.

It runs no kernels: loading a module or launching raises ``DriverError``.
Failures can be injected so out-of-memory paths are testable:
``HostDriver(capacity=n)`` makes device allocations fail once more than ``n``
bytes are live (freeing makes room again, like a real device), and
``HostDriver(fail_malloc_over=n)`` fails every device allocation larger than
``n`` bytes. Both raise a ``DriverError`` whose ``out_of_memory`` is True.
"""

from __future__ import annotations

import collections
import ctypes
import os
import time
from typing import Optional

from .base import DeviceProperties, Driver, DriverError

_ALIGN = 256  # what hipMalloc/cudaMalloc guarantee at least

_ERRORS = {
    0: ("hostSuccess", "no error"),
    1: ("hostErrorInvalidValue", "invalid argument"),
    2: ("hostErrorOutOfMemory", "out of memory"),
    101: ("hostErrorInvalidDevice", "invalid device ordinal"),
    200: ("hostErrorNoKernels", "the host driver runs no kernels"),
    400: ("hostErrorInvalidHandle", "invalid resource handle"),
    600: ("hostErrorNotRecorded", "event was never recorded"),
}

_libc = None


def _c():
    """libc, with the few functions we call typed (loaded on first use)."""
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
        lib.posix_memalign.restype = ctypes.c_int
        lib.free.argtypes = [ctypes.c_void_p]
        lib.free.restype = None
        _libc = lib
    return _libc


def host_memory_info() -> tuple[int, int]:
    """(available, total) bytes of system memory, from /proc/meminfo."""
    fields = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    fields[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    total = fields.get("MemTotal") or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return fields.get("MemAvailable", total), total


class _Handle:
    """A stream, event or nothing-else handle; events keep the time they were recorded."""

    __slots__ = ("kind", "time", "alive")

    def __init__(self, kind: str):
        self.kind, self.time, self.alive = kind, None, True


class HostDriver(Driver):
    name = "host"
    platform = "host"
    library_path = "libc"

    def __init__(self, capacity: Optional[int] = None, fail_malloc_over: Optional[int] = None):
        # both may be changed later by tests; None means "never fail"
        self.capacity = capacity
        self.fail_malloc_over = fail_malloc_over
        self._live: dict[int, tuple[int, str]] = {}   # ptr -> (nbytes, "device"|"host"|"managed")
        self._device_bytes = 0
        self.counters = collections.Counter()          # calls and bytes, for tests

    # --- errors -------------------------------------------------------------
    def error_string(self, code: int) -> tuple[str, str]:
        return _ERRORS.get(code, ("hostErrorUnknown", f"unknown error {code}"))

    def _fail(self, call: str, code: int, detail: str = ""):
        name, msg = self.error_string(code)
        raise DriverError(call, code, name, msg + (f": {detail}" if detail else ""))

    # --- versions and devices ---------------------------------------------
    def runtime_version(self) -> str:
        return "host"

    def driver_version(self) -> str:
        try:
            return os.confstr("CS_GNU_LIBC_VERSION") or "libc"
        except (ValueError, OSError):
            return "libc"

    def device_count(self) -> int:
        return 1

    def properties(self, device: int = 0) -> DeviceProperties:
        self._check_device("properties", device)
        avail, total = host_memory_info()
        if self.capacity is not None:
            total = self.capacity
        return DeviceProperties(
            index=0, name="host (no GPU)", arch="host", arch_full="host", features={},
            # Nominal values so that launch planning can be unit-tested here; the
            # host runs no kernels, and real devices report 32 or 64.
            wave_size=32, max_threads_per_block=1024, max_shared_memory_per_block=65536,
            compute_units=os.cpu_count() or 1, total_memory=total,
            integrated=True, managed_memory=True,
            clock_khz=0, memory_clock_khz=0, memory_bus_width=0, l2_cache_size=0,
            pci_bus_id="",
        )

    def _check_device(self, call: str, device: int):
        if device != 0:
            self._fail(f"{call}({device})", 101, "the host driver has one device, 0")

    def set_device(self, device: int) -> None:
        self._check_device("set_device", device)

    def current_device(self) -> int:
        return 0

    def mem_info(self) -> tuple[int, int]:
        if self.capacity is not None:
            return max(self.capacity - self._device_bytes, 0), self.capacity
        return host_memory_info()

    def synchronize(self) -> None:
        self.counters["synchronize"] += 1

    # --- streams and events (all work is synchronous here) -------------------
    def _handle(self, call: str, h, kind: str) -> _Handle:
        if not isinstance(h, _Handle) or h.kind != kind or not h.alive:
            self._fail(call, 400, f"not a live {kind}: {h!r}")
        return h

    def _stream(self, call: str, stream):
        if stream is not None:
            self._handle(call, stream, "stream")

    def stream_create(self) -> object:
        return _Handle("stream")

    def stream_destroy(self, stream) -> None:
        self._handle("stream_destroy", stream, "stream").alive = False

    def stream_synchronize(self, stream=None) -> None:
        self._stream("stream_synchronize", stream)
        self.counters["stream_synchronize"] += 1

    def event_create(self, timing: bool = True) -> object:
        return _Handle("event")

    def event_destroy(self, event) -> None:
        self._handle("event_destroy", event, "event").alive = False

    def event_record(self, event, stream=None) -> None:
        self._stream("event_record", stream)
        self._handle("event_record", event, "event").time = time.perf_counter()

    def event_synchronize(self, event) -> None:
        self._handle("event_synchronize", event, "event")

    def event_query(self, event) -> bool:
        self._handle("event_query", event, "event")
        return True

    def event_elapsed_ms(self, start, end) -> float:
        a = self._handle("event_elapsed_ms", start, "event")
        b = self._handle("event_elapsed_ms", end, "event")
        if a.time is None or b.time is None:
            self._fail("event_elapsed_ms", 600)
        return (b.time - a.time) * 1e3

    def stream_wait_event(self, stream, event) -> None:
        self._stream("stream_wait_event", stream)
        self._handle("stream_wait_event", event, "event")

    # --- memory -------------------------------------------------------------
    def _alloc(self, call: str, nbytes: int, kind: str) -> int:
        if not isinstance(nbytes, int) or nbytes < 0:
            self._fail(f"{call}({nbytes!r})", 1, "size must be a non-negative int")
        if kind != "host":
            if self.fail_malloc_over is not None and nbytes > self.fail_malloc_over:
                self._fail(f"{call}({nbytes})", 2, f"injected: requests over {self.fail_malloc_over} bytes fail")
            if self.capacity is not None and self._device_bytes + nbytes > self.capacity:
                self._fail(f"{call}({nbytes})", 2,
                           f"{self._device_bytes} of {self.capacity} bytes in use")
        p = ctypes.c_void_p()
        rc = _c().posix_memalign(ctypes.byref(p), _ALIGN, max(nbytes, 1))
        if rc != 0 or not p.value:
            self._fail(f"{call}({nbytes})", 2, os.strerror(rc) if rc else "")
        self._live[p.value] = (nbytes, kind)
        if kind != "host":
            self._device_bytes += nbytes
        self.counters[call] += 1
        return p.value

    def _release(self, call: str, ptr: int, kinds: tuple) -> None:
        entry = self._live.get(ptr)
        if entry is None or entry[1] not in kinds:
            self._fail(f"{call}({ptr:#x})" if isinstance(ptr, int) else f"{call}({ptr!r})", 1,
                       f"not a live {'/'.join(kinds)} allocation of this driver")
        del self._live[ptr]
        if entry[1] != "host":
            self._device_bytes -= entry[0]
        _c().free(ptr)
        self.counters[call] += 1

    def malloc(self, nbytes: int) -> int:
        return self._alloc("malloc", nbytes, "device")

    def free(self, ptr: int) -> None:
        self._release("free", ptr, ("device", "managed"))

    def host_alloc(self, nbytes: int) -> int:
        return self._alloc("host_alloc", nbytes, "host")

    def host_free(self, ptr: int) -> None:
        self._release("host_free", ptr, ("host",))

    def malloc_managed(self, nbytes: int) -> int:
        return self._alloc("malloc_managed", nbytes, "managed")

    def live_allocations(self) -> int:
        return len(self._live)

    def _args(self, call: str, nbytes: int, *ptrs: int):
        # Addresses cannot be fully validated (MLX's own host memory is not ours),
        # but null pointers and bad sizes are refused rather than crashing.
        if not isinstance(nbytes, int) or nbytes < 0:
            self._fail(f"{call}(nbytes={nbytes!r})", 1, "size must be a non-negative int")
        if nbytes and any(not isinstance(p, int) or p <= 0 for p in ptrs):
            self._fail(f"{call}({', '.join(map(repr, ptrs))}, {nbytes})", 1, "null or invalid address")

    def memset(self, ptr: int, value: int, nbytes: int, stream=None) -> None:
        self._args("memset", nbytes, ptr)
        self._stream("memset", stream)
        if nbytes:
            ctypes.memset(ptr, value & 0xFF, nbytes)

    def _copy(self, call: str, dst: int, src: int, nbytes: int, stream=None) -> None:
        self._args(call, nbytes, dst, src)
        self._stream(call, stream)
        if nbytes:
            ctypes.memmove(dst, src, nbytes)
        self.counters[call] += 1
        self.counters[call + "_bytes"] += nbytes

    def memcpy(self, dst: int, src: int, nbytes: int) -> None:
        self._copy("memcpy", dst, src, nbytes)

    def host_copy(self, dst: int, src: int, nbytes: int) -> None:
        self._copy("host_copy", dst, src, nbytes)

    def memcpy_async(self, dst: int, src: int, nbytes: int, stream=None) -> None:
        self._copy("memcpy_async", dst, src, nbytes, stream)

    def memcpy_htod(self, dst: int, src: int, nbytes: int, stream=None) -> None:
        self._copy("memcpy_htod", dst, src, nbytes, stream)

    def memcpy_dtoh(self, dst: int, src: int, nbytes: int, stream=None) -> None:
        self._copy("memcpy_dtoh", dst, src, nbytes, stream)

    def memcpy_dtod(self, dst: int, src: int, nbytes: int, stream=None) -> None:
        self._copy("memcpy_dtod", dst, src, nbytes, stream)

    # --- modules and launches ------------------------------------------------
    def module_load_data(self, image: bytes) -> object:
        self._fail(f"module_load_data(<{len(image)} bytes>)", 200,
                   "no GPU; evaluate on MLX's CPU fallback instead")

    def module_unload(self, module) -> None:
        self._fail("module_unload", 200)

    def module_get_function(self, module, name: str) -> object:
        self._fail(f"module_get_function({name!r})", 200)

    def launch(self, function, grid: tuple, block: tuple, args: bytes,
               shared_mem: int = 0, stream=None) -> None:
        self._fail("launch", 200, "no GPU; evaluate on MLX's CPU fallback instead")
