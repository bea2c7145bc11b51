"""What the bindings of the vendor libraries (FFT, solver) share: a status check that
names the failing call, loading through ``blas.table.open_vendor_library``, one lazily
loaded library per vendor with an availability switch and a one-time warning, one engine
per driver with the state every engine holds, and a workspace from the device pool grown
on demand.

Standard library only.
"""

from __future__ import annotations

import ctypes
import os
import threading
import warnings

from .driver.base import DriverUnavailable
from .driver.table import format_arg


def vendor_of(platform_or_arch: str) -> str:
    """"cuda" for the NVIDIA platform (or an sm_ arch), "hip" otherwise."""
    s = str(platform_or_arch)
    return "cuda" if s == "nvidia" or s.startswith("sm_") else "hip"


def status_check(lib, error_cls, names: dict, hints: dict | None = None):
    """``check(status, call, *args)``: raise ``error_cls`` naming the vendor's call (from the
    logical name), the status name (``names``) and a hint where ``hints`` has one."""
    hints = hints or {}

    def check(status: int, call: str, *args) -> None:
        if status:
            text = f"{lib.symbol(call)}({', '.join(map(format_arg, args))})"
            name = names.get(status, f"status {status}")
            h = hints.get(status, "")
            raise error_cls(text, status, name, name + (f" ({h})" if h else ""))

    return check


def load(libraries: dict, bind, vendor: str, env=os.environ, opener=ctypes.CDLL):
    """dlopen the first of ``libraries[vendor]`` (file names, install hint) where that
    vendor's libraries live and bind it (``bind(cdll, vendor, path)``); DriverUnavailable
    names the package to install."""
    from .blas.table import open_vendor_library

    names, hint = libraries[vendor]
    cdll, path = open_vendor_library(names, hint, vendor, env, opener)
    return bind(cdll, vendor, path)


class Lazy:
    """One library per vendor, loaded on first use (a failure is remembered too).
    ``available(vendor)`` is False when ``env`` says "none" or the library does not load
    (then ``warning`` is given once, with the reason)."""

    def __init__(self, loader, env: str, warning: str):
        self.loader, self.env, self.warning = loader, env, warning
        self._lock = threading.Lock()
        self._libs: dict = {}
        self._warned: set = set()

    def library(self, vendor: str):
        with self._lock:
            lib = self._libs.get(vendor)
            if lib is None:
                try:
                    lib = self.loader(vendor)
                except DriverUnavailable as e:
                    lib = e
                self._libs[vendor] = lib
        if isinstance(lib, Exception):
            raise lib
        return lib

    def available(self, vendor: str) -> bool:
        if os.environ.get(self.env, "auto").strip().lower() == "none":
            return False
        try:
            self.library(vendor)
            return True
        except DriverUnavailable as e:
            if vendor not in self._warned:
                self._warned.add(vendor)
                warnings.warn(f"mlx-amd: {self.warning}: {e}", RuntimeWarning, stacklevel=3)
            return False


class PerDriver:
    """One engine per driver, made on first use by ``make(driver, device pool)``."""

    def __init__(self, make):
        self.make = make
        self._lock = threading.Lock()
        self._engines: dict = {}     # id(driver) -> (driver, engine)

    def get(self, ctx):
        drv = ctx.driver
        with self._lock:
            rec = self._engines.get(id(drv))
            if rec is not None and rec[0] is drv:
                return rec[1]
        eng = self.make(drv, ctx.residency.device_pool)
        with self._lock:
            self._engines[id(drv)] = (drv, eng)
        return eng

    def close_all(self) -> None:
        with self._lock:
            for _, eng in self._engines.values():
                eng.close()
            self._engines.clear()


class Workspace:
    """A library's work area: one device block from the pool, replaced by a larger one when
    a call needs more (one stream: the library's calls never overlap)."""

    def __init__(self, pool):
        self.pool, self.block, self.nbytes = pool, None, 0

    def get(self, nbytes: int):
        """The address of at least ``nbytes``; None while nothing was ever needed."""
        if nbytes <= self.nbytes:
            return self.block.data if self.block is not None else None
        self.release()
        self.block = self.pool.alloc(nbytes)
        self.nbytes = nbytes
        return self.block.data

    def release(self) -> None:
        if self.block is not None:
            self.pool.free(self.block)     # stream order: its next user queues behind
            self.block, self.nbytes = None, 0


class Engine:
    """What every vendor-library engine holds: the vendor, its library (``library(vendor)``
    unless one is given, e.g. a test's fake) and the library's status check, the driver
    and device pool, one workspace, and a lock (one engine per driver, calls from any
    thread). Binds the device's context in the constructing thread."""

    def __init__(self, driver, pool, lib, library, make_check):
        self.vendor = vendor_of(driver.platform)
        self.lib = lib or library(self.vendor)
        self.check = make_check(self.lib)
        self.driver, self.pool = driver, pool
        self.work = Workspace(pool)
        self.lock = threading.Lock()
        driver.synchronize()


__all__ = ["vendor_of", "status_check", "load", "Lazy", "PerDriver", "Workspace", "Engine"]
