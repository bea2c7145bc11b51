"""Driver selection: one process-wide driver, chosen at run time.

``get_driver()`` returns it, created on first use. ``MLX_AMD_DRIVER=hip|cuda|host|emu``
forces one; by default HIP is preferred, then CUDA, and the first that loads and
reports a device wins. The GPU-less ``host`` driver and the kernel emulator ``emu``
(kernels run on the CPU) are only ever used when asked for. ``probe()`` reports what was tried without raising (for ``mlx-amd info``).

Standard library only, and nothing happens at import: importing never fails
because a library is missing.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Optional

from .base import (CudaError, DeviceProperties, Driver, DriverError, DriverUnavailable,
                   HipError)

ENV = "MLX_AMD_DRIVER"
DEFAULT_ORDER = ("hip", "cuda")


def _make_hip() -> Driver:
    from .hip import HipDriver
    return HipDriver()


def _make_cuda() -> Driver:
    from .cuda import CudaDriver
    return CudaDriver()


def _make_host() -> Driver:
    try:
        from .host import HostDriver
    except ImportError as e:
        raise DriverUnavailable(f"the host driver is not available in this installation ({e})") from e
    return HostDriver()


def _make_emu() -> Driver:
    from .emu import EmuDriver
    return EmuDriver()


# name -> factory; tests replace entries to fake a vendor library
FACTORIES: dict[str, Callable[[], Driver]] = {"hip": _make_hip, "cuda": _make_cuda, "host": _make_host,
                                              "emu": _make_emu}

_lock = threading.RLock()
_instances: dict[str, object] = {}     # name -> Driver, or the DriverUnavailable it raised
_driver: Optional[Driver] = None


def load(name: str) -> Driver:
    """The process's one instance of the named driver (a failed load is remembered)."""
    if name not in FACTORIES:
        raise ValueError(f"unknown driver {name!r}: expected one of {', '.join(FACTORIES)}")
    with _lock:
        inst = _instances.get(name)
        if inst is None:
            try:
                inst = FACTORIES[name]()
            except DriverUnavailable as e:
                inst = e
            _instances[name] = inst
    if isinstance(inst, DriverUnavailable):
        raise inst
    return inst


def requested(env=None) -> tuple[Optional[str], tuple]:
    """(forced name or None, names to try in order) from ``MLX_AMD_DRIVER``."""
    value = (os.environ if env is None else env).get(ENV, "").strip().lower()
    if not value:
        return None, DEFAULT_ORDER
    if value not in FACTORIES:
        raise ValueError(f"{ENV}={value!r} is not a driver: expected one of {', '.join(FACTORIES)}")
    return value, (value,)


def _try(name: str) -> tuple[Optional[Driver], dict]:
    """Load one driver and count its devices; never raises DriverError/DriverUnavailable."""
    rec: dict = {"name": name, "loaded": False, "library": None, "tried": [], "device_count": 0,
                 "runtime_version": None, "driver_version": None, "error": None}
    try:
        d = load(name)
    except DriverUnavailable as e:
        rec.update(error=str(e), tried=list(e.tried))
        return None, rec
    rec.update(loaded=True, library=d.library_path, tried=list(getattr(d, "tried", [])))
    try:
        rec["device_count"] = d.device_count()
        rec["runtime_version"] = d.runtime_version()
        rec["driver_version"] = d.driver_version()
    except DriverError as e:
        rec["error"] = str(e)
        return None, rec
    if rec["device_count"] == 0:
        rec["error"] = "the library loaded but reports no device"
        return None, rec
    return d, rec


def get_driver() -> Driver:
    """The process-wide driver; raises ``DriverUnavailable`` naming everything tried."""
    global _driver
    if _driver is not None:
        return _driver
    forced, names = requested()
    with _lock:
        if _driver is not None:
            return _driver
        failures, tried = [], []
        for name in names:
            d, rec = _try(name)
            if d is not None:
                _driver = d
                return d
            where = f" ({rec['library']})" if rec["library"] else ""
            failures.append(f"{name}{where}: {rec['error']}")
            tried += rec["tried"]
    how = f"{ENV}={forced}" if forced else "no GPU driver usable"
    raise DriverUnavailable(f"{how}: " + "; ".join(failures), tried)


def probe() -> dict:
    """What selection would do, as plain JSON-able data; never raises.

    Keys: ``forced`` (the MLX_AMD_DRIVER value or None), ``selected`` (driver name
    or None), ``drivers`` (one record per driver tried: name, loaded, library,
    tried, device_count, runtime_version, driver_version, error), ``error``.
    """
    report: dict = {"forced": None, "selected": None, "drivers": [], "error": None}
    try:
        forced, names = requested()
    except ValueError as e:
        report.update(forced=os.environ.get(ENV), error=str(e))
        return report
    report["forced"] = forced
    for name in names:
        try:
            d, rec = _try(name)
        except Exception as e:   # a broken install must not take `mlx-amd info` down
            d, rec = None, {"name": name, "loaded": False, "library": None, "tried": [],
                            "device_count": 0, "runtime_version": None, "driver_version": None,
                            "error": f"{type(e).__name__}: {e}"}
        report["drivers"].append(rec)
        if d is not None and report["selected"] is None:
            report["selected"] = name
    if report["selected"] is None:
        report["error"] = "no usable GPU driver" + (f" ({ENV}={forced})" if forced else "")
    return report


def reset() -> None:
    """Forget loaded drivers and the selection (tests; not for use while running)."""
    global _driver
    with _lock:
        _driver = None
        _instances.clear()


__all__ = ["get_driver", "probe", "load", "reset", "requested", "FACTORIES", "ENV", "DEFAULT_ORDER",
           "Driver", "DeviceProperties", "DriverError", "HipError", "CudaError", "DriverUnavailable"]
