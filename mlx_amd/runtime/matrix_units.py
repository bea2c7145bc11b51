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

import threading
import warnings

from . import kernel_table as kt
from . import switches

ENV = "MLX_AMD_MATRIX_UNITS"

_lock = threading.Lock()
_verdicts: dict = {}      # (family, arch, dtype) -> bool


def mode() -> str:
    return switches.choice(ENV, ("auto", "0", "1"), "auto")


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


def to16(x, dtype: str):
    """float array -> the 16-bit patterns of ``dtype`` (bfloat16 rounded to nearest even)."""
    import numpy as np
    if dtype == "float16":
        return x.astype(np.float16).view(np.uint16)
    b = x.astype(np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def from16(u, dtype: str):
    """16-bit patterns of ``dtype`` -> float32."""
    import numpy as np
    if dtype == "float16":
        return u.view(np.float16).astype(np.float32)
    return (u.astype(np.uint32) << 16).view(np.float32)


def compare_twins(rt, inputs, steps: dict, pointers, out_elems: int, dtype: str, tol: float, perturb=None,
                  what: str = "", reference=None) -> tuple:
    """The self-tests' common part, on rt's device: upload ``inputs`` (numpy arrays), run the
    matrix-unit launch ``steps["mma"]`` and its portable twin ``steps["twin"]``, each into an
    output of ``out_elems`` values of 16-bit ``dtype`` (NaN until written; ``pointers(in_ptrs,
    out_ptr)`` gives a launch's pointer tuple), and compare them: (ok, why). Without a twin
    launch, ``reference`` (float values, computed on the host) is the twin. ``perturb``
    (tests) is applied to the matrix-unit result first."""
    import numpy as np

    from . import launch as launch_mod

    drv = rt.driver
    ptrs, res = [], {}
    try:
        for b in inputs:
            ptr = drv.malloc(b.nbytes)
            ptrs.append(ptr)
            drv.memcpy_htod(ptr, b.ctypes.data, b.nbytes)
        ins = tuple(ptrs)
        for name in [n for n in ("mma", "twin") if n in steps]:
            o = drv.malloc(out_elems * 2)
            ptrs.append(o)
            drv.memset(o, 0xFF, out_elems * 2)
            launch_mod.run(steps[name], rt.modules, drv, pointers(ins, o))
            drv.synchronize()
            h = np.empty(out_elems, np.uint16)
            drv.memcpy_dtoh(h.ctypes.data, o, h.nbytes)
            res[name] = from16(h, dtype)
    finally:
        drv.synchronize()
        for ptr in ptrs:
            drv.free(ptr)
    got = res["mma"]
    ref = res["twin"] if "twin" in steps else np.asarray(reference, np.float32).ravel()
    if perturb is not None:
        got = perturb(got)
    if not np.all(np.isfinite(got)) or not np.all(np.isfinite(ref)):
        return False, f"{what}: non-finite values"
    err = float(np.max(np.abs(got - ref)))
    if err > tol:
        return False, f"{what}: max difference {err:.3g} > {tol}"
    return True, ""


def verdicts() -> dict:
    """The self-test results so far, {(family, arch, dtype): ok} (mlx-amd info, tests)."""
    return dict(_verdicts)


def forget() -> None:
    """Drop the verdicts (tests)."""
    with _lock:
        _verdicts.clear()
