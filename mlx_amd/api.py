"""The public API (re-exported by ``mlx_amd``): enable/disable, eval, stats, memory."""

from __future__ import annotations

import operator
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


def _mlx(name: str):
    """MLX's own mx.<name> (ours is in its place while enabled). The replacements hand
    arguments they do not take to it, so MLX's binding raises its own error, word for word."""
    return _state["saved"].get("mx." + name) or getattr(mx, name)


def eval(*args, **kwargs) -> None:
    """Evaluate arrays (and trees of arrays) on the GPU; like ``mx.eval``."""
    if kwargs:
        return _mlx("eval")(*args, **kwargs)
    arrays: list = []
    _flatten(args, arrays)
    from .runtime.context import get_runtime

    ev = get_runtime().evaluator
    if arrays:
        ev.eval(arrays)
    else:
        ev.raise_deferred()


def async_eval(*args, **kwargs) -> None:
    """Like ``mx.async_eval``: queues the work and returns; an array becomes readable when
    its work is done (every read path waits for exactly the work that produced it)."""
    if kwargs:
        return _mlx("async_eval")(*args, **kwargs)
    arrays: list = []
    _flatten(args, arrays)
    if arrays:
        from .runtime.context import get_runtime

        get_runtime().evaluator.eval(arrays, async_=True)


_STREAM_TYPES = tuple(getattr(mx, n) for n in ("Stream", "ThreadLocalStream", "Device", "DeviceType")
                      if hasattr(mx, n))


def synchronize(*args, **kwargs) -> None:
    """Our queued work done, then MLX's own synchronize with the same arguments (its streams,
    its errors: an argument it does not take raises there, before we wait for anything)."""
    given = list(args) + list(kwargs.values())
    if len(given) > 1 or set(kwargs) - {"stream"} or not all(g is None or isinstance(g, _STREAM_TYPES)
                                                            for g in given):
        return _mlx("synchronize")(*args, **kwargs)
    from .runtime.context import current

    rt = current()
    if rt is not None:
        rt.evaluator.synchronize()
    return _mlx("synchronize")(*args, **kwargs)


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
    plus upload/write-back counters and pool state, the graphs' and the launch thread's
    counts, and the GEMM problems whose library algorithms were timed (``changed``: where
    one beat the heuristic's first)."""
    from .runtime.context import current

    rt = current()
    if rt is None:
        return {"evals": 0, "nodes": {"gpu": 0, "view": 0, "cpu": 0}, "by_primitive": {}, "memory": {}}
    d = rt.evaluator.stats.as_dict()
    d["memory"] = rt.residency.stats()
    from .runtime import bridge

    d["graphs"] = dict(bridge.graph_stats(), enabled=bool(rt.evaluator.graphs))
    d["launch_thread"] = dict(bridge.launcher_stats(), enabled=bool(rt.evaluator.threaded))
    from .runtime import blas

    tuned = blas.tunings(rt)
    d["gemm_tuning"] = {"problems": len(tuned), "seconds": sum(t["seconds"] for t in tuned),
                        "changed": sum(1 for t in tuned if t["chosen"])}
    if reset:
        rt.evaluator.stats.reset()
    return d


# --- memory, with MLX's names (mx.* report and control this pool while enabled) ----------
def _pool():
    from .runtime.context import get_runtime

    return get_runtime().residency.device_pool


def _no_args(name):
    """mx.<name>() on the pool (its method of the same name); with arguments, MLX's own
    function raises its own error."""
    def fn(*args, **kwargs):
        if args or kwargs:
            return _mlx(name)(*args, **kwargs)
        return getattr(_pool(), name)()

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = getattr(mx, name).__doc__   # MLX's own (this module loads before enable())
    return fn


def _limit(name, set_limit):
    """mx.<name>(limit): a non-negative int as MLX's binding takes it (a bool or anything with
    __index__ too); anything else goes to MLX's own function, which raises its own error."""
    def fn(*args, **kwargs):
        if len(args) + len(kwargs) == 1 and set(kwargs) <= {"limit"}:
            value = args[0] if args else kwargs["limit"]
            try:
                value = operator.index(value)
            except TypeError:
                value = -1
            if value >= 0:
                return set_limit(value)
        return _mlx(name)(*args, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = getattr(mx, name).__doc__
    return fn


def _set_wired(limit: int) -> int:
    # accepted for compatibility (wiring is a Metal notion); returns the previous value
    prev = _state.setdefault("wired_limit", 0)
    _state["wired_limit"] = limit
    return prev


get_active_memory = _no_args("get_active_memory")
get_peak_memory = _no_args("get_peak_memory")
reset_peak_memory = _no_args("reset_peak_memory")
get_cache_memory = _no_args("get_cache_memory")
get_memory_limit = _no_args("get_memory_limit")
clear_cache = _no_args("clear_cache")
set_memory_limit = _limit("set_memory_limit", lambda v: _pool().set_memory_limit(v))
set_cache_limit = _limit("set_cache_limit", lambda v: _pool().set_cache_limit(v))
set_wired_limit = _limit("set_wired_limit", _set_wired)


def _wrap_save(name):
    """mx.save & co. evaluate and read their arrays inside MLX's C++: evaluate them here
    first (on the GPU, waiting for any queued work) so MLX finds them ready."""
    original = getattr(mx, name)

    def save(*args, **kwargs):
        _read(args, kwargs)
        return original(*args, **kwargs)

    save.__name__ = save.__qualname__ = name
    save.__doc__ = original.__doc__
    return save


def _wrap_export(name):
    """mx.export_function / mx.exporter trace with MLX's own mx.fast functions: the file must
    load and run in plain MLX, which cannot evaluate our fused nodes (fastops.exporting)."""
    original = getattr(mx, name)

    def export(*args, **kwargs):
        from . import fastops

        with fastops.exporting():
            made = original(*args, **kwargs)
        return made if made is None else _TracingExporter(made)

    export.__name__ = export.__qualname__ = name
    export.__doc__ = original.__doc__
    return export


class _TracingExporter:
    """mx.exporter's object: each call traces, so each call exports MLX's own fast ops."""

    def __init__(self, inner):
        self._inner = inner

    def __call__(self, *args, **kwargs):
        from . import fastops

        with fastops.exporting():
            return self._inner(*args, **kwargs)

    def __enter__(self):
        self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._inner, name)


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
    **{n: _wrap_export(n) for n in ("export_function", "exporter") if hasattr(mx, n)},
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

