"""The one driver interface the runtime talks to.

Two implementations look alike method for method: ``hip.HipDriver`` (libamdhip64)
and ``cuda.CudaDriver`` (libcuda, the NVIDIA test platform for the same kernels),
plus ``host.HostDriver``, a GPU-less stand-in whose memory is plain host memory
(CI runs the evaluator on it with every node on MLX's CPU fallback).

Nothing above this package imports ctypes or uses a ``hip``/``cu`` name: pointers
are plain ``int``s, handles are opaque objects owned by the driver.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence


class DriverError(RuntimeError):
    """A driver call failed: names the call, the vendor's error name, code and string.

    ``str(e)`` reads like ``hipMalloc(17179869184) -> hipErrorOutOfMemory (2): out of memory``.
    """

    def __init__(self, call: str, code: int, name: str, message: str):
        self.call, self.code, self.name, self.message = call, code, name, message
        super().__init__(f"{call} -> {name} ({code}): {message}")

    @property
    def out_of_memory(self) -> bool:
        return "OutOfMemory" in self.name or "OUT_OF_MEMORY" in self.name


class HipError(DriverError):
    pass


class CudaError(DriverError):
    pass


class DriverUnavailable(RuntimeError):
    """The vendor library could not be loaded or initialised; ``tried`` lists where we looked."""

    def __init__(self, message: str, tried: Sequence[str] = ()):
        self.tried = list(tried)
        super().__init__(message)


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    index: int
    name: str
    arch: str                 # "gfx1100", "gfx942", "sm_90" for the NVIDIA test GPU
    arch_full: str            # as reported: "gfx90a:sramecc+:xnack-"; "sm_90" on CUDA
    features: dict            # {"sramecc": True, "xnack": False}; {} on CUDA
    wave_size: int            # 32 (RDNA, NVIDIA) or 64 (CDNA)
    compute_units: int        # CUs / SMs
    total_memory: int         # bytes
    integrated: bool          # APU: host and device share one memory
    clock_khz: int
    memory_clock_khz: int
    memory_bus_width: int     # bits
    l2_cache_size: int        # bytes
    max_threads_per_block: int
    max_shared_memory_per_block: int
    managed_memory: bool      # supports managed/unified allocations
    pci_bus_id: str

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class Driver:
    """Abstract driver. All methods raise ``DriverError`` on failure.

    Memory calls take and return integer addresses. ``stream=None`` means the
    driver's default stream. Kernel arguments are passed as one packed ``bytes``
    blob laid out like the kernel's parameter list (see ``runtime/launch.py``);
    implementations hand it to the launch call through the vendor's
    "argument buffer" mechanism, so no per-argument pointer array is built.
    """

    name: str = "abstract"           # "hip", "cuda", "host"
    platform: str = "abstract"       # "amd", "nvidia", "host": selects the kernel target
    library_path: Optional[str] = None

    # --- versions and devices ---------------------------------------------
    def runtime_version(self) -> str: raise NotImplementedError
    def driver_version(self) -> str: raise NotImplementedError
    def device_count(self) -> int: raise NotImplementedError
    def properties(self, device: int = 0) -> DeviceProperties: raise NotImplementedError
    def set_device(self, device: int) -> None: raise NotImplementedError
    def current_device(self) -> int: raise NotImplementedError
    def mem_info(self) -> tuple[int, int]: raise NotImplementedError   # (free, total) bytes
    def synchronize(self) -> None: raise NotImplementedError            # whole device

    # --- streams and events -----------------------------------------------
    def stream_create(self) -> object: raise NotImplementedError
    def stream_destroy(self, stream) -> None: raise NotImplementedError
    def stream_synchronize(self, stream=None) -> None: raise NotImplementedError
    def event_create(self, timing: bool = True) -> object: raise NotImplementedError
    def event_destroy(self, event) -> None: raise NotImplementedError
    def event_record(self, event, stream=None) -> None: raise NotImplementedError
    def event_synchronize(self, event) -> None: raise NotImplementedError
    def event_query(self, event) -> bool: raise NotImplementedError     # True when complete
    def event_elapsed_ms(self, start, end) -> float: raise NotImplementedError
    def stream_wait_event(self, stream, event) -> None: raise NotImplementedError

    # --- memory -------------------------------------------------------------
    def malloc(self, nbytes: int) -> int: raise NotImplementedError
    def free(self, ptr: int) -> None: raise NotImplementedError
    def host_alloc(self, nbytes: int) -> int: raise NotImplementedError    # pinned
    def host_free(self, ptr: int) -> None: raise NotImplementedError
    def malloc_managed(self, nbytes: int) -> int: raise NotImplementedError
    # the stream-ordered allocator (drivers that have it say so)
    def async_alloc_supported(self) -> bool: return False
    def malloc_async(self, nbytes: int) -> int: raise NotImplementedError
    def free_async(self, ptr: int) -> None: raise NotImplementedError
    def memset(self, ptr: int, value: int, nbytes: int, stream=None) -> None: raise NotImplementedError
    # dst/src are device or host addresses; kind is inferred by the driver (unified addressing)
    def memcpy(self, dst: int, src: int, nbytes: int) -> None: raise NotImplementedError
    def memcpy_async(self, dst: int, src: int, nbytes: int, stream=None) -> None: raise NotImplementedError
    def memcpy_htod(self, dst: int, src: int, nbytes: int, stream=None) -> None: raise NotImplementedError
    def memcpy_dtoh(self, dst: int, src: int, nbytes: int, stream=None) -> None: raise NotImplementedError
    def memcpy_dtod(self, dst: int, src: int, nbytes: int, stream=None) -> None: raise NotImplementedError

    # plain CPU copy between host addresses, no driver call (staging small uploads)
    def host_copy(self, dst: int, src: int, nbytes: int) -> None: raise NotImplementedError

    # --- modules and launches ------------------------------------------------
    def module_load_data(self, image: bytes) -> object: raise NotImplementedError
    def module_unload(self, module) -> None: raise NotImplementedError
    def module_get_function(self, module, name: str) -> object: raise NotImplementedError
    def launch(self, function, grid: tuple, block: tuple, args: bytes,
               shared_mem: int = 0, stream=None) -> None: raise NotImplementedError
    # native launchers (runtime/launch.py NativeLauncher): the launch entry point's address
    # and LAUNCH_PARAM_END; per-thread device binding; the error a failed launch raises
    def launch_entry(self) -> tuple: raise NotImplementedError
    def graph_api(self): return None   # (entry addresses, kernel-node layout) where graphs exist
    def ensure_bound(self) -> None: raise NotImplementedError
    def launch_failed(self, status: int, function, grid, block, args, shared_mem, stream) -> None:
        raise NotImplementedError

    # --- errors -------------------------------------------------------------
    def error_string(self, code: int) -> tuple[str, str]: raise NotImplementedError  # (name, message)
