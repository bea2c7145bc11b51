"""The HIP driver: libamdhip64 (ROCm 6.0 and newer; 5.7 where it costs nothing) over ctypes.

Constants below are the ROCm 6 header values; ``tools/check_hip_bindings.py``
compiles a small C program against Debian's ROCm 6.4 headers to verify every one
of them, the ``hipDeviceProp_t`` offsets and every table prototype.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
from typing import Callable, Mapping, Optional

from .base import DeviceProperties, DriverUnavailable, HipError
from .table import Library, TableDriver, _drained, _size, loaded_path, open_library

LIBRARY_NAMES = ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5")

LAUNCH_PARAM_END = 3                 # HIP_LAUNCH_PARAM_END (CUDA's END is 0)
MEMCPY_DEFAULT = 4                   # hipMemcpyDefault: direction from the addresses
ERROR_NO_DEVICE = 100                # hipErrorNoDevice

# hipDeviceAttribute_t values (ROCm 6; unchanged since 5.x), by DeviceProperties field.
ATTRIBUTES = {
    "clock_khz": ("hipDeviceAttributeClockRate", 5),
    "integrated": ("hipDeviceAttributeIntegrated", 16),
    "l2_cache_size": ("hipDeviceAttributeL2CacheSize", 19),
    "managed_memory": ("hipDeviceAttributeManagedMemory", 24),
    "max_threads_per_block": ("hipDeviceAttributeMaxThreadsPerBlock", 56),
    "memory_bus_width": ("hipDeviceAttributeMemoryBusWidth", 59),
    "memory_clock_khz": ("hipDeviceAttributeMemoryClockRate", 60),
    "compute_units": ("hipDeviceAttributeMultiprocessorCount", 63),
    "max_shared_memory_per_block": ("hipDeviceAttributeMaxSharedMemoryPerBlock", 74),
    "wave_size": ("hipDeviceAttributeWarpSize", 87),
}

# Other header constants the code relies on (checked like the attributes).
CONSTANTS = {
    "HIP_LAUNCH_PARAM_BUFFER_POINTER": 1,
    "HIP_LAUNCH_PARAM_BUFFER_SIZE": 2,
    "HIP_LAUNCH_PARAM_END": LAUNCH_PARAM_END,
    "hipMemcpyDefault": MEMCPY_DEFAULT,
    "hipErrorNoDevice": ERROR_NO_DEVICE,
    "hipErrorNotReady": 600,
    "hipEventDisableTiming": 2,
    "hipMemAttachGlobal": 1,
    "hipHostMallocDefault": 0,
}

# Only name and gcnArchName are read from hipDeviceProp_t (everything numeric comes
# from hipDeviceGetAttribute), so the struct is never declared here: per entry point,
# (struct type in the headers, offset of gcnArchName, sizeof). name is at offset 0 in
# both. R0000 is the layout of ROCm 5.x, which the plain symbol keeps serving in 6.x.
PROPS_LAYOUTS = {
    "hipGetDevicePropertiesR0600": ("hipDeviceProp_tR0600", 1160, 1472),
    "hipGetDeviceProperties": ("hipDeviceProp_tR0000", 396, 792),
}
PROPS_BUFFER = 4096                  # room to spare for any future growth
NAME_LEN = 256


def _version_key(path: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", os.path.basename(path)))


def search_dirs(env: Mapping[str, str] = os.environ, glob_fn: Callable = glob.glob) -> list[str]:
    """Folders searched before the loader path: $ROCM_PATH/lib, $HIP_PATH/lib, /opt/rocm*/lib.

    /opt/rocm (the system's chosen default, usually a link) comes first, then the
    versioned installs newest first.
    """
    dirs = [os.path.join(env[v], "lib") for v in ("ROCM_PATH", "HIP_PATH") if env.get(v)]
    roots = sorted(glob_fn("/opt/rocm*"), key=lambda p: (p != "/opt/rocm", [-x for x in _version_key(p)]))
    dirs += [os.path.join(r, "lib") for r in roots]
    seen, out = set(), []
    for d in dirs:
        key = os.path.realpath(d)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def parse_arch(full: str) -> tuple[str, dict]:
    """``gfx90a:sramecc+:xnack-`` -> (``gfx90a``, {"sramecc": True, "xnack": False})."""
    arch, *feats = full.strip().split(":")
    features = {}
    for f in feats:
        if f.endswith(("+", "-")):
            features[f[:-1]] = f.endswith("+")
    return arch, features


def format_version(v: int) -> str:
    """HIP_VERSION encoding: major * 10^7 + minor * 10^5 + patch."""
    return f"{v // 10_000_000}.{v // 100_000 % 100}.{v % 100_000}"


# hipKernelNodeParams (hip_runtime_api.h): size and byte offsets of the fields the graph
# executor fills (a dim3 is three unsigned ints). tools/check_hip_bindings.py checks these
# against ROCm's headers.
KERNEL_NODE_PARAMS = ("hipKernelNodeParams", {
    "block": ("blockDim", 0), "extra": ("extra", 16), "func": ("func", 24), "grid": ("gridDim", 32),
    "kernel_params": ("kernelParams", 48), "shared_mem": ("sharedMemBytes", 56)}, 64)


class HipDriver(TableDriver):
    name = "hip"
    platform = "amd"
    vendor = "hip"
    error_class = HipError
    launch_param_end = LAUNCH_PARAM_END
    kernel_node_layout = {k: off for k, (_, off) in KERNEL_NODE_PARAMS[1].items()} | {"size": KERNEL_NODE_PARAMS[2]}
    error_no_device = ERROR_NO_DEVICE
    # ROCm 5.x's hipInit answers hipErrorInvalidDevice (101) on a machine without an AMD GPU
    init_no_device = (ERROR_NO_DEVICE, 101)
    attributes = ATTRIBUTES
    format_version = staticmethod(format_version)

    def __init__(self, env: Mapping[str, str] = os.environ, opener: Callable = ctypes.CDLL):
        cdll, path, tried = open_library(search_dirs(env), LIBRARY_NAMES, opener)
        if cdll is None:
            raise DriverUnavailable(
                "HIP runtime (libamdhip64.so) not found; install ROCm 6.x or set ROCM_PATH", tried)
        if not os.path.isabs(path):
            path = loaded_path("libamdhip64") or path
        super().__init__(Library(cdll, "hip", path), tried)
        self._init_status = self.lib.init(0)
        self._props_fn: Optional[str] = None

    def _bind_thread(self) -> None:
        self.check(self.lib.set_device(self._device), "set_device", self._device)

    def _thread_bind(self) -> tuple:
        return self.lib.set_device, self._device, True

    def error_string(self, code: int) -> tuple[str, str]:
        name = self.lib.get_error_name(code)
        msg = self.lib.get_error_string(code)
        return (name.decode(errors="replace") if name else f"hipError{code}",
                msg.decode(errors="replace") if msg else "unknown error")

    # --- versions and devices ---------------------------------------------------------
    def runtime_version(self) -> str:
        v = ctypes.c_int()
        self.check(self.lib.runtime_get_version(ctypes.byref(v)), "runtime_get_version", "&version")
        return format_version(v.value)

    def rocm_version(self) -> Optional[str]:
        """The ROCm release, when the library sits in a ROCm tree that records it."""
        try:
            root = os.path.dirname(os.path.dirname(os.path.realpath(self.library_path)))
            with open(os.path.join(root, ".info", "version")) as f:
                return f.read().strip() or None
        except OSError:
            return None

    def _props_buffer(self, device: int) -> tuple[bytes, int]:
        """hipDeviceProp_t bytes and the offset of gcnArchName, through the newest entry point."""
        buf = ctypes.create_string_buffer(PROPS_BUFFER)
        if self._props_fn is None:
            try:
                self.lib.device_get_properties
                self._props_fn = "device_get_properties"
            except DriverUnavailable:       # ROCm 5.x: no versioned entry point yet
                self._props_fn = "device_get_properties_r0000"
        fn = self._props_fn
        self.check(getattr(self.lib, fn)(buf, device), fn, "&props", device)
        return buf.raw, PROPS_LAYOUTS[self.lib.resolved[fn]][1]

    def properties(self, device: int = 0) -> DeviceProperties:
        device = self._check_device(device)
        raw, arch_at = self._props_buffer(device)
        cstr = lambda b: b.split(b"\0", 1)[0].decode(errors="replace")
        arch_full = cstr(raw[arch_at:arch_at + NAME_LEN])
        arch, features = parse_arch(arch_full)
        total = ctypes.c_size_t()
        self.check(self.lib.device_total_mem(ctypes.byref(total), device), "device_total_mem", "&bytes", device)
        bus = ctypes.create_string_buffer(64)
        self.check(self.lib.device_get_pci_bus_id(bus, 64, device), "device_get_pci_bus_id", "&bus", 64, device)
        a = {f: self._attribute(f, device) for f in ATTRIBUTES}
        return DeviceProperties(
            index=device, name=cstr(raw[:NAME_LEN]), arch=arch, arch_full=arch_full, features=features,
            wave_size=a["wave_size"], compute_units=a["compute_units"], total_memory=total.value,
            integrated=bool(a["integrated"]), clock_khz=a["clock_khz"],
            memory_clock_khz=a["memory_clock_khz"], memory_bus_width=a["memory_bus_width"],
            l2_cache_size=a["l2_cache_size"], max_threads_per_block=a["max_threads_per_block"],
            max_shared_memory_per_block=a["max_shared_memory_per_block"],
            managed_memory=bool(a["managed_memory"]), pci_bus_id=bus.value.decode(errors="replace"))

    # --- copies whose direction the runtime infers ----------------------------------------
    @_drained
    def memcpy(self, dst: int, src: int, nbytes: int) -> None:
        if _size(nbytes) == 0:
            return
        self._bind()
        self.check(self.lib.memcpy_kind(dst, src, nbytes, MEMCPY_DEFAULT),
                   "memcpy_kind", hex(dst), hex(src), nbytes, "hipMemcpyDefault")
        self.stream_synchronize(None)   # same contract as CUDA: done when this returns

    @_drained
    def memcpy_async(self, dst: int, src: int, nbytes: int, stream=None) -> None:
        if _size(nbytes) == 0:
            return
        self._bind()
        self.check(self.lib.memcpy_kind_async(dst, src, nbytes, MEMCPY_DEFAULT, stream),
                   "memcpy_kind_async", hex(dst), hex(src), nbytes, "hipMemcpyDefault", stream)
