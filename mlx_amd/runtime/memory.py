"""Caching memory pools for device and host buffers.

One pool class serves every kind of memory; the subclasses only choose the driver
calls and how many bytes sit in front of the data (a header):

- ``DevicePool``: ``driver.malloc`` (or ``malloc_managed``), data at the block start.
- ``HostPool``: host buffers that MLX will own. MLX's CPU build keeps an 8-byte size
  header right before the data, so each block has a 256-byte header in front and
  ``block.data = block.ptr + 256`` stays 256-byte aligned. Pinned memory
  (``driver.host_alloc``) on discrete GPUs, managed memory in unified mode.

Size classes: requests up to 1 MiB round up to a power of two (256 B minimum, so
every block is 256-byte aligned and small sizes share few classes); larger ones
round up to whole 2 MiB pages, the granularity at which both ROCr and the CUDA
driver map large device allocations, so the rounding costs no physical memory and
makes blocks interchangeable. A cached block is reused for the smallest class that
fits (best fit) but never for a request less than half its size; cached blocks are
released least recently cached first when the cache exceeds its limit.

Classes up to ``SLAB_MAX`` are slots of ``SLAB_BYTES`` slabs, one driver allocation
shared by the blocks of one class: releasing such a block frees its slot, and the slab
goes back to the driver once no slot is in use. The free slots of slabs still in use
(``slack``) are memory held from the driver that is neither active nor cache, so
``clear_cache`` leaves the cache empty as MLX documents while a slab whose other
slots hold live arrays stays. mlx-lm clears the cache after every prefill chunk; one
driver call per small block to fill it again cost ~10 ms a llama-1b prefill.

The pools are not thread-safe: the evaluator's thread owns them.
"""

from __future__ import annotations

import ctypes
import os
import sys
import weakref
from typing import Callable, Optional

from .driver.base import DriverError
from .driver.host import host_memory_info

MIN_BLOCK = 256
SMALL_MAX = 1 << 20          # up to here: powers of two
LARGE_PAGE = 2 << 20         # above: multiples of this
SLAB_MAX = 512 << 10         # classes up to here are slots of a slab (src/bridge/pool.cpp)
SLAB_BYTES = LARGE_PAGE      # one slab
HOST_HEADER = 256            # bytes in front of host data; MLX's size header sits at data - 8

# Default memory limit as a fraction of the memory the pool draws on. A discrete GPU's
# memory is ours apart from what vendor libraries (GEMM workspaces) and the driver take;
# unified memory is shared with the OS and with MLX's own CPU allocations.
DISCRETE_FRACTION = 0.90
SHARED_FRACTION = 0.75


_PROT_RW = 0x1 | 0x2                     # PROT_READ | PROT_WRITE (Linux)
_MAP_ANON_PRIVATE = 0x02 | 0x20          # MAP_PRIVATE | MAP_ANONYMOUS (Linux)
_MAP_FAILED = ctypes.c_void_p(-1).value


def _libc_mmap():
    """libc with mmap/munmap prototypes, or None where there is none (then large host
    blocks stay pinned)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        return libc if sys.platform.startswith("linux") else None
    except (OSError, AttributeError):
        return None


def round_size(n: int) -> int:
    """The size class of an ``n``-byte request."""
    if n <= MIN_BLOCK:
        return MIN_BLOCK
    if n <= SMALL_MAX:
        return 1 << (n - 1).bit_length()
    return -(-n // LARGE_PAGE) * LARGE_PAGE


def fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


class Block:
    """One allocation: ``ptr`` from the driver, ``size`` its class, ``data`` where the
    caller's bytes start (``ptr`` plus the pool's header), ``requested`` the caller's size."""

    __slots__ = ("ptr", "size", "requested", "data", "pool", "live")

    def __init__(self, ptr: int, size: int, requested: int, data: int, pool):
        self.ptr, self.size, self.requested, self.data = ptr, size, requested, data
        self.pool, self.live = pool, True

    def __repr__(self):
        return f"Block(data={self.data:#x}, size={self.size}, requested={self.requested}, live={self.live})"


