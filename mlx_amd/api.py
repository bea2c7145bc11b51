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
                 "__dlpack__", "__bytes__", "__getstate__", "__copy__", "__deepcopy__")


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
    from .runtime.context import get_runtime

    ev = get_runtime().evaluator
    if arrays:
        ev.eval(arrays)
    else:
        ev.raise_deferred()


def async_eval(*args) -> None:
    """Like ``mx.async_eval``: queues the work and returns; an array becomes readable when
    its work is done (every read path waits for exactly the work that produced it)."""
    arrays: list = []
    _flatten(args, arrays)
    if arrays:
        from .runtime.context import get_runtime

        get_runtime().evaluator.eval(arrays, async_=True)


def synchronize(*_args) -> None:
    from .runtime.context import current

    rt = current()
    if rt is not None:
        rt.evaluator.synchronize()


def _read(*args) -> None:
    """Evaluate arrays (trees) on the GPU and make their host memory valid: queued work
    done, stale host copies written back. Every read path calls this before MLX reads."""
    arrays: list = []
    _flatten(args, arrays)
    from .runtime.context import get_runtime

    ev = get_runtime().evaluator
    if arrays:
        ev.read(arrays)
    else:
        ev.raise_deferred()


def _wrap_read(name, original):
    def method(self, *a, **k):
        _read(self)
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
    for name, fn in _MX_FUNCTIONS.items():
        saved["mx." + name] = getattr(mx, name)
        setattr(mx, name, fn)
    from . import fastops

    fastops.install()  # mx.fast.* build our fused primitives (mlx_amd/fastops.py)
    for name in _READ_METHODS:
        orig = getattr(mx.array, name, None)
        if orig is not None:
            saved[name] = orig
            setattr(mx.array, name, _wrap_read(name, orig))
    # mx.compile stays on: Compiled nodes are evaluated like any other (runtime/ops/compiled.py)
    _state["enabled"] = True
    if rt.evaluator.graphs_selftest:   # HIP: graphs only once they compute what eager does
        rt.evaluator.graph_selftest()
    return _Enabled(False)


def disable() -> None:
    """Back to plain MLX (idempotent)."""
    if not _state["enabled"]:
        return
    saved = _state["saved"]
    try:
        # pending async work finishes (and its errors surface), and every host copy the
        # GPU made stale is written back, before MLX reads memory on its own again
        from .runtime.context import current

        rt = current()
        if rt is not None:
            rt.evaluator.flush()
    finally:
        for name in _MX_FUNCTIONS:
            setattr(mx, name, saved.pop("mx." + name))
        from . import fastops

        fastops.uninstall()
        for name in _READ_METHODS:
            if name in saved:
                setattr(mx.array, name, saved.pop(name))
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
    from .runtime import bridge

    d["graphs"] = dict(bridge.graph_stats(), enabled=bool(rt.evaluator.graphs))
    if reset:
        rt.evaluator.stats.reset()
    return d


# --- memory, with MLX's names (mx.* report and control this pool while enabled) ----------
def _pool():
    from .runtime.context import get_runtime

    return get_runtime().residency.device_pool


def get_active_memory() -> int: return _pool().get_active_memory()
def get_peak_memory() -> int: return _pool().get_peak_memory()
def reset_peak_memory() -> None: _pool().reset_peak_memory()
def get_cache_memory() -> int: return _pool().get_cache_memory()
def get_memory_limit() -> int: return _pool().get_memory_limit()
def set_memory_limit(limit: int) -> int: return _pool().set_memory_limit(limit)
def set_cache_limit(limit: int) -> int: return _pool().set_cache_limit(limit)
def clear_cache() -> None: _pool().clear_cache()


def set_wired_limit(limit: int) -> int:
    """Accepted for compatibility (wiring is a Metal notion); returns the previous value."""
    prev = _state.setdefault("wired_limit", 0)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise ValueError(f"[set_wired_limit] limit must be a non-negative int, got {limit!r}")
    _state["wired_limit"] = limit
    return prev


def _wrap_save(name):
    """mx.save & co. evaluate and read their arrays inside MLX's C++: evaluate them here
    first (on the GPU, waiting for any queued work) so MLX finds them ready."""
    original = getattr(mx, name)

    def save(file, *args, **kwargs):
        _read(args, kwargs)
        return original(file, *args, **kwargs)

    save.__name__ = save.__qualname__ = name
    save.__doc__ = original.__doc__
    return save


# mx.<name> -> ours while enabled
_MX_FUNCTIONS = {
    "eval": eval, "async_eval": async_eval, "synchronize": synchronize,
    "get_active_memory": get_active_memory, "get_peak_memory": get_peak_memory,
    "reset_peak_memory": reset_peak_memory, "get_cache_memory": get_cache_memory,
    "get_memory_limit": get_memory_limit, "set_memory_limit": set_memory_limit,
    "set_cache_limit": set_cache_limit, "clear_cache": clear_cache,
    "set_wired_limit": set_wired_limit,
    **{n: _wrap_save(n) for n in ("save", "savez", "savez_compressed", "save_safetensors",
                                  "save_gguf") if hasattr(mx, n)},
}


def coverage() -> dict:
    """{primitive: {"path": "gpu"|"view"|"cpu", "family", "dtypes", "note"}} for every MLX
    primitive class, from the launchers' own tables (docs/coverage.md is this as a table)."""
    from .runtime.coverage import coverage as _coverage

    return _coverage()


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

