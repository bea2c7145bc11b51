"""The kernel emulator's driver: the CUDA driver class bound to ``libmlxa_emu.so``.

That library (``src/emu/driver.cpp``, built with the bridge) implements the CUDA driver
calls of the binding table over host memory and runs kernels compiled for the CPU
(build_kernels.py's ``emu32``/``emu64`` targets; ``hip_kernels/include/mlxa/emu.h`` says
what that proves and what not). Only used when asked for: ``MLX_AMD_DRIVER=emu``.
``MLX_AMD_EMU_WAVE=64`` emulates a 64-wide (CDNA-like) device; the default is 32.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Mapping

from .base import DeviceProperties, DriverUnavailable
from .cuda import CudaDriver
from .table import open_library

LIBRARY_NAME = "libmlxa_emu.so"
PACKAGE_DIR = str(Path(__file__).resolve().parents[2])   # mlx_amd/


def arch_of(wave: int) -> str:
    return f"emu{wave}"


class EmuDriver(CudaDriver):
    name = "emu"
    platform = "emu"

    @staticmethod
    def _open(env: Mapping[str, str], opener: Callable) -> tuple:
        dirs = [d for d in (env.get("MLX_AMD_EMU_LIBRARY_DIR"), PACKAGE_DIR) if d]
        cdll, path, tried = open_library(dirs, (LIBRARY_NAME,), opener)
        if cdll is None:
            raise DriverUnavailable(f"the kernel emulator ({LIBRARY_NAME}) is not built: build the bridge "
                                    f"(cmake, or pip install .), which builds it too", tried)
        return cdll, path, tried

    def runtime_version(self) -> str:
        return "mlx-amd kernel emulator (CUDA driver API subset over host memory)"

    def properties(self, device: int = 0) -> DeviceProperties:
        p = super().properties(device)
        arch = arch_of(p.wave_size)
        return dataclasses.replace(p, arch=arch, arch_full=arch)