class Pool:
    """A caching allocator over a pair of driver calls (see the module docstring).

    The bookkeeping (bins, cache order, counters) is native (``_bridge.Pool``,
    src/bridge/pool.h) so that a replay allocates and recycles its outputs without
    Python; the policy that needs the driver (the limit, the allocation itself, the
    out-of-memory retry and error) stays here, in ``_miss``."""

    kind = "memory"
    header = 0

    def __init__(self, alloc: Callable[[int], int], free: Callable[[int], None],
                 mem_info: Callable[[], tuple], limit: Optional[int] = None):
        from . import bridge as _bridge

        self._raw_alloc, self._mem_info = alloc, mem_info
        if limit is None:
            limit = int(mem_info()[1] * DISCRETE_FRACTION)
        me = weakref.ref(self)   # the core's callback must not keep the pool alive

        def miss(nbytes, size):
            return me()._miss(nbytes, size)

        # (MLX's default cache limit: the cache may grow to the memory limit)
        self.core = _bridge.Pool(self.header, miss, free, int(limit))
        self._oom_retries = 0

    @property
    def counts(self) -> dict:
        c = self.core
        return {"driver_allocs": c.driver_allocs, "driver_frees": c.driver_frees, "hits": c.hits,
                "misses": c.misses, "oom_retries": self._oom_retries}

    # --- allocation -----------------------------------------------------------
    def alloc(self, nbytes: int) -> Block:
        if type(nbytes) is not int:
            if not hasattr(nbytes, "__index__") or isinstance(nbytes, bool):
                raise TypeError(f"{self.kind} allocation size must be an int, got {type(nbytes).__name__}")
            nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"{self.kind} allocation size must be >= 0, got {nbytes}")
        data, size = self.core.alloc(nbytes)
        return Block(data - self.header, size, nbytes, data, self)

    def block(self, data: int, nbytes: int) -> Block:
        """The Block of a live allocation the native side made (a replay's output)."""
        return Block(data - self.header, self.core.size_of(data), nbytes, data, self)

    def _miss(self, nbytes: int, size: int) -> int:
        """No cached block fits: a new one (or a new slab, ``size`` SLAB_BYTES) from the
        driver, within the limit."""
        c = self.core
        held = c.active + c.cached + c.slack
        if held + size > c.limit:
            c.release(held + size - c.limit)
        if c.active + size > c.limit:
            raise self._oom(nbytes, size, "over the memory limit")
        try:
            return self._driver_alloc(nbytes, size)
        except DriverError as e:
            if not e.out_of_memory:
                raise
            self._oom_retries += 1
            self.clear_cache()
            self._settle()
            try:
                return self._driver_alloc(nbytes, size)
            except DriverError as e2:
                if not e2.out_of_memory:
                    raise
                raise self._oom(nbytes, size, str(e2)) from e2

    def _driver_alloc(self, nbytes: int, size: int) -> int:
        """``size`` bytes from the driver for a request of ``nbytes``."""
        return self._raw_alloc(size)

    def _settle(self) -> None:
        """After a release: make the released memory allocatable again (see DevicePool)."""

    def _oom(self, nbytes: int, size: int, why: str) -> MemoryError:
        try:
            free, total = self._mem_info()
            dev = f"{fmt_bytes(free)} free of {fmt_bytes(total)}"
        except DriverError:
            dev = "unknown"
        c = self.core
        what = "slab" if round_size(nbytes + self.header) <= SLAB_MAX else "block"
        return MemoryError(
            f"out of {self.kind} memory: cannot allocate {nbytes} bytes "
            f"({fmt_bytes(size)} {what}): {why}; pool holds {fmt_bytes(c.active)} active, "
            f"{fmt_bytes(c.cached)} cached, limit {fmt_bytes(c.limit)}; {self.kind}: {dev}")

    def free(self, blk: Block) -> None:
        """Return a block to the cache (or to the driver when caching is off)."""
        if getattr(blk, "pool", None) is not self or type(blk) is not Block:
            raise ValueError(f"{blk!r} was not allocated by this {self.kind} pool")
        if not blk.live:
            raise ValueError(f"double free of {blk!r}")
        blk.live = False
        self.core.free(blk.data)

    # --- MLX-named counters -----------------------------------------------------
    def get_active_memory(self) -> int:
        return self.core.active

    def get_peak_memory(self) -> int:
        return self.core.peak

    def reset_peak_memory(self) -> None:
        # the peak restarts from what is held now (MLX restarts from 0)
        self.core.peak = self.core.active

    def get_cache_memory(self) -> int:
        return self.core.cached

    def get_memory_limit(self) -> int:
        return self.core.limit

    def set_memory_limit(self, limit: int) -> int:
        """Cap on what the pool holds from the driver (active + cached + slack); returns the old one.
        Enforced at the next allocation, which first releases cache to fit."""
        old, self.core.limit = self.core.limit, _check_limit("memory", limit)
        return old

    def set_cache_limit(self, limit: int) -> int:
        c = self.core
        old, c.cache_limit = c.cache_limit, _check_limit("cache", limit)
        if c.cached > c.cache_limit:
            c.release(c.cached - c.cache_limit)
        return old

    def clear_cache(self) -> None:
        self.core.release(self.core.cached)

    def stats(self) -> dict:
        c = self.core
        return dict(self.counts, active=c.active, peak=c.peak, cache=c.cached, slack=c.slack,
                    limit=c.limit, cache_limit=c.cache_limit)


def _check_limit(what: str, limit) -> int:
    if isinstance(limit, bool) or not hasattr(limit, "__index__") or int(limit) < 0:
        raise ValueError(f"{what} limit must be a non-negative int, got {limit!r}")
    return int(limit)


