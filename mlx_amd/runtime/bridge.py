"""The C++ bridge into MLX's lazy graph (``mlx_amd._bridge``), checked and re-exported.

Importing this module refuses, with an ``ImportError`` that says what is needed and
what was found, when the bridge cannot work with the MLX in this environment:
another MLX than 0.32.4 (the bridge reads MLX's class layouts and inline headers),
or an ``mlx.core`` built with another nanobind ABI (``mx.array`` would not convert).

API (see ``src/bridge/graph.h``):
  Graph(outputs)        one walk of the unevaluated graph; ``nodes``, ``arrays``,
                        ``outputs``, ``table()``, ``info``, ``attach``, ``view``,
                        ``try_view``, ``share``, ``donatable``, ``eval_cpu``,
                        ``finish``, ``watch``, ``release``; ``node(i)``/``meta(s)``
                        rows without the tables; ``fingerprint``, ``record``,
                        ``leaves``, ``replay`` (src/bridge/replay.h)
  Program(fp, n)        a recorded evaluation of one graph structure
  ConstCache()          device copies of small constant leaves by their bytes (replay.h)
  Pool, Outputs         the pools' native bookkeeping, a replay's fresh outputs (src/bridge/pool.h)
  set_graph_api(), graph_stats(), graph_api_shutdown(), set_graph_after(), graph_after(),
  set_graph_segments(), graph_segments()
                        replayed launches as CUDA/HIP graphs (src/bridge/graphexec.h)
  launch(), launch_refs(), launch_repeat()  a kernel launch (or many) through the driver entry point
  launcher_start(), launcher_stop(), launcher_wait(), launcher_failure(), launcher_stats()
                        the launch thread that issues replays' launches (src/bridge/launcher.h)
  drain_freed()         tokens of attached buffers MLX let go of since the last call
  live()                (count, bytes) of attached buffers not yet freed
  expired()             keys of watched buffers that died since the last call
  buffer_info(a)        ``Graph.info``'s tuple for a plain evaluated ``mx.array``
  versions(), probe(a)
"""

from __future__ import annotations

import mlx.core as mx  # first: the bridge reuses the libmlx that mlx.core loaded

MLX_VERSION = "0.32.4"
NANOBIND_SERIES = "3.0"

_NEEDS = (f"mlx-amd needs mlx=={MLX_VERSION} + mlx-cpu=={MLX_VERSION} and a bridge built "
          f"with nanobind {NANOBIND_SERIES}.x")


def _installed(dist: str) -> str:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return "not installed"


def _found(versions: dict | None = None) -> str:
    parts = [f"mlx {_installed('mlx')}", f"mlx-cpu {_installed('mlx-cpu')}",
             f"mlx.core reports {getattr(mx, '__version__', '?')}"]
    if versions:
        parts.append(f"libmlx {versions.get('mlx_runtime')}, bridge compiled against MLX "
                     f"{versions.get('mlx_compiled')} with nanobind {versions.get('nanobind')}")
    return "found " + ", ".join(parts)


def check_versions(versions: dict) -> None:
    """Raise ImportError unless the loaded libmlx, the compiled-in MLX and nanobind fit."""
    runtime, compiled = versions.get("mlx_runtime"), versions.get("mlx_compiled")
    nb = str(versions.get("nanobind", ""))
    problems = []
    if runtime != MLX_VERSION:
        problems.append(f"the loaded libmlx is MLX {runtime}")
    if compiled != MLX_VERSION:
        problems.append(f"the bridge was compiled against MLX {compiled}")
    if nb != NANOBIND_SERIES and not nb.startswith(NANOBIND_SERIES + "."):
        problems.append(f"the bridge was built with nanobind {nb}")
    if problems:
        raise ImportError(f"{_NEEDS}; {'; '.join(problems)} ({_found(versions)})")


def check_abi(probe, sample) -> None:
    """Raise ImportError when an mx.array does not convert into the bridge (nanobind ABI)."""
    try:
        probe(sample)
    except TypeError as e:
        raise ImportError(
            f"{_NEEDS}; mx.array does not convert into mlx_amd._bridge, so mlx.core was "
            f"built with another nanobind ABI ({_found()}): {e}") from None


try:
    from .. import _bridge
except ImportError as e:
    raise ImportError(f"{_NEEDS}; mlx_amd._bridge failed to load ({_found()}): {e}") from e

versions = _bridge.versions
check_versions(versions())
check_abi(_bridge.probe, mx.array(0))

Graph = _bridge.Graph
probe = _bridge.probe
buffer_info = _bridge.buffer_info
drain_freed = _bridge.drain_freed
live = _bridge.live
expired = _bridge.expired
launch = _bridge.launch
launch_repeat = _bridge.launch_repeat
launch_refs = _bridge.launch_refs
Program = _bridge.Program
ConstCache = _bridge.ConstCache
Pool = _bridge.Pool
Outputs = _bridge.Outputs
set_graph_api = _bridge.set_graph_api
graph_api_shutdown = _bridge.graph_api_shutdown
graph_stats = _bridge.graph_stats
set_graph_after = _bridge.set_graph_after
graph_after = _bridge.graph_after
set_graph_segments = _bridge.set_graph_segments
graph_segments = _bridge.graph_segments
launcher_start = _bridge.launcher_start
launcher_stop = _bridge.launcher_stop
launcher_wait = _bridge.launcher_wait
launcher_failure = _bridge.launcher_failure
launcher_stats = _bridge.launcher_stats
raw = _bridge   # the extension module itself (the driver's launch-thread hooks call it directly)

__all__ = ["Graph", "versions", "probe", "buffer_info", "drain_freed", "live", "expired", "launch", "launch_repeat", "launch_refs", "Program", "ConstCache", "Pool", "Outputs", "set_graph_api", "graph_api_shutdown", "graph_stats", "set_graph_after", "graph_after",
           "set_graph_segments", "graph_segments", "launcher_start", "launcher_stop", "launcher_wait",
           "launcher_failure", "launcher_stats", "raw",
           "check_versions", "check_abi", "MLX_VERSION"]
