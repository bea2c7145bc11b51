"""Whether a family may use its matrix-unit kernels (hip_kernels/include/mlxa/mma.h) on this
device: the capability (kernel_table.matrix_tiles, the host twin of the header's backend
choice), then a self-test at first use that compares them with their portable twins.

Only the NVIDIA backend (mma.sync) has run anywhere in this project's testing; the AMD ones
(MFMA, gfx11/gfx12 WMMA) compile for their archs in CI, and the self-test is what checks
their lane layouts on a real device. A mismatch or an error warns once and the twin is used
for the rest of the process.

``MLX_AMD_MATRIX_UNITS``: auto (default: capability + self-test), 0 (never: the twins
everywhere), 1 (capability only, no self-test; for measuring).
"""

from __future__ import annotations

import os
import threading
import warnings

from . import kernel_table as kt

ENV = "MLX_AMD_MATRIX_UNITS"

_lock = threading.Lock()
_verdicts: dict = {}      # (family, arch, dtype) -> bool


def mode() -> str:
    m = os.environ.get(ENV, "auto").strip().lower()
    if m not in ("auto", "0", "1"):
        raise ValueError(f"{ENV}={m!r}: expected auto, 0 or 1")
    return m


def backend(device, dtype: str):
    """The mma.h backend for ``dtype`` on ``device`` (None: none, or switched off)."""
    if mode() == "0":
        return None
    return kt.matrix_tiles(getattr(device, "arch", "") or "", dtype)


def usable(family: str, device, dtype: str, selftest) -> bool:
    """True when ``family``'s matrix-unit kernels may serve ``dtype`` on ``device``.
    ``selftest(runtime, dtype)`` -> (ok, why) runs both kernels on the device; it runs once
    per (family, arch, dtype), and only where ``device`` is the running runtime's own (plans
    made for another device's properties, as the planning tests do, trust the capability)."""
    be = backend(device, dtype)
    if be is None:
        return False
    if mode() == "1":
        return True
    key = (family, device.arch, dtype)
    v = _verdicts.get(key)
    if v is not None:
        return v
    from .context import current

    rt = current()
    if rt is None or rt.props is not device:
        return True
    with _lock:
        v = _verdicts.get(key)
        if v is None:
            try:
                ok, why = selftest(rt, dtype)
            except Exception as e:   # a launch or driver error: the twin is the answer
                ok, why = False, f"{type(e).__name__}: {e}"
            if not ok:
                warnings.warn(f"mlx-amd: the {be} matrix-unit {family} kernels ({dtype}) differ from their "
                              f"portable twins on {device.arch} ({why}); using the twins "
                              f"({ENV}=0 skips the test)", RuntimeWarning, stacklevel=2)
            v = _verdicts[key] = ok
    return v


def verdicts() -> dict:
    """The self-test results so far, {(family, arch, dtype): ok} (mlx-amd info, tests)."""
    return dict(_verdicts)


def forget() -> None:
    """Drop the verdicts (tests)."""
    with _lock:
        _verdicts.clear()
