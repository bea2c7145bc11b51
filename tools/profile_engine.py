"""Profile the evaluator's host path without a GPU: every node takes the GPU path (plans,
buffers, residency, launches) on the host driver, with kernel launches turned into no-ops.
What this measures is our own host cost per node, minus the vendor driver's launch call.

    python tools/profile_engine.py [--nodes 1000] [--reps 20] [--profile] [--fresh] [--operands]
"""

import argparse
import cProfile
import ctypes
import os
import pstats
import shutil
import statistics
import subprocess
import tempfile
import time

os.environ.setdefault("MLX_AMD_AUTO", "0")
os.environ["MLX_AMD_DRIVER"] = "host"

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402


def make_runtime(compute_units=None):
    """The null runtime; ``compute_units`` stands in for a GPU's count where launch planning
    depends on it (an SDPA decode's split count grows with the KV length up to a fill target
    of the device: 132 is the H200's)."""
    import dataclasses

    from mlx_amd.runtime import context
    from mlx_amd.runtime.driver.host import HostDriver

    class NoKernelDriver(HostDriver):
        launches = 0

        def properties(self, device=0):
            p = super().properties(device)
            return p if compute_units is None else dataclasses.replace(p, compute_units=compute_units)

        def launch(self, function, grid, block, args, shared_mem=0, stream=None):
            NoKernelDriver.launches += 1

        def launch_entry(self):
            raise NotImplementedError

        def ensure_bound(self):
            pass

    class NullModules:
        def function(self, family, name):
            return ctypes.c_void_p(1)

    drv = NoKernelDriver()
    rt = context.Runtime(drv)
    ev = rt.evaluator
    ev.gpu = True
    ev.modules = NullModules()
    rt.modules = ev.modules
    ev.stream = None
    context._runtime = rt
    native = _null_native()
    if native is not None:   # as on a GPU: native launches whether or not replays are on
        ev.native, ev.replay = native, os.environ.get("MLX_AMD_REPLAY", "1") != "0"
    return rt, NoKernelDriver


class _NullNative:
    """The native launch entry, pointing at a C function that counts and returns 0."""

    def __init__(self, lib):
        self.lib = lib
        self._entry = ctypes.cast(lib.null_launch, ctypes.c_void_p).value
        self._end = 0
        from mlx_amd.runtime import bridge

        self._launch = bridge.launch

    def __call__(self, fn, grid, block, args, shared_mem, stream):
        # through the bridge, as NativeLauncher does (a ctypes call here cost ~1.5 us, which
        # the real launcher does not pay)
        self._launch(self._entry, self._end, fn.value or 0, grid[0], grid[1], grid[2], block[0], block[1],
                     block[2], shared_mem, 0, args)

    @property
    def launches(self):
        return ctypes.c_long.in_dll(self.lib, "null_launches").value


def _null_native():
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    d = tempfile.mkdtemp()
    src, so = os.path.join(d, "null.c"), os.path.join(d, "null.so")
    with open(src, "w") as f:
        f.write("long null_launches = 0;\n"
                "int null_launch(void* f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e,"
                " unsigned g, unsigned h, void* s, void** p, void** x) { null_launches++; return 0; }\n"
                # a graph API that only counts (null_graph_api): nodes, updates, launches
                "long null_graphs = 0, null_nodes = 0, null_updates = 0, null_graph_launches = 0;\n"
                "int null_graph_create(void** g, unsigned f) { *g = (void*)++null_graphs; return 0; }\n"
                "int null_graph_destroy(void* g) { return 0; }\n"
                "int null_graph_add(void** n, void* g, void* const* d, unsigned long nd, const void* p)"
                " { *n = (void*)++null_nodes; return 0; }\n"
                "int null_graph_instantiate(void** e, void* g, unsigned long long f) { *e = g; return 0; }\n"
                "int null_graph_launch(void* e, void* s) { null_graph_launches++; return 0; }\n"
                "int null_graph_set(void* e, void* n, const void* p) { null_updates++; return 0; }\n"
                "int null_graph_exec_destroy(void* e) { return 0; }\n")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", src, "-o", so], check=True)
    return _NullNative(ctypes.CDLL(so))


def null_graph_api(native):
    """(entries, layout) for bridge.set_graph_api: the null library's counting graph calls,
    CUDA's kernel-node layout."""
    from mlx_amd.runtime.driver import cuda

    lib = native.lib
    names = {"graph_create": "null_graph_create", "graph_destroy": "null_graph_destroy",
             "graph_add_kernel_node": "null_graph_add", "graph_instantiate": "null_graph_instantiate",
             "graph_launch": "null_graph_launch", "graph_exec_kernel_node_set_params": "null_graph_set",
             "graph_exec_destroy": "null_graph_exec_destroy"}
    entries = {k: ctypes.cast(getattr(lib, v), ctypes.c_void_p).value for k, v in names.items()}
    return entries, dict(cuda.CudaDriver.kernel_node_layout)


def null_counts(native) -> dict:
    return {k: ctypes.c_long.in_dll(native.lib, "null_" + k).value
            for k in ("launches", "graphs", "nodes", "updates", "graph_launches")}


def chain(x, n, variant=-1, operands=None):
    """``operands``: two arrays of x's shape instead of Python scalars (no Broadcast views, no
    fresh constant leaves: launches only, as eval_overhead's full-size rows)."""
    s, h = operands if operands is not None else (1.0001, 0.5)
    for i in range(n // 2):
        x = x * s
        x = (x - h) if i == variant else (x + h)   # another structure per variant
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--fresh", action="store_true",
                    help="a new graph structure every time (first sightings: the node-by-node path)")
    ap.add_argument("--operands", action="store_true",
                    help="full-size operands instead of scalars: every node a launch (the eager replay's "
                         "per-launch cost)")
    args = ap.parse_args()
    rt, drv = make_runtime()
    from mlx_amd.runtime import bridge

    ev = rt.evaluator
    x = mx.array(np.ones(16, np.float32))
    ev.eval([x])
    ops = None
    if args.operands:
        ops = (mx.full((16,), 1.0001), mx.full((16,), 0.5))
        ev.eval(list(ops))
    ts = []
    prof = cProfile.Profile() if args.profile else None
    for r in range(args.reps):
        y = chain(x, args.nodes, variant=r if args.fresh else -1, operands=ops)
        if r == 0 or args.fresh:   # (a walk of its own: out of a profile of the steady state)
            n = len(bridge.Graph([y]))
        if prof and r == args.reps - 1:
            prof.enable()
        t = time.perf_counter()
        ev.eval([y])
        ts.append(time.perf_counter() - t)
        if prof and r == args.reps - 1:
            prof.disable()
    gpu = ev.stats.as_dict()["nodes"]
    native = ev.native.launches if ev.native is not None else 0
    print(f"{n} nodes: {statistics.median(ts) / n * 1e6:.3f} us/node (median of {args.reps}); "
          f"paths {gpu}; launches {drv.launches} python + {native} native; replays {ev.replays}")
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
