"""The public API (re-exported by ``mlx_amd``): enable/disable, eval, stats, memory."""

from __future__ import annotations

import warnings

import mlx.core as mx

_state = {"enabled": False, "saved": {}}

# array methods that make MLX evaluate and then read host memory
# (__buffer__ exists as a Python-settable slot from Python 3.12 on: numpy's np.array(a) uses
# the buffer protocol before __array__. On 3.11 that path makes MLX evaluate on its CPU.)
_READ_METHODS = ("item", "tolist", "__array__", "__repr__", "__str__", "__format__",
                 "__bool__", "__int__", "__float__", "__index__", "__complex__", "__buffer__",
                 "__dlpack__")


def _flatten(tree, out):
    if isinstance(tree, mx.array):
        out.append(tree)
    elif isinstance(tree, (list, tuple)):
        for t in tree:
            _flatten(t, out)
    elif isinstance(tree, dict):
        for t in tree.values():
            _flatten(t, out)
    # anything else (None, numbers, modules' non-array leaves) is ignored, like mx.eval


def eval(*args) -> None:
    """Evaluate arrays (and trees of arrays) on the GPU; like ``mx.eval``."""
    arrays: list = []
    _flatten(args, arrays)
    if arrays:
        from .runtime.context import get_runtime

        get_runtime().evaluator.eval(arrays)


def async_eval(*args) -> None:
    """Like ``mx.async_eval``. The work is complete on return for now: MLX's Event is not
    exported, so an array must be finished before it is marked available."""
    eval(*args)


def synchronize(*_args) -> None:
    from .runtime.context import current

    rt = current()
    if rt is not None:
        rt.evaluator.synchronize()


def _wrap_read(name, original):
    def method(self, *a, **k):
        eval(self)
        return original(self, *a, **k)

    method.__name__ = name
    method.__qualname__ = f"array.{name}"
    method.__doc__ = getattr(original, "__doc__", None)
    return method


class _Enabled:
    """Returned by ``enable()``: also a context manager that restores the previous state."""

    def __init__(self, was_enabled: bool):
        self.was_enabled = was_enabled

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.was_enabled:
            disable()
        return False


def enable() -> _Enabled:
    """Route MLX evaluation through mlx-amd. Idempotent; raises if no usable GPU path."""
    was = _state["enabled"]
    if was:
        return _Enabled(True)
    from .runtime.context import get_runtime

    rt = get_runtime()  # raises with the reason (no driver, no kernels for the arch, …)
    # MLX may have donated or mutated host buffers while we were off.
    rt.residency.clear()
    saved = _state["saved"]
    saved["eval"], saved["async_eval"] = mx.eval, mx.async_eval
    mx.eval, mx.async_eval = eval, async_eval
    for name in _READ_METHODS:
        orig = getattr(mx.array, name, None)
        if orig is not None:
            saved[name] = orig
            setattr(mx.array, name, _wrap_read(name, orig))
    mx.disable_compile()
    _state["enabled"] = True
    return _Enabled(False)


def disable() -> None:
    """Back to plain MLX (idempotent)."""
    if not _state["enabled"]:
        return
    saved = _state["saved"]
    mx.eval, mx.async_eval = saved.pop("eval"), saved.pop("async_eval")
    for name in _READ_METHODS:
        if name in saved:
            setattr(mx.array, name, saved.pop(name))
    synchronize()
    mx.enable_compile()
    _state["enabled"] = False


def is_enabled() -> bool:
    return _state["enabled"]


def is_available() -> bool:
    """True when a GPU, the bridge and kernels for the GPU's arch are all usable."""
    from .runtime.context import probe

    ok, _ = probe()
    return ok


def device_info() -> dict:
    from .runtime.context import get_runtime

    rt = get_runtime()
    info = rt.props.as_dict()
    info["driver"] = rt.driver.name
    info["runtime_version"] = rt.driver.runtime_version()
    info["memory_mode"] = rt.residency.mode
    return info


def stats(reset: bool = False) -> dict:
    """Nodes evaluated on the GPU, as views, and on MLX's CPU fallback, per primitive class;
    plus upload/write-back counters and pool state."""
    from .runtime.context import current

    rt = current()
    if rt is None:
        return {"evals": 0, "nodes": {"gpu": 0, "view": 0, "cpu": 0}, "by_primitive": {}, "memory": {}}
    d = rt.evaluator.stats.as_dict()
    d["memory"] = rt.residency.stats()
    if reset:
        rt.evaluator.stats.reset()
    return d


# --- memory, with MLX's names --------------------------------------------------------
def _pool():
    from .runtime.context import get_runtime

    return get_runtime().residency.device_pool


def get_active_memory() -> int: return _pool().get_active_memory()
def get_peak_memory() -> int: return _pool().get_peak_memory()
def reset_peak_memory() -> None: _pool().reset_peak_memory()
def get_cache_memory() -> int: return _pool().get_cache_memory()
def set_memory_limit(limit: int) -> int: return _pool().set_memory_limit(limit)
def set_cache_limit(limit: int) -> int: return _pool().set_cache_limit(limit)
def clear_cache() -> None: _pool().clear_cache()


def _auto_enable():
    from .runtime.context import probe

    ok, reason = probe()
    if ok:
        try:
            from .runtime.driver import get_driver

            if get_driver().platform == "host":
                return  # the host driver is for tests; never auto-enable it
            enable()
        except Exception as e:  # never break `import mlx_amd`
            warnings.warn(f"mlx-amd: not enabled: {e}", RuntimeWarning, stacklevel=3)
    elif reason.startswith("no kernels"):  # a GPU, but this build has no code objects for it
        warnings.warn(f"mlx-amd: {reason}; using plain MLX", RuntimeWarning, stacklevel=3)

