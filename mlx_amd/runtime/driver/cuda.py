"""The CUDA driver: libcuda's driver API over ctypes (the NVIDIA test platform).

It runs the same kernel sources, compiled by nvcc, on the H200 test machine. No
CUDA runtime library is involved: contexts are the devices' primary contexts, and
the "runtime version" is the driver API version. Constants below are ``cuda.h``
values; ``tests/driver/test_table.py`` checks them against an installed ``cuda.h``.
"""

from __future__ import annotations

import ctypes
import os
from typing import Callable, Mapping

from .base import CudaError, DeviceProperties, DriverUnavailable
from .table import Library, TableDriver, _drained, _size, loaded_path, open_library

LIBRARY_NAMES = ("libcuda.so.1", "libcuda.so")

LAUNCH_PARAM_END = 0                 # CU_LAUNCH_PARAM_END (HIP's END is 3)
ERROR_NO_DEVICE = 100                # CUDA_ERROR_NO_DEVICE

# CUdevice_attribute values, by DeviceProperties field (plus the compute capability).
ATTRIBUTES = {
    "max_threads_per_block": ("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK", 1),
    "max_shared_memory_per_block": ("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK", 8),
    "wave_size": ("CU_DEVICE_ATTRIBUTE_WARP_SIZE", 10),
    "clock_khz": ("CU_DEVICE_ATTRIBUTE_CLOCK_RATE", 13),
    "compute_units": ("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT", 16),
    "integrated": ("CU_DEVICE_ATTRIBUTE_INTEGRATED", 18),
    "memory_clock_khz": ("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE", 36),
    "memory_bus_width": ("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH", 37),
    "l2_cache_size": ("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE", 38),
    "cc_major": ("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR", 75),
    "cc_minor": ("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR", 76),
    "managed_memory": ("CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY", 83),
}

CONSTANTS = {
    "CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT": 1,
    "CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT": 2,
    "CU_LAUNCH_PARAM_END_AS_INT": LAUNCH_PARAM_END,
    "CUDA_ERROR_NO_DEVICE": ERROR_NO_DEVICE,
    "CUDA_ERROR_NOT_READY": 600,
    "CU_EVENT_DISABLE_TIMING": 2,
    "CU_MEM_ATTACH_GLOBAL": 1,
}


def format_version(v: int) -> str:
    """cuDriverGetVersion encoding: 1000 * major + 10 * minor."""
    return f"{v // 1000}.{v % 1000 // 10}"


# CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h): size and byte offsets of the fields the graph
# executor fills; grid and block are three consecutive unsigned ints each. The v1 struct
# is its prefix. tests/driver/test_table.py checks these against cuda.h.
KERNEL_NODE_PARAMS = ("CUDA_KERNEL_NODE_PARAMS_v2", {
    "func": ("func", 0), "grid": ("gridDimX", 8), "block": ("blockDimX", 20),
    "shared_mem": ("sharedMemBytes", 32), "kernel_params": ("kernelParams", 40),
    "extra": ("extra", 48)}, 72)