def use_async_alloc(driver, env=os.environ) -> bool:
    """Whether device blocks come from the driver's stream-ordered allocator.

    ``MLX_AMD_ASYNC_ALLOC``: auto (default): on CUDA where the device has a default memory
    pool; off on HIP until it is measured on an AMD GPU (hipMallocAsync is in ROCm 6 but
    nothing here has run it on AMD hardware); 1: wherever the driver has it; 0: never."""
    mode = env.get("MLX_AMD_ASYNC_ALLOC", "auto").strip().lower()
    if mode not in ("auto", "0", "1"):
        raise ValueError(f"MLX_AMD_ASYNC_ALLOC={mode!r}: expected auto, 0 or 1")
    if mode == "0" or (mode == "auto" and getattr(driver, "platform", "") != "nvidia"):
        return False
    supported = getattr(driver, "async_alloc_supported", None)
    return bool(supported and supported())


class DevicePool(Pool):
    """Device memory: ``driver.malloc``, or ``malloc_managed`` when ``managed``.

    With the stream-ordered allocator (``use_async_alloc``), blocks are freed without the
    device-wide synchronisation and unmapping of a plain free: mlx-lm clears the cache
    after each prefill chunk, and on the H200 those frees and the allocations refilling
    the cache cost 2 ms of a llama-1b and 7 ms of a llama-8b time to first token. A freed
    block is reused by the driver for the next allocation at once and handed back to the
    system at the next synchronisation, so ``clear_cache`` still returns the memory."""

    kind = "device"

    def __init__(self, driver, managed: bool = False, limit: Optional[int] = None):
        self.async_alloc = not managed and use_async_alloc(driver)
        self._driver = driver
        if managed:
            alloc, free = driver.malloc_managed, driver.free
        elif self.async_alloc:
            alloc, free = driver.malloc_async, driver.free_async
        else:
            alloc, free = driver.malloc, driver.free
        if limit is None:
            limit = int(driver.mem_info()[1] * (SHARED_FRACTION if managed else DISCRETE_FRACTION))
        super().__init__(alloc, free, driver.mem_info, limit)

    def stats(self) -> dict:
        return dict(super().stats(), async_alloc=self.async_alloc)

    def _settle(self) -> None:
        if self.async_alloc:    # the frees complete and their memory leaves the driver's pool
            self._driver.synchronize()


class HostPool(Pool):
    """Buffers MLX will own: a 256-byte header before ``data`` for MLX's size header.

    ``managed=False``: host memory (discrete GPUs; limit from system memory), pinned for
    the slab classes; with ``pageable_large`` (lazy write-back), requests above
    ``SLAB_MAX`` get plain anonymous mappings instead. Those blocks are the host side of
    large device results (a prefill's activations, KV caches) that the host rarely reads:
    pinning costs ~0.7 ms per MB on the H200 (a llama-8b first replay spent ~100 ms
    there), a mapping costs nothing until a page is touched, and a read of such an array
    is a synchronous copy to pageable memory, which is correct, only slower per byte.
    ``pinned(nbytes)`` gives pinned memory of any size (the staging arena).
    ``managed=True``: one managed allocation that host and device both address
    (unified mode; limit from the device's memory, like ``DevicePool(managed=True)``).
    """

    kind = "host"
    header = HOST_HEADER

    def __init__(self, driver, managed: bool = False, limit: Optional[int] = None,
                 pageable_large: bool = False):
        self._driver = driver
        self._mapped: dict = {}             # address -> bytes of the anonymous mappings
        self._libc = _libc_mmap() if pageable_large and not managed else None
        if managed:
            self.kind = "unified"
            if limit is None:
                limit = int(driver.mem_info()[1] * SHARED_FRACTION)
            super().__init__(driver.malloc_managed, driver.free, driver.mem_info, limit)
        else:
            if limit is None:
                limit = int(host_memory_info()[1] * SHARED_FRACTION)
            mapped, libc, host_free = self._mapped, self._libc, driver.host_free

            def free(ptr):     # (no reference to the pool: the native core holds this)
                n = mapped.pop(ptr, None)
                if n is None:
                    host_free(ptr)
                elif libc.munmap(ctypes.c_void_p(ptr), ctypes.c_size_t(n)) != 0:
                    raise OSError(ctypes.get_errno(), f"munmap({ptr:#x}, {n}) failed")
            super().__init__(driver.host_alloc, free, host_memory_info, limit)

    def _driver_alloc(self, nbytes: int, size: int) -> int:
        if self._libc is None or nbytes <= SLAB_MAX:
            return self._raw_alloc(size)
        ptr = self._libc.mmap(None, ctypes.c_size_t(size), _PROT_RW, _MAP_ANON_PRIVATE, -1, 0)
        if ptr is None or ptr == _MAP_FAILED:
            raise self._oom(nbytes, size, f"mmap failed (errno {ctypes.get_errno()})")
        self._mapped[ptr] = size
        return ptr

    def pinned(self, nbytes: int) -> int:
        """Pinned host memory outside the pool (free with ``free_pinned``)."""
        return self._driver.host_alloc(nbytes)

    def free_pinned(self, ptr: int) -> None:
        self._driver.host_free(ptr)
