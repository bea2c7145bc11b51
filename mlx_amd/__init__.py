"""mlx-amd: run MLX programs on AMD GPUs through ROCm/HIP, on the stock MLX wheels.

    import mlx.core as mx
    import mlx_amd          # finds a usable GPU and enables it (MLX_AMD_AUTO=0: stay off)
    ...
    mlx_amd.disable()       # plain MLX again; mlx_amd.enable() turns it back on

``enable()`` routes ``mx.eval``, ``mx.async_eval``, the array read paths (``item``,
``tolist``, ``__array__``, ``__repr__``, …), ``mx.save*`` and MLX's memory functions
through our evaluator; ``mx.compile`` stays on (compiled nodes become fused kernels).
``coverage()`` says which primitives have a GPU path.

The API lives in ``mlx_amd.api`` and is loaded on first use, so that ``mlx-amd info``
(and anything else that only needs the driver) never imports MLX.
"""

import os
import sys

__version__ = "0.1.0"

__all__ = [
    "enable", "disable", "is_enabled", "is_available", "eval", "async_eval", "synchronize",
    "device_info", "stats", "get_active_memory", "get_peak_memory", "reset_peak_memory",
    "get_cache_memory", "get_memory_limit", "set_memory_limit", "set_cache_limit", "clear_cache",
    "coverage",
]


def __getattr__(name):
    if name in __all__ or name == "_state":
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'mlx_amd' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)


def _started_as_cli() -> bool:
    # `mlx-amd …` (console script) or `python -m mlx_amd …`: while -m locates the
    # package, sys.argv[0] is "-m".
    argv0 = sys.argv[0] if sys.argv else ""
    return os.path.basename(argv0) in ("mlx-amd", "-m") or argv0 == "-m"


if os.environ.get("MLX_AMD_AUTO", "1") != "0" and not _started_as_cli():
    from .api import _auto_enable

    _auto_enable()