class CudaDriver(TableDriver):
    name = "cuda"
    platform = "nvidia"
    vendor = "cuda"
    error_class = CudaError
    launch_param_end = LAUNCH_PARAM_END
    kernel_node_layout = {k: off for k, (_, off) in KERNEL_NODE_PARAMS[1].items()} | {"size": KERNEL_NODE_PARAMS[2]}
    error_no_device = ERROR_NO_DEVICE
    init_no_device = (ERROR_NO_DEVICE,)
    attributes = ATTRIBUTES
    format_version = staticmethod(format_version)

    def __init__(self, env: Mapping[str, str] = os.environ, opener: Callable = ctypes.CDLL):
        cdll, path, tried = self._open(env, opener)
        super().__init__(Library(cdll, "cuda", path), tried)
        self._init_status = self.lib.init(0)
        self._contexts: dict[int, ctypes.c_void_p] = {}

    @staticmethod
    def _open(env: Mapping[str, str], opener: Callable) -> tuple:
        """(cdll, path, tried) of the library implementing the CUDA column of the table."""
        # libcuda belongs to the kernel driver's install: only the loader's search applies
        cdll, path, tried = open_library((), LIBRARY_NAMES, opener)
        if cdll is None:
            raise DriverUnavailable("CUDA driver (libcuda.so.1) not found: no NVIDIA driver installed", tried)
        if not os.path.isabs(path):
            path = loaded_path("libcuda.so") or path
        return cdll, path, tried

    def _cu_device(self, ordinal: int) -> int:
        d = ctypes.c_int()
        self.check(self.lib.device_get(ctypes.byref(d), ordinal), "device_get", "&device", ordinal)
        return d.value

    def _device_handle(self) -> int:
        return self._cu_device(self._device)

    def _bind_thread(self) -> None:
        ctx = self._contexts.get(self._device)
        if ctx is None:
            self.device_count()      # raises the cuInit failure, if any
            ctx = ctypes.c_void_p()
            dev = self._cu_device(self._device)
            self.check(self.lib.primary_ctx_retain(ctypes.byref(ctx), dev), "primary_ctx_retain", "&ctx", dev)
            self._contexts[self._device] = ctx    # retained for the life of the process
        self.check(self.lib.ctx_set_current(ctx), "ctx_set_current", ctx)

    def _thread_bind(self) -> tuple:
        self._bind()
        return self.lib.ctx_set_current, self._contexts[self._device].value, False

    def error_string(self, code: int) -> tuple[str, str]:
        name, msg = ctypes.c_char_p(), ctypes.c_char_p()
        if self.lib.get_error_name_out(code, ctypes.byref(name)) or not name.value:
            return f"CUresult({code})", "unrecognized error code"
        if self.lib.get_error_string_out(code, ctypes.byref(msg)) or not msg.value:
            msg.value = b"unknown error"
        return name.value.decode(errors="replace"), msg.value.decode(errors="replace")

    # --- versions and devices ---------------------------------------------------------
    def runtime_version(self) -> str:
        return f"{self.driver_version()} (driver API version: no CUDA runtime library is used)"

    def properties(self, device: int = 0) -> DeviceProperties:
        device = self._check_device(device)
        dev = self._cu_device(device)
        name = ctypes.create_string_buffer(256)
        self.check(self.lib.device_get_name(name, 256, dev), "device_get_name", "&name", 256, dev)
        total = ctypes.c_size_t()
        self.check(self.lib.device_total_mem(ctypes.byref(total), dev), "device_total_mem", "&bytes", dev)
        bus = ctypes.create_string_buffer(64)
        self.check(self.lib.device_get_pci_bus_id(bus, 64, dev), "device_get_pci_bus_id", "&bus", 64, dev)
        a = {f: self._attribute(f, dev) for f in ATTRIBUTES}
        arch = f"sm_{a['cc_major']}{a['cc_minor']}"
        return DeviceProperties(
            index=device, name=name.value.decode(errors="replace"), arch=arch, arch_full=arch, features={},
            wave_size=a["wave_size"], compute_units=a["compute_units"], total_memory=total.value,
            integrated=bool(a["integrated"]), clock_khz=a["clock_khz"],
            memory_clock_khz=a["memory_clock_khz"], memory_bus_width=a["memory_bus_width"],
            l2_cache_size=a["l2_cache_size"], max_threads_per_block=a["max_threads_per_block"],
            max_shared_memory_per_block=a["max_shared_memory_per_block"],
            managed_memory=bool(a["managed_memory"]), pci_bus_id=bus.value.decode(errors="replace"))

    # --- copies whose direction the driver infers (unified addressing) -------------------
    @_drained
    def memcpy(self, dst: int, src: int, nbytes: int) -> None:
        if _size(nbytes) == 0:
            return
        self._bind()
        self.check(self.lib.memcpy_unified(dst, src, nbytes), "memcpy_unified", hex(dst), hex(src), nbytes)
        self.stream_synchronize(None)   # cuMemcpy may return before a device-side copy is done

    @_drained
    def memcpy_async(self, dst: int, src: int, nbytes: int, stream=None) -> None:
        if _size(nbytes) == 0:
            return
        self._bind()
        self.check(self.lib.memcpy_unified_async(dst, src, nbytes, stream),
                   "memcpy_unified_async", hex(dst), hex(src), nbytes, stream)
