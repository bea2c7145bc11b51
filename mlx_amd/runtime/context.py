"""The process-wide runtime: one driver, one device, its kernels, memory and evaluator.

Created lazily by the first ``enable()``/``eval()``; ``probe()`` answers
"could we run here?" without raising.
"""

from __future__ import annotations

import os
import threading
from typing import Optional

_lock = threading.Lock()
_runtime: Optional["Runtime"] = None


class Runtime:
    def __init__(self, driver, device: int = 0, memory_mode=None):
        from .evaluator import Evaluator
        from .modules import Modules
        from .residency import Residency

        self.driver = driver
        driver.set_device(device)
        self.props = driver.properties(device)
        self.modules = Modules(driver, self.props)
        self.residency = Residency(driver, self.props, mode=memory_mode)
        self.evaluator = Evaluator(driver, self.props, self.modules, self.residency)


def get_runtime() -> Runtime:
    """The runtime, created on first use; raises with the reason when no GPU path exists."""
    global _runtime
    if _runtime is None:
        with _lock:
            if _runtime is None:
                from .driver import get_driver

                _runtime = Runtime(get_driver(), int(os.environ.get("MLX_AMD_DEVICE", "0")))
    return _runtime


def current() -> Optional[Runtime]:
    return _runtime


def probe() -> tuple[bool, str]:
    """(usable, reason): a device through a GPU driver, the bridge, and kernels for its arch."""
    try:
        from .driver import get_driver

        drv = get_driver()
    except Exception as e:  # no ROCm / no CUDA: plain MLX
        return False, f"no GPU driver: {e}"
    if drv.platform == "host":
        return True, "host driver (no GPU): every node runs on MLX's CPU fallback"
    try:
        if drv.device_count() == 0:
            return False, "no GPU device"
    except Exception as e:
        return False, f"no GPU device: {e}"
    try:
        from . import bridge  # noqa: F401  (version / ABI refusal surfaces here)
    except ImportError as e:
        return False, str(e)
    try:
        rt = get_runtime()
        rt.modules.target()
    except Exception as e:
        return False, str(e)
    return True, f"{rt.props.name} ({rt.props.arch}) through {drv.name}"
