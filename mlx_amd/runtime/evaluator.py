"""Evaluate MLX's lazy graphs on the GPU.

The bridge walks the graph once in C++ and hands over a node table; this module
walks that table in order and, per node, either
  * makes a zero-copy view (done in the bridge with MLX's own flag rules),
  * launches a kernel through the node's family launcher (``ops/<family>.py``), or
  * falls back to MLX's own ``eval_cpu`` on host-valid data,
then lets the bridge mark the outputs available and detach the node, so temporaries
die as early as they do in MLX. Which arrays escaped the evaluation is known at the
end without guessing: our buffers whose deleter has not run are held by someone.

Per-node Python work is kept small: kernel choice and launch geometry are cached by
the node's signature (primitive, parameters, input/output layouts). A graph structure
seen again (same primitive classes and topology: a decode or training step) is recorded
into a ``Program`` and later evaluations replay it from native code
(``src/bridge/replay.h``): per node the bridge checks primitive and layouts against the
recording and launches the recorded kernels; a node that differs runs here, alone.
``MLX_AMD_REPLAY=0`` switches replay off.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import functools
import gc
import math
import os
import struct
import threading
import weakref
from typing import NamedTuple

from . import bridge as _bridge
from . import plan as _plan
from .launch import Launch as _Launch
from .launch import NativeLauncher as _NativeLauncher
from .launch import _pointers
from .launch import run as _launch
from .ops import (VIEW_PRIMITIVES, chain_table, dispatch_table, pair_table, sibling_table,  # noqa: F401
                  tail_table, twin_chain_table, twin_table)  # (VIEW_PRIMITIVES re-exported)
from .plan import ITEMSIZE as _ITEMSIZE
from .plan import Layout
from .plan import Memset as _Memset



MAX_PLANS = 8192   # node plans kept (decode steps make a new one per KV length)
GRAPH_AFTER = 2    # eager replays of a program before its graph (MLX_AMD_GRAPH_AFTER)
# launches in a replay's first graph segment, and the most in one (MLX_AMD_GRAPH_SEGMENTS=first,most):
# the GPU starts on a segment while the host collects the next (src/bridge/graphexec.h)
GRAPH_SEGMENTS = (256, 2048)

# primitive class name -> family launcher module, built once from the launchers' own tables
DISPATCH = dispatch_table()
# primitive class name -> family that can plan several such nodes on one input as one
# (``plan_siblings``: an attention's q/k/v matvecs, an MLP's gate/up); MLX_AMD_SIBLINGS=0: off
SIBLINGS = sibling_table(DISPATCH) if os.environ.get("MLX_AMD_SIBLINGS", "1") != "0" else {}
# (primitive, primitive of a node reading its output as first input) -> family that plans
# the two as one (an Add and the RMSNorm of its sum); the same switch
PAIRS = pair_table(DISPATCH) if SIBLINGS else {}
# primitive -> family that plans two independent nodes of it with equal parameters as one
# (an attention's q and k RoPE, its k and v cache writes); the same switch
TWINS = twin_table(DISPATCH) if SIBLINGS else {}
# (twin primitive, twin primitive) -> family that plans a twin pair and a later twin pair
# whose first reads the first pair's second output as one (q's and k's RoPE, then the k and
# v cache writes: one launch instead of two); the chains' switch
TWIN_CHAINS = twin_chain_table(DISPATCH) if SIBLINGS and os.environ.get("MLX_AMD_CHAINS", "1") != "0" else {}
# (pair's primitives) -> {primitive: family}: nodes reading a pair's output first that the
# family plans with the pair as one (an Add and RMSNorm, then the quantized projections of the
# norm's output: one launch instead of two); the same switch, and MLX_AMD_CHAINS=0 alone
CHAINS = chain_table(DISPATCH, PAIRS) if os.environ.get("MLX_AMD_CHAINS", "1") != "0" else {}
# (sibling group's primitive, primitive of a node reading the group's outputs) -> family that
# plans the group with that node (an MLP's gate and up with their swiglu: one launch, the
# swiglu's own gone); the siblings' switch
TAILS = tail_table(DISPATCH) if SIBLINGS else {}
MAX_SIBLINGS = 2   # siblings a node may take on (the kernels' QmvSibs)
TWIN_WINDOW = 16   # nodes between twins at most (further apart: kept apart, their inputs and
                   # outputs would live longer for one launch less)


def _made_here(meta):
    """A stand-in buffer info for an input that the node's own plan makes (a sibling reads
    the node's output): row-major strides, no buffer."""
    shape = meta[0]
    return (None, 0, 0, _plan.row_strides(shape), math.prod(shape), 0, True, len(shape) <= 1, True, 0)


def _in_sig(metas, ins, infos) -> tuple:
    """Per input (slot row, strides, data size, row-contiguous, contiguous): what a plan
    depends on (Graph.node_key packs the same into bytes). info rows: (key, data_ptr,
    offset_bytes, strides, data_size, nbytes, row, col, contig, ours)."""
    return tuple([(metas[s], inf[3], inf[4], inf[6], inf[8]) for s, inf in zip(ins, infos)])


class _Single(NamedTuple):
    """A plan that is one kernel launch on the node's own buffers (Evaluator._single)."""
    function: object
    grid: tuple
    block: tuple
    shared_mem: int
    pack: object        # packs the pointers (struct.Struct.pack)
    tail: bytes         # the argument bytes after the pointers
    refs: object        # None: inputs in order then the first output; else ((is_output, index, offset), ...)
    launcher: object    # the native launcher it was made for
    direct: object      # direct(in_ptrs, out_ptrs) -> status through launcher's entry point, or None


def _single_args(single, in_ptrs, out_ptrs) -> bytes:
    """The argument blob of a prepared one-launch plan (Evaluator._single)."""
    pack, tail, refs = single.pack, single.tail, single.refs
    if refs is None:
        return pack(*in_ptrs, out_ptrs[0]) + tail
    return pack(*[(out_ptrs if o else in_ptrs)[k] + off for o, k, off in refs]) + tail


def _resolve(ref, in_ptrs, out_ptrs, temps, zero):
    """A plan reference's address; ``temps``: the temporaries' base addresses."""
    kind, i, off = ref
    if kind == "i":
        return in_ptrs[i] + off
    if kind == "o":
        return out_ptrs[i] + off
    if kind == "z":
        return zero + off
    return temps[i] + off


_GRAPH_EXIT = [False]   # graph_api_shutdown registered with atexit
_LAUNCHER_EXIT = [False]   # launcher_stop registered with atexit
LAUNCH_THREAD_ENV = "MLX_AMD_LAUNCH_THREAD"


# Every live evaluator's residency. The bridge's queue of freed tokens is process-wide
# (a deleter cannot know whose buffer it frees), so tokens are routed to their owner;
# tokens nobody owns (the bridge's own tests attach buffers too) are counted and dropped.
class _Owners:
    """Weak references to the live residencies, in a plain list: iterating a WeakSet cost
    ~15 µs per batch of freed tokens (line_profiler, a first sighting), and a batch comes
    after almost every node."""

    def __init__(self):
        self._refs: list = []

    def add(self, res) -> None:
        if not any(r() is res for r in self._refs):
            self._refs.append(weakref.ref(res, self._gone))

    def _gone(self, ref) -> None:
        try:
            self._refs.remove(ref)
        except ValueError:
            pass

    def live(self) -> list:
        return [res for res in (r() for r in self._refs) if res is not None]


_OWNERS = _Owners()
foreign_frees = 0


def _route_freed(tokens):
    global foreign_frees
    for res in _OWNERS.live():
        mine = [t for t in tokens if res.owns(t)]
        if mine:
            res.freed(mine)
            if len(mine) == len(tokens):
                return
            tokens = [t for t in tokens if t not in set(mine)]
    foreign_frees += len(tokens)


class Stats:
    """Nodes evaluated per primitive class and path: how coverage is measured. The node
    loop adds to ``by_prim[prim][path]`` directly (a method call per node showed in profiles)."""

    def __init__(self):
        self.by_prim = collections.defaultdict(lambda: collections.Counter())
        self.evals = 0

    def as_dict(self):
        total = collections.Counter()
        for c in self.by_prim.values():
            total.update(c)
        return {
            "evals": self.evals,
            "nodes": {k: total.get(k, 0) for k in ("gpu", "view", "cpu")},
            "by_primitive": {p: dict(c) for p, c in sorted(self.by_prim.items())},
        }

    def reset(self):
        self.by_prim.clear()
        self.evals = 0


class Evaluator:
    """Runs graphs on one device through one stream (stream order makes pool reuse safe)."""

    def __init__(self, driver, props, modules, residency):
        self.driver, self.props, self.modules, self.residency = driver, props, modules, residency
        self.stream = driver.stream_create() if driver.platform != "host" else None
        self.gpu = driver.platform != "host"
        self.plans: dict = {}
        self._recorded: dict = {}       # id(plan) -> (plan, its steps as _record hands them over)
        self.stats = Stats()
        self.lock = threading.RLock()
        self._deferred = None              # an asynchronous evaluation's error, raised later
        self._pending: list = []           # see _queue_pending
        self._pending_keys: dict = {}
        self._pending_base = 0
        self._events: list = []            # recycled completion events
        self.native = _NativeLauncher.for_driver(driver) if self.gpu else None
        # the zeroed scratch of "z" references (plan.py): zeroed once, kept zero by its users
        self.zero_base = driver.malloc(_plan.ZERO_BYTES)
        driver.memset(self.zero_base, 0, _plan.ZERO_BYTES, self.stream)
        if self.stream is not None:
            driver.stream_synchronize(self.stream)
        self.replay = self.native is not None and os.environ.get("MLX_AMD_REPLAY", "1") != "0"
        self.programs: dict = {}           # fingerprint -> _Program
        self._seen: dict = {}              # fingerprint -> sightings before recording
        # replays make library calls (GEMMs) from native code; MLX_AMD_NATIVE_CALLS=0 keeps
        # them in Python (A/B); read when a program is recorded
        self.native_calls = os.environ.get("MLX_AMD_NATIVE_CALLS", "1") != "0"
        self.replays = 0                   # evaluations that ran through a program
        self.replay_python = 0             # nodes of those that differed and ran here
        self._leaf_consts = None           # key -> device copy of the running graph's constants
        # sibling groups by graph fingerprint (_sibling_groups), and those of the graph running
        # now with the nodes already made by their group's first node: (groups, early views,
        # families, done) or None
        self._sib_groups: dict = {}
        self._sibs = None
        self._gpu_counts = {}              # GPU nodes per primitive since the last _flush_counts
        self.graphs, self.graphs_selftest = self._resolve_graphs()
        self.threaded = self._start_launcher()
        # A program gets its graph only after this many eager replays: on the H200 a build
        # costs ~2 µs per kernel node (1.8 ms for a llama-1b decode step) and a graph launch
        # saves ~1 µs per node (decode_graphs-h200.json), so building after two eager replays
        # keeps the waste bounded (at most ~2x the better choice) for programs that run
        # only a few times (a prompt's prefill); HIP's builds are unmeasured (set it higher).
        after = os.environ.get("MLX_AMD_GRAPH_AFTER", str(GRAPH_AFTER)).strip()
        if not after.isdigit():
            raise ValueError(f"MLX_AMD_GRAPH_AFTER={after!r}: expected a count of replays >= 0")
        _bridge.set_graph_after(int(after))
        seg = os.environ.get("MLX_AMD_GRAPH_SEGMENTS", "").strip()
        try:
            first, most = (int(v) for v in seg.split(",")) if seg else GRAPH_SEGMENTS
            _bridge.set_graph_segments(first, most)
        except ValueError:
            raise ValueError(f"MLX_AMD_GRAPH_SEGMENTS={seg!r}: expected 'first,most', two launch "
                             "counts with 1 <= first <= most") from None
        # What an eval with nothing left to run waits for: "arrays" (the default: only their
        # own queued work, as MLX does; mlx-lm reads token n right after queuing step n + 1,
        # which then need not finish first) or "stream" (everything queued). With graphs the
        # difference is large: a graph's step is queued whole, so waiting for the stream
        # waits for the step just queued (docs/architecture.md, "Graphs").
        self.eval_wait = os.environ.get("MLX_AMD_EVAL_WAIT", "arrays").strip().lower()
        if self.eval_wait not in ("stream", "arrays"):
            raise ValueError(f"MLX_AMD_EVAL_WAIT={self.eval_wait!r}: expected stream or arrays")
        _OWNERS.add(residency)

    def _resolve_graphs(self) -> tuple:
        """(launch replays as CUDA/HIP graphs, a self-test must decide first), from
        ``MLX_AMD_GRAPHS``: auto (default): graphs on CUDA, eager on HIP; 0: eager; 1: graphs
        (on HIP only once ``graph_selftest`` found them equal to eager: ROCm had graph bugs
        that give wrong results, hip#3887 / clr#138); test: the self-test decides, on any
        driver. Graphs are CUDA's default since session 6: the whole GPU suite passed under
        them and mlx-lm's loop decoded faster (docs/architecture.md, "Graphs"). HIP stays
        eager until an AMD GPU has run the self-test and the suite."""
        mode = os.environ.get("MLX_AMD_GRAPHS", "auto").strip().lower()
        if mode not in ("0", "1", "auto", "test"):
            raise ValueError(f"MLX_AMD_GRAPHS={mode!r}: expected 0, 1, auto or test")
        if mode == "0" or not self.replay:
            return False, False
        api = self.driver.graph_api()
        if api is None:
            return False, False
        _bridge.set_graph_api(*api)    # available to switch on (evaluator.graphs) either way
        if not _GRAPH_EXIT[0]:
            atexit.register(_bridge.graph_api_shutdown)   # no driver calls while it unloads
            _GRAPH_EXIT[0] = True
        if mode == "auto":
            return self.driver.platform == "nvidia", False
        if mode == "1" and self.driver.platform == "nvidia":
            return True, False
        return False, True

    def _start_launcher(self) -> bool:
        """Whether replays post their launches to the launch thread (src/bridge/launcher.h),
        from ``MLX_AMD_LAUNCH_THREAD``: 1 (default) where the driver gives its entry points,
        0: replays issue their own launches (the way before session 31)."""
        mode = os.environ.get(LAUNCH_THREAD_ENV, "1").strip()
        if mode not in ("0", "1"):
            raise ValueError(f"{LAUNCH_THREAD_ENV}={mode!r}: expected 0 or 1")
        entries = self.driver.launcher_entries() if mode == "1" and self.replay else None
        if entries is None:
            return False
        _bridge.launcher_start(**entries)
        self.driver.launcher = _bridge.raw
        if not _LAUNCHER_EXIT[0]:
            # registered after graph_api_shutdown, so it runs first: nothing posted is left
            # when the graphs and the driver go away
            atexit.register(_bridge.launcher_stop)
            _LAUNCHER_EXIT[0] = True
        return True

    def _drain(self) -> None:
        """Wait until the launch thread issued everything posted; raise its first failure
        (the error of an asynchronous evaluation, as a launch here would have raised it)."""
        if not self.threaded:
            return
        _bridge.launcher_wait()
        f = _bridge.launcher_failure()
        if f is None:
            return
        status, what, fn, grid, block, args, shared_mem = f
        if what == "kernel launch":
            self.driver.launch_failed(status, ctypes.c_void_p(fn), grid, block, args, shared_mem, self.stream)
        self.driver.check(status, {"graph launch": "graph_launch", "copy": "memcpy_dtoh_async",
                                   "event record": "event_record"}.get(what, what))
        raise RuntimeError(f"mlx-amd: the launch thread's {what} failed with status {status}")

    def graph_selftest(self) -> bool:
        """Evaluate a chain of about ten distinct kernels (ROCm's bug showed past about three
        distinct kernels in one graph) through replays, eagerly and as graphs, with new
        data and new buffers each time (graph parameters updated in place); graphs stay
        on only when every result is bitwise the same. Runs where mlx-amd is enabled."""
        import warnings

        import mlx.core as mx
        import numpy as np

        def f(x):   # every node a GPU kernel (a CPU-fallback node would make replays eager)
            y = mx.sin(mx.exp(x * 0.5)) + x
            y = mx.maximum(y, -y * 0.3)
            y = mx.softmax(y * 4.0, axis=-1) - 0.001
            return y * mx.sum(y, axis=-1, keepdims=True) + mx.arange(y.shape[-1], dtype=y.dtype)

        rng = np.random.default_rng(0)
        inputs = [rng.standard_normal((64, 257)).astype(np.float32) for _ in range(6)]
        got, used, why = {}, 0, ""
        after = _bridge.graph_after()
        _bridge.set_graph_after(0)     # the graphs of this test are built at first replay
        try:
            for mode in (False, True):
                self.graphs, outs = mode, []
                before = _bridge.graph_stats()["launches"]
                for v in inputs:              # recorded at the 2nd sighting, replayed from the 3rd
                    y = f(mx.array(v))
                    mx.eval(y)
                    outs.append(np.array(y))
                got[mode] = outs
                if mode:
                    used = _bridge.graph_stats()["launches"] - before
            same = all(np.array_equal(a, b) for a, b in zip(got[False], got[True]))
            ok = used > 0 and same
            why = "they were not used" if not used else "" if same else "results differ"
        except Exception as e:   # a driver error in the graph path: eager is the answer
            ok, why = False, f"{type(e).__name__}: {e}"
        finally:
            _bridge.set_graph_after(after)
        self.graphs, self.graphs_selftest = ok, False
        if not ok:
            hint = "MLX_AMD_GRAPHS=1 forces graphs" if self.driver.platform == "nvidia" else \
                "graphs stay off on this driver; MLX_AMD_GRAPHS=0 skips the test"
            warnings.warn(f"mlx-amd: the {self.driver.platform.upper()} graph self-test failed ({why}); "
                          f"using eager launches ({hint})", RuntimeWarning, stacklevel=2)
        return ok

    # ------------------------------------------------------------------ public
    def eval(self, arrays, async_: bool = False) -> None:
        """Evaluate ``arrays``. ``async_``: return once the work is queued; each array's
        host view becomes valid when its work is done, and every read path (the patched
        array methods, later evaluations, the CPU fallback) waits for exactly that work.
        Errors of an asynchronous evaluation surface at the next read or synchronize."""
        with self.lock:
            self._drain()
            self.raise_deferred()
            # an array async_eval queued is done when eval returns; a stale host copy stays
            # stale until something reads it
            self._host_valid(arrays, download=False)
            self._reap()
            g = _bridge.Graph(arrays, async_)
            if self.eval_wait == "arrays" and len(g) == 0:
                # nothing to run: their own queued work, waited for above, is all they need
                g.release()
                self.stats.evals += 1
                return
            written: list = []
            # The node loop makes short-lived tuples by the thousand and no cycles: the cyclic
            # collector's passes over them cost 8 % of a first sighting (profile_engine --fresh)
            gc_on = gc.isenabled()
            if gc_on:
                gc.disable()
            try:
                self._run(g)
            except Exception as e:
                if not async_:
                    raise
                self._deferred = e
            finally:
                if gc_on:
                    gc.enable()
                # Also after a failure (out of memory, a driver error): the nodes that did
                # finish are available to MLX and must be readable.
                g.release()
                self._reap()
                # a replay's outputs that outlive the graph get their records (the rest
                # died in release() and went back to the pools natively)
                self.residency.adopt()
                # Everything still stale on the host is held by someone: write it back now
                # (eager), or when something reads it (lazy: read(), the CPU fallback).
                res = self.residency
                if not res.lazy:
                    res.writeback(stream=self.stream, sync=not async_, collect=written)
                elif async_ and self.stream is not None:
                    # the arrays asked for are about to be read (mlx-lm reads each token):
                    # queue their copies now so a read waits for this step only
                    keys = [inf[0] for inf in map(_bridge.buffer_info, arrays) if inf is not None]
                    res.writeback(keys, stream=self.stream, sync=False, collect=written)
                if self.stream is not None:
                    if async_:
                        self._queue_pending(arrays, written)
                    else:
                        self.synchronize()
            self.stats.evals += 1

    def synchronize(self):
        """Wait for all queued work; raise an asynchronous evaluation's deferred error."""
        with self.lock:
            self._drain()
            if self.stream is not None:
                self.driver.stream_synchronize(self.stream)
                self.residency.synchronized()
                self._retire(len(self._pending))
            self.raise_deferred()

    def raise_deferred(self):
        e, self._deferred = self._deferred, None
        if e is not None:
            raise e

    # ------------------------------------------------------- asynchronous evaluations
    # _pending: [(event, keys)] in stream order; _pending_keys: key -> position counter.
    def _queue_pending(self, arrays, written):
        keys = set(written)
        for a in arrays:
            inf = _bridge.buffer_info(a)
            if inf is not None:
                keys.add(inf[0])
        ev = self._events.pop() if self._events else self.driver.event_create(timing=False)
        self.driver.event_record(ev, self.stream)
        seq = self._pending_base + len(self._pending)
        self._pending.append((ev, keys))
        for k in keys:
            self._pending_keys[k] = seq

    def _retire(self, n):
        """The first n pending evaluations are complete."""
        for ev, keys in self._pending[:n]:
            for k in keys:
                if self._pending_keys.get(k, -1) < self._pending_base + n:
                    self._pending_keys.pop(k, None)
            self._events.append(ev)
        del self._pending[:n]
        self._pending_base += n

    def _wait_keys(self, keys):
        """Block until the work that wrote any of these buffers is done."""
        if not self._pending_keys:
            return
        last = max((self._pending_keys.get(k, -1) for k in keys), default=-1)
        if last < 0:
            return
        n = last - self._pending_base + 1
        self.driver.event_synchronize(self._pending[n - 1][0])
        self._retire(n)

    def read(self, arrays) -> None:
        """Evaluate ``arrays`` and make them readable on the host (what every read path
        calls before MLX touches their memory)."""
        with self.lock:
            self.eval(arrays)
            self._host_valid(arrays)

    def _host_valid(self, arrays, download: bool = True):
        """Make evaluated arrays readable: their queued work done and (``download``) their
        stale host copies (lazy write-back) copied back."""
        res = self.residency
        download = download and res.lazy
        if not (self._pending_keys or download):
            return
        keys = []
        for a in arrays:
            inf = _bridge.buffer_info(a)
            if inf is not None:
                keys.append(inf[0])
        if self._pending_keys:
            self._wait_keys(keys)
        if download:
            res.ensure_host(keys, self.stream)

    def flush(self):
        """Everything host-valid: queued work done, every stale host copy written back."""
        with self.lock:
            self.residency.writeback(stream=self.stream)
            self.synchronize()

    # ---------------------------------------------------------------- internals
    def _reap(self):
        freed = _bridge.drain_freed()
        if freed:
            _route_freed(freed)
        gone = _bridge.expired()
        if gone:
            for res in _OWNERS.live():  # unknown keys are ignored by each
                res.expired(gone)

    def _small_consts(self, g):
        """Device addresses of the graph's small MLX-owned leaves (scalar constants) from the
        constant cache by value, the new values in one copy, before the first launch that
        reads them: {key: device address}, consulted by ``_gpu`` before the records."""
        res = self.residency
        res.trim_consts()          # nothing of this graph is queued yet
        items, seen = [], set()
        recs = res._recs
        # (the bridge's walk over its slots: leaves with data only, no per-slot info tuple;
        # the small MLX-owned constants whose bytes the cache holds stay native: leaf_hits)
        for _, key, host, nbytes, token, ndim, size, cbytes in g.leaves(None, res.consts):
            if not cbytes or key in seen or key in recs:
                continue
            seen.add(key)
            items.append((key, host, cbytes))
        hits = g.leaf_hits()
        if items:
            hits.update(zip([k for k, _, _ in items], res.upload_consts(items, self.stream)))
        return hits or None

    def _run(self, g):
        prog = None
        if self.replay:
            fp = g.fingerprint
            known = self.programs.get(fp)
            if known is not None and len(known.program) == len(g):
                self._replay(g, known)
                return
            seen = self._seen.get(fp, 0) + 1
            if seen >= 2:
                self._seen.pop(fp, None)
                prog = _bridge.Program(fp, len(g))
                prog.zero_base = self.zero_base
            else:
                if len(self._seen) > 1024:
                    self._seen.clear()
                self._seen[fp] = seen
        if self.native is not None:
            self.driver.ensure_bound()   # direct launches (Evaluator._single) skip the check
        metas = _Metas(g)   # slot rows on demand: a plan-cache hit needs none (Graph.node_key)
        saved = self._leaf_consts, self._sibs   # (an evaluation inside a CPU fallback's callback)
        self._leaf_consts = self._small_consts(g) if self.gpu else None
        nodes = g.nodes
        groups = self._sibling_groups(g, nodes) if SIBLINGS and self.gpu else None
        self._sibs = groups + (set(),) if groups else None
        node, run_views, i, end = self._node, g.run_views, 0, len(nodes)
        try:
            while i < end:
                prim, params, ins, outs = nodes[i]
                if prim in VIEW_PRIMITIVES:   # this view and the ones after it, natively
                    j, freed = run_views(i, prog)
                    if freed:
                        _route_freed(freed)
                    if j > i:
                        i = j
                        continue
                node(g, metas, i, prim, params, ins, outs, prog)
                i += 1
        finally:
            self._leaf_consts, self._sibs = saved
            self._flush_counts(g)
        if prog is not None:
            self._keep(prog)

    def _flush_counts(self, g) -> None:
        """Add the node counts kept outside the stats (native view runs, GPU nodes) to them."""
        by_prim = self.stats.by_prim
        for name, c in g.view_counts():
            by_prim[name]["view"] += c
        counts = self._gpu_counts
        if counts:
            for name, c in counts.items():
                by_prim[name]["gpu"] += c
            counts.clear()

    def _sibling_groups(self, g, nodes) -> dict:
        """({first node: (sibling nodes...)}, {sibling: views to make first}, {first node:
        family}) of graph g (cached by its structure), or {} when it has none: nodes of a
        SIBLINGS primitive with equal parameters on the same first input, in order, up to
        1 + MAX_SIBLINGS a group; PAIRS, a node with the node reading its output first; and
        TWINS, a node with the next of its primitive and parameters whose inputs are there
        when it runs (within TWIN_WINDOW nodes). Then ({pair's first node: (chain nodes,
        family, view slots the chain makes, {chain node: views to make right after its
        launch})}, {chain node: views to make first}): CHAINS, a pair with the sibling group
        (or the one SIBLINGS node) reading the pair's output first, tried as one plan before
        the pair and the group alone; and TAILS, a sibling group with the node reading its
        outputs (as a chain of the group's first node; also at the end of the chain whose
        projections the group is).
        Whether a group runs as one is its family's call (``plan_siblings``), at its first
        node."""
        fp = g.fingerprint
        cached = self._sib_groups.get(fp)
        if cached is not None:
            return cached
        if len(self._sib_groups) >= 1024:
            self._sib_groups.clear()
        # most graphs have no node that could group: one cheap pass says so (first
        # sightings of new structures pay it per node)
        grouping = set(SIBLINGS).union([second for _, second in PAIRS], TWINS)
        if not any([n[0] in grouping for n in nodes]):
            self._sib_groups[fp] = {}
            return {}
        # a first input reached through views (MLX's matmul reshapes x at each call) counts
        # as the same input when the views are the same: (prim, params) down to one slot
        made, canon = {}, {}

        def key_of(slot):
            k = canon.get(slot)
            if k is None:
                n = made.get(slot)
                if n is None or nodes[n][0] not in VIEW_PRIMITIVES or len(nodes[n][2]) != 1:
                    k = slot
                else:
                    k = (nodes[n][0], nodes[n][1], key_of(nodes[n][2][0]))
                canon[slot] = k
            return k

        by_key: dict = {}
        pairs, twin_nodes = [], {}
        for i, (prim, params, ins, outs) in enumerate(nodes):
            for o in outs:
                made[o] = i
            if prim in SIBLINGS and ins:
                by_key.setdefault((prim, params, key_of(ins[0])), []).append(i)
            if PAIRS and ins and ins[0] in made:
                fam = PAIRS.get((nodes[made[ins[0]]][0], prim))
                if fam is not None:
                    pairs.append((made[ins[0]], i, fam))
            if prim in TWINS:
                twin_nodes.setdefault((prim, params), []).append(i)
        groups, early, fams = {}, {}, {}
        taken = set()
        for i, f, fam in pairs:   # a node reading another's output first: planned with it
            if i not in taken and f not in taken:
                taken.update((i, f))
                groups[i], fams[i] = (f,), fam
        for members in by_key.values():
            members = [m for m in members if m not in taken]
            for j in range(0, len(members) - 1, 1 + MAX_SIBLINGS):
                chunk = members[j: j + 1 + MAX_SIBLINGS]
                if len(chunk) > 1:
                    groups[chunk[0]] = tuple(chunk[1:])
        # where each node runs: a group's members with its first (k and v projections
        # with q's, ahead of q's RoPE in MLX's order)
        at = {f: lead for lead, fs in groups.items() for f in fs}

        def ready_at(slots, lead):
            """Every slot computed before node ``lead`` runs (or a leaf), or a view of
            one made later by single-input views (made early); not ``lead``'s output."""
            for s in slots:
                while s in made and at.get(made[s], made[s]) > lead:
                    m = made[s]
                    if nodes[m][0] not in VIEW_PRIMITIVES or len(nodes[m][2]) != 1:
                        return False
                    s = nodes[m][2][0]
                if made.get(s) == lead:
                    return False
            return True

        twin_pairs = []
        if twin_nodes:
            # primitives in the order they first appear (a model's norms before its RoPE)
            for members in twin_nodes.values():
                k = 0
                while k + 1 < len(members):
                    i, f = members[k], members[k + 1]
                    if f - i <= TWIN_WINDOW and i not in taken and f not in taken and ready_at(nodes[f][2], i):
                        taken.update((i, f))
                        groups[i], fams[i] = (f,), TWINS[nodes[i][0]]
                        at[f] = i   # (Qwen 3's k norm with q's: then k's RoPE can join q's)
                        twin_pairs.append((i, f))
                        k += 2
                    else:
                        k += 1

        def views_of(f, lead):
            """The views that make node f's inputs after ``lead`` (W.T, x reshaped), in order."""
            views = []
            for slot in nodes[f][2]:
                chain = []
                while slot in made and made[slot] > lead and nodes[made[slot]][0] in VIEW_PRIMITIVES \
                        and len(nodes[made[slot]][2]) == 1:
                    chain.append((made[slot], nodes[made[slot]][3][0], nodes[made[slot]][2][0]))
                    slot = nodes[made[slot]][2][0]
                views += reversed(chain)
            return tuple(views)

        for lead, followers in groups.items():
            for f in followers:
                views = views_of(f, lead)
                if views:
                    early[f] = views
        chains, chain_early = {}, {}
        if CHAINS and pairs:
            # the projections of a pair's output: the first sibling group on it (or the one
            # node), whose other inputs are there when the pair runs
            on_slot: dict = {}
            for key, members in by_key.items():
                root = key[2]
                while isinstance(root, tuple):   # x through views (MLX's matmul flattens it)
                    root = root[2]
                on_slot.setdefault(root, []).append((key[0], members))
            for i, f, _fam in pairs:
                readers = CHAINS.get((nodes[i][0], nodes[f][0]))
                if not readers or groups.get(i) != (f,):
                    continue
                for prim, members in on_slot.get(nodes[f][3][0], ()):
                    run = tuple(members[: 1 + MAX_SIBLINGS])
                    if prim not in readers or not all(ready_at(nodes[c][2][1:], i) for c in run):
                        continue
                    # views of the pair's outputs (x flattened) cannot be made first: the plan
                    # makes their input; they are made right after it, before their reader
                    # finishes (``late``)
                    here = set(nodes[i][3]) | set(nodes[f][3])
                    late = {}
                    for c in run:
                        views = []
                        for v in views_of(c, i):
                            if v[2] in here:
                                here.add(v[1])
                                late.setdefault(c, []).append(v)
                            else:
                                views.append(v)
                        if views:
                            chain_early[c] = tuple(views)
                    chains[i] = (run, readers[prim], frozenset(here - set(nodes[i][3]) - set(nodes[f][3])),
                                 {c: tuple(v) for c, v in late.items()})
                    break
        if TWIN_CHAINS and len(twin_pairs) > 1:
            # a twin pair (q's and k's RoPE) and a later one whose first reads the pair's second
            # output as its update (the k cache write of k's rotation; the v write its twin),
            # the later pair's other inputs there when the first runs: one plan
            by_update = {nodes[j][2][1]: (j, h) for j, h in twin_pairs if len(nodes[j][2]) == 2}
            for i, f in twin_pairs:
                if i in chains or not nodes[f][3]:
                    continue
                jh = by_update.get(nodes[f][3][0])
                if jh is None or jh[0] <= f or jh[0] in chains:
                    continue
                j, h = jh
                fam = TWIN_CHAINS.get((nodes[i][0], nodes[j][0]))
                if fam is None or not (ready_at(nodes[j][2][:1], i) and ready_at(nodes[h][2], i)):
                    continue
                for c in (j, h):
                    views = views_of(c, i)
                    if views:
                        chain_early[c] = views
                chains[i] = ((j, h), fam, frozenset(), {})
        if TAILS:
            # a node reading the outputs of a sibling group, one input each in the group's
            # order (an MLP's swiglu of its gate and up), that the family plans with the group
            # (TAILS_AFTER, tail_ok): run with the group as a chain of it, and at the end of a
            # chain whose projections the group is
            by_ins: dict = {}
            for t, n in enumerate(nodes):
                if len(n[2]) > 1:
                    by_ins.setdefault(tuple(n[2]), t)
            for lead, fs in groups.items():
                if lead in fams or lead in chains:    # pairs and twins
                    continue
                members = (lead,) + fs
                t = by_ins.get(tuple(nodes[m][3][0] if nodes[m][3] else -1 for m in members))
                fam = TAILS.get((nodes[lead][0], nodes[t][0])) if t is not None else None
                if fam is None or t in taken or (hasattr(fam, "tail_ok") and not fam.tail_ok(nodes[t])):
                    continue
                for c, ch in list(chains.items()):
                    if ch[0] == members and ch[1] is fam:
                        chains[c] = (members + (t,),) + ch[1:]
                chains[lead] = ((t,), fam, frozenset(), {})
        cached = self._sib_groups[fp] = (groups, early, fams, chains, chain_early) if groups else {}
        return cached

    def _early_views(self, g, views, done, prog) -> bool:
        """Make the views that produce a sibling's inputs now (they come after its group's
        first node: W.T, a reshaped x); False if one cannot be made."""
        for v, out_slot, in_slot in views or ():
            # made already, here or natively (a replay that handed the group's first node
            # back made its siblings' views first; a view read only by the next view of a
            # chain then has its slot released, so ask the node, not the slot)
            if v in done or g.finished(v):
                continue
            # its input made by a node still to run (a backward pass's): no early view
            if g.info(in_slot) is None or not g.try_view(v):
                return False
            if prog is not None:
                g.record(prog, v, 1)
            g.finish(v)
            done.add(v)
        return True

    def _node(self, g, metas, i, prim, params, ins, outs, prog=None):
        """Evaluate node i (view, GPU plan or CPU fallback) and finish it; with ``prog``,
        record what was done. Returns [(key, device address)] of fresh output buffers."""
        fresh = ()
        sibs = self._sibs
        if sibs is not None:
            groups, early, fams, chains, chain_early, done = sibs
            if i in done:                # computed (and finished) with an earlier node
                self.stats.by_prim[prim]["view" if prim in VIEW_PRIMITIVES else "gpu"] += 1
                return ()
            group = groups.get(i)
            if group is not None:
                fresh = False
                chain = chains.get(i)
                late = None
                if chain is not None:    # the pair and the projections of its output as one
                    run, fam, views_here, late = chain
                    full = group + run
                    if all(f not in done for f in full) and \
                            all(self._early_views(g, early.get(f), done, prog) for f in group) and \
                            all(self._early_views(g, chain_early.get(f), done, prog) for f in run):
                        fresh = self._gpu(g, metas, fam, prim, params, ins, outs, prog, i, full, views_here)
                        group = full if fresh else group
                if not fresh:
                    group = tuple(f for f in group if f not in done and self._early_views(g, early.get(f), done, prog))
                    fam = fams.get(i) or SIBLINGS.get(prim)
                    fresh = self._gpu(g, metas, fam, prim, params, ins, outs, prog, i, group) \
                        if group and fam is not None else False
                if fresh:
                    done.update(group)
                    self.stats.by_prim[prim]["gpu"] += 1
                    g.finish(i)     # first: a sibling may be the last reader of its output
                    for f in group:
                        if late and f in late and not self._early_views(g, late[f], done, prog):
                            raise RuntimeError(f"mlx-amd: a view of a chain's output for node {f} could not be made")
                        g.finish(f)
                    freed = _bridge.drain_freed()
                    if freed:
                        _route_freed(freed)
                    return fresh if fresh is not True else ()
                fresh = ()
        if prim in VIEW_PRIMITIVES:
            done = g.view_node(i, prog)   # try_view, record, finish: one native call
            if done is not False:
                self.stats.by_prim[prim]["view"] += 1
                if done is not True:
                    _route_freed(done)
                return ()
        fam = DISPATCH.get(prim) if self.gpu else None
        done = fam is not None and self._gpu(g, metas, fam, prim, params, ins, outs, prog, i)
        if done:
            fresh = done
            counts = self._gpu_counts   # a plain dict: merged into the stats once per graph (_run)
            counts[prim] = counts.get(prim, 0) + 1
        else:
            if prog is not None:
                g.record(prog, i, 0)
            self._fallback(g, i, ins, outs)
            self.stats.by_prim[prim]["cpu"] += 1
            g.finish(i)
            # MLX allocated (and may have freed) host memory: learn of dead
            # buffers before an address can come back under a new array.
            self._reap()
            return ()
        freed = g.finish(i, True)
        if freed:
            _route_freed(freed)
        return fresh if fresh is not True else ()

    # ------------------------------------------------------------------- replay
    def _keep(self, prog):
        kinds = prog.kinds()
        if not any(k == "gpu" for _, k in kinds):
            return
        if len(self.programs) >= 256:
            self.drop_programs()
        self.programs[prog.fingerprint] = _Program(prog, kinds)

    def drop_programs(self) -> None:
        """Forget every recorded program (and destroy their graphs now)."""
        for p in self.programs.values():
            p.program.release_graph()
        self.programs.clear()

    def _replay(self, g, known) -> None:
        """Evaluate g through a recorded program. Nodes that differ from the recording run
        through ``_node``, one at a time."""
        res, stream, prog = self.residency, self.stream, known.program
        leaf_dev, small, rest, cache = {}, [], [], []
        recs = res._recs
        # the program's native leaf cache holds the resident leaves (weights, caches) of
        # earlier replays: drop what went stale since, then only the others come back here
        known.leaf_seen = res.sync_leaf_cache(prog, known.leaf_seen)
        res.trim_consts()
        # one pass; a resident, current leaf costs one lookup (and is cached for the next
        # replay), a small constant whose value has a device copy costs nothing here (the
        # bridge found it in res.consts), the rest are uploaded below
        for slot, key, host, nbytes, token, ndim, size, cbytes in g.leaves(prog, res.consts):
            if key in leaf_dev:
                continue
            rec = recs.get(key)
            if rec is not None:
                if rec.current(host, nbytes):
                    leaf_dev[key] = rec.dev_ptr
                    cache.append((key, host, nbytes, rec.dev_ptr))
                    continue
            elif token == -1:
                if cbytes:   # a small constant: by value, its addressed bytes (replay.cpp)
                    leaf_dev[key] = None
                    small.append((key, host, cbytes))
                    continue
                g.watch(slot)  # MLX-owned: the bridge tells us when its host buffer dies
            leaf_dev[key] = None
            rest.append((key, host, nbytes))
        if small:
            for (key, _, _), dev in zip(small, res.upload_consts(small, stream)):
                leaf_dev[key] = dev
        for (key, _, _), dev in zip(rest, res.device_ptrs(rest, stream)):
            leaf_dev[key] = dev
        if cache:
            prog.cache_leaves(cache)
        arena = res.device_pool.alloc(prog.arena_bytes) if prog.arena_bytes else None
        apply = res.written_ranges   # [(key, lo, hi)], lo < 0: all
        metas = _Metas(g)

        rerecorded = []

        def node_cb(n, written, rerecord):
            # rerecord: a GPU node of the recorded kind at other shapes or parameters (a KV
            # cache that grew, an SDPA decode past its planned split count): its new plan
            # becomes the recording
            apply(written)
            res.adopt()   # Python's records must cover every buffer made so far
            prim, params, ins, outs = g.node(n)
            if rerecord:
                rerecorded.append(n)
            return list(self._node(g, metas, n, prim, params, ins, outs, prog if rerecord else None))

        def error_cb(n, status, fn, grid, block, args, shared_mem):
            if n < 0 and not fn:     # the graph of the program failed to launch
                self.driver.check(status, "graph_launch")
            self.driver.launch_failed(status, ctypes.c_void_p(fn), grid, block, args, shared_mem, stream)

        self.driver.ensure_bound()
        saved_sibs = self._sibs   # nodes handed back run with their graph's sibling groups
        groups = self._sib_groups.get(prog.fingerprint) if SIBLINGS else None
        self._sibs = groups + (set(),) if groups else None
        try:
            written, python_nodes = g.replay(
                prog, leaf_dev, res.outputs, arena.data if arena is not None else 0,
                self.native._entry, self.native._end, stream.value if stream is not None else 0,
                node_cb, error_cb, self.graphs, self.threaded)
        finally:
            self._sibs = saved_sibs
            self._flush_counts(g)   # the nodes handed back to _node
            if arena is not None:
                res.device_pool.free(arena)   # stream order: later users queue behind
        apply(written)
        self.replays += 1
        self.replay_python += len(python_nodes)
        by_prim = self.stats.by_prim
        for (name, k), c in known.counts:
            by_prim[name][k] += c
        for n in python_nodes:
            name, k = known.kinds[n]
            if k != "python":
                by_prim[name][k] -= 1
        if rerecorded:
            known.refresh()
        if len(python_nodes) * 2 > len(prog):   # mostly different from the recording
            self.programs.pop(prog.fingerprint, None)
            prog.release_graph()
        freed = _bridge.drain_freed()
        if freed:
            _route_freed(freed)

    def _gpu(self, g, metas, fam, prim, params, ins, outs, prog=None, i=-1, siblings=(), views_here=()):
        """Run one node through its family's plan; False: no plan covers it (fallback).
        Else [(key, device address)] of the fresh output buffers (or True: none).
        ``siblings``: later nodes (same primitive on the same first input, or the node
        reading this one's output: _sibling_groups) to compute in the same plan if the
        family's ``plan_siblings`` takes them;
        False if it does not (then nothing ran). Their inputs and outputs follow the node's
        own in the plan's references; the caller finishes them after the node. ``views_here``:
        slots of views of the group's outputs (made later) that the plan does not read."""
        sizes = in_sig = None
        if siblings:
            sizes = [(len(ins), len(outs), prim, params)]
            ins, outs = list(ins), list(outs)
            for f in siblings:
                f_prim, f_params, f_ins, f_outs = g.node(f)
                sizes.append((len(f_ins), len(f_outs), f_prim, f_params))
                ins += f_ins
                outs += f_outs
            sizes = tuple(sizes)
            own = set(outs).union(views_here)
            # a sibling's input that an earlier member makes (an Add's sum its RMSNorm reads,
            # the norm's output the projections of a chain read, or a view of it): row-major,
            # made by the same launch; the plan does not read it as an input
            infos = [_made_here(metas[s]) if s in own else g.info(s) for s in ins]
            if None in infos:
                return False
            itemsizes = [_ITEMSIZE[metas[s][1]] for s in ins]
            in_sig = _in_sig(metas, ins, infos)   # a group's signature: plain tuples
            sig = (prim, params, in_sig, tuple([metas[o] for o in outs]), sizes)
        else:
            # one node: the bridge packs its layouts into bytes (Graph.node_key) and hands its
            # inputs' info rows over in the same call
            got = g.node_key(i)
            if got is None:
                return False
            key_bytes, infos, itemsizes = got
            sig = (prim, params, key_bytes)
        entry = self.plans.get(sig)
        if entry is None:
            if in_sig is None:   # Layouts are built on a miss only
                in_sig = _in_sig(metas, ins, infos)
            out_sig = tuple([metas[o] for o in outs])
            if len(self.plans) >= MAX_PLANS:
                for k in list(self.plans)[: MAX_PLANS // 2]:   # the oldest half
                    del self.plans[k]
            entry = self.plans[sig] = self._plan(fam, prim, params, in_sig, out_sig, sizes)
        plan, out_nbytes, single = entry
        if plan is None:
            return False
        res = self.residency
        stream = self.stream
        recs = res._recs
        consts = self._leaf_consts
        in_ptrs = []
        for s, inf in zip(ins, infos):
            if inf[0] is None:               # made by this plan (siblings): never read as input
                in_ptrs.append(0)
                continue
            if consts is not None:
                dev = consts.get(inf[0])
                if dev is not None:          # a small constant: its value's device copy
                    in_ptrs.append(dev + inf[2])
                    continue
            rec = recs.get(inf[0])
            # (rec.current(host, nbytes), inline: this loop runs for every input of every node)
            if rec is not None and rec.dev_valid and (rec.ours or (rec.host_ptr == inf[1] and rec.nbytes == inf[5])):
                in_ptrs.append(rec.dev_ptr + inf[2])
                continue
            if inf[9] == -1 and rec is None:
                g.watch(s)  # MLX-owned: the bridge tells us when its host buffer dies
            in_ptrs.append(res.device_ptr(inf[0], inf[1], inf[5], stream) + inf[2])
        out_ptrs, keys, donated = [], [], []
        for j, o in enumerate(outs):
            nbytes = out_nbytes[j]
            key = None
            for oj, ii in plan.donate:
                inf = infos[ii]
                # an input buffer nobody else holds: ours, same bytes, plain layout
                if (oj == j and inf[9] != -1 and inf[5] == nbytes and inf[2] == 0 and inf[6]
                        and inf[4] * itemsizes[ii] == nbytes
                        and inf[0] not in keys and g.donatable(ins[ii])):
                    g.share(o, ins[ii])
                    key, ptr = inf[0], in_ptrs[ii]
                    break
            if key is None:
                key, host, ptr = res.new_buffer(nbytes)
                g.attach(o, host, key)
                donated.append(False)
            else:
                donated.append(True)
            keys.append(key)
            out_ptrs.append(ptr)
        if prog is not None:
            g.record(prog, i, 2)
            if siblings:
                for f in siblings:
                    g.record(prog, f, 3)
                prog.set_siblings(i, list(siblings))
            self._record(prog, i, plan, out_nbytes, in_ptrs, out_ptrs)
        if single is not None and self.native is not None:
            # one kernel on the node's own buffers (most nodes): what run_plan would do,
            # without its per-step dispatch (first sightings run this per node); bound to
            # the launcher it was made for (a test may put another in its place)
            if single.launcher is self.native and single.direct is not None:
                status = single.direct(in_ptrs, out_ptrs)
                if status:
                    self.driver.launch_failed(status, single.function, single.grid, single.block,
                                              _single_args(single, in_ptrs, out_ptrs), single.shared_mem, stream)
            else:
                self.native(single.function, single.grid, single.block, _single_args(single, in_ptrs, out_ptrs),
                            single.shared_mem, stream)
        else:
            self.run_plan(plan, in_ptrs, out_ptrs, donated)
        fresh = []
        dirty = res._dirty
        for j, key in enumerate(keys):
            rec = recs.get(key)
            if rec is not None and not (donated[j] and plan.written):
                # res.written(key) for the whole buffer, inline (every output of every node)
                if rec.lo >= rec.hi:
                    dirty.add(key)
                rec.lo, rec.hi = 0, rec.nbytes
            else:
                res.written(key, plan.written[j] if donated[j] and plan.written else None)
            if not donated[j]:
                fresh.append((key, out_ptrs[j]))
        return fresh or True

    def _record(self, prog, i, plan, out_nbytes, in_ptrs, out_ptrs):
        """Hand node i's plan to the program as native steps (temporaries at offsets of
        one arena: one stream, so every node can reuse it). A host call that can say how
        to make its library call natively (``native(ctx, ptrs)``: GEMMs) becomes a native
        step, with its Python callable as the fallback; ``in_ptrs``/``out_ptrs`` (this
        sighting's addresses) give the alignment its library set-up is chosen for."""
        memo = self._recorded.get(id(plan))
        if memo is not None and memo[0] is plan:     # (a plan of launches and memsets only)
            prog.set_gpu(i, tuple(out_nbytes), *memo[1:], plan.rebind)
            return
        offs, total = [], 0
        for n in plan.temps:
            offs.append(total)
            total += (n + 255) & ~255
        stream, driver = self.stream, self.driver
        arena = 1 << 40     # stands for the arena's base here: only its 256-byte alignment counts

        def refs_of(refs):
            return [("t", 0, offs[r[1]] + r[2]) if r[0] == "t" else (r[0], r[1], r[2]) for r in refs]

        bases = [arena + o for o in offs]

        def address(r):
            return _resolve(r, in_ptrs, out_ptrs, bases, self.zero_base)

        def convert(steps, init_out):
            out = []
            for st in steps:
                if type(st) is _Launch:
                    if st.empty:
                        continue
                    fn = st.function if st.function is not None else self.modules.function(st.family, st.kernel)
                    refs = st.refs
                    if refs is None:
                        refs = [("i", k, 0) for k in range(st.n_ptrs - 1)] + [("o", 0, 0)]
                    out.append(("L", fn.value, st.grid, st.block, st.shared_mem, refs_of(refs), st.tail, init_out))
                elif type(st) is _Memset:
                    if st.nbytes:
                        out.append(("C", _MemsetStep(driver, st.value, st.nbytes, stream), refs_of([st.ref]), init_out))
                else:
                    call = _HostStep(st.fn, stream, self)
                    nat = None
                    if self.native_calls and hasattr(st.fn, "native"):
                        nat = st.fn.native(self, [address(r) for r in st.refs])
                    if nat is None:
                        out.append(("C", call, refs_of(st.refs), init_out))
                    else:
                        out.append(("N", call, refs_of(st.refs), init_out, nat))
            return out

        steps = []
        for j, init in plan.init:
            steps += convert(init, j)
        steps += convert(plan.steps, -1)
        written = [w for w in plan.written] if plan.written else []
        donate = [tuple(d) for d in plan.donate]
        prog.set_gpu(i, tuple(out_nbytes), donate, written, steps, total, plan.rebind)
        # Without host calls (whose native set-up depends on this sighting's addresses) the
        # converted steps depend on the plan alone: a prompt of a new length re-records
        # every node of a replayed program, mostly with plans seen before.
        if all(type(st) is not _plan.HostCall for st in plan.steps) and \
                all(type(st) is not _plan.HostCall for _, init in plan.init for st in init):
            if len(self._recorded) >= MAX_PLANS:
                self._recorded.clear()
            self._recorded[id(plan)] = (plan, donate, written, steps, total)

    def run_plan(self, plan, in_ptrs, out_ptrs, donated=None):
        """Queue a plan's steps on given device addresses: temporaries from the pool for the
        steps, ``init`` steps for every output not in ``donated`` (per output: took over its
        input's buffer)."""
        temps = [self.residency.device_pool.alloc(n) for n in plan.temps] if plan.temps else ()
        bases = [t.data for t in temps]
        try:
            for j, steps in plan.init:
                if not (donated and donated[j]):
                    self._steps(steps, in_ptrs, out_ptrs, bases)
            self._steps(plan.steps, in_ptrs, out_ptrs, bases)
        finally:
            # stream order: whatever reuses a temporary is queued after these steps
            for t in temps:
                self.residency.device_pool.free(t)

    def _steps(self, steps, in_ptrs, out_ptrs, temps):   # temps: base addresses
        stream = self.stream
        for st in steps:
            if type(st) is _Launch:
                if st.empty:
                    continue
                refs = st.refs
                if refs is None:
                    ptrs = tuple(in_ptrs[: st.n_ptrs - 1]) + (out_ptrs[0],)
                else:
                    ptrs = tuple(_resolve(r, in_ptrs, out_ptrs, temps, self.zero_base) for r in refs)
                _launch(st, self.modules, self.driver, ptrs, stream, self.native)
            elif type(st) is _Memset:
                if st.nbytes:
                    self.driver.memset(_resolve(st.ref, in_ptrs, out_ptrs, temps, self.zero_base), st.value, st.nbytes, stream)
            else:
                st.fn(tuple(_resolve(r, in_ptrs, out_ptrs, temps, self.zero_base) for r in st.refs), stream, self)

    def _plan(self, fam, prim, params, in_sig, out_sig, sizes=None):
        """(plan or None, bytes per output) for a node signature; ``sizes``: (inputs,
        outputs, primitive, parameters) of each node of a sibling group, whose layouts are
        concatenated."""
        ins = tuple(Layout(m[0], st, m[1], ds, row, contig) for m, st, ds, row, contig in in_sig)
        outs = tuple(Layout.row_major(shape, dtype) for shape, dtype, _ in out_sig)
        nbytes = tuple(o.size * _ITEMSIZE[o.dtype] for o in outs)
        # the bridge gives a one-value state() as the bare value; launchers take tuples
        as_tuple = lambda v: v if isinstance(v, tuple) else (() if v is None else (v,))  # noqa: E731
        p = as_tuple(params)
        try:
            if sizes is not None:
                nodes, a, b = [], 0, 0
                for n_in, n_out, m_prim, m_params in sizes:
                    nodes.append(_plan.Node(m_prim, as_tuple(m_params), ins[a: a + n_in], outs[b: b + n_out]))
                    a, b = a + n_in, b + n_out
                plan = fam.plan_siblings(nodes, self.props)
                if plan is not None and plan.rebind is not None:
                    raise ValueError("a sibling plan takes no rebind")
            else:
                plan = fam.plan_node(_plan.Node(prim, p, ins, outs), self.props)
        except Exception as e:
            raise RuntimeError(f"mlx-amd: planning {prim} (family {fam.FAMILY}) for inputs "
                               f"{[(l.shape, l.dtype) for l in ins]} failed: {type(e).__name__}: {e}") from e
        return plan, nbytes, self._single(plan, len(ins))

    def _single(self, plan, n_ins):
        """A _Single when ``plan`` is one non-empty kernel launch on the node's own buffers
        (no temporaries, no init steps; bridge.launch_refs builds the argument struct of its
        direct launch), else None."""
        if plan is None or plan.temps or plan.init or len(plan.steps) != 1:
            return None
        st = plan.steps[0]
        if type(st) is not _Launch or st.empty:
            return None
        refs = st.refs
        if refs is not None:
            if any(r.kind not in ("i", "o") for r in refs) or len(refs) != st.n_ptrs:
                return None
            refs = None if tuple(refs) == _plan.default_refs(n_ins) else \
                tuple((r.kind == "o", r.index, r.offset) for r in refs)
        elif st.n_ptrs != n_ins + 1:
            return None
        fn = st.function if st.function is not None else self.modules.function(st.family, st.kernel)
        # the launch with everything but the node's pointers bound: one native call a node,
        # which also builds the argument struct (the native launcher's Python method, its
        # thread check and packing in Python cost ~0.5 us a launch)
        native, direct = self.native, None
        # (a launcher that must see every launch, e.g. a test counting them, sets
        # direct_launches = False)
        if native is not None and getattr(native, "direct_launches", True) and getattr(native, "_entry", None):
            stream = self.stream.value if self.stream is not None else 0
            packed = b"" if refs is None else struct.pack(f"<{3 * len(refs)}q", *[v for r in refs for v in r])
            direct = functools.partial(_bridge.launch_refs, native._entry, native._end, fn.value or 0,
                                       *st.grid, *st.block, st.shared_mem, stream or 0, st.tail, packed)
        return _Single(fn, st.grid, st.block, st.shared_mem, _pointers(st.n_ptrs).pack, st.tail, refs, native, direct)

    def _fallback(self, g, node, ins, outs):
        res = self.residency
        infos = [g.info(s) for s in ins]
        if self._pending_keys:   # host copies an asynchronous evaluation has not landed yet
            self._wait_keys([inf[0] for inf in infos if inf is not None])
        res.ensure_host([inf[0] for inf in infos if inf is not None and inf[9] != -1], self.stream)
        g.eval_cpu(node)
        for s in outs:
            inf = g.info(s)
            if inf is not None:
                res.host_written(inf[0])


class _Program:
    __slots__ = ("program", "kinds", "counts", "leaf_seen")

    def __init__(self, program, kinds, leaf_seen=0):
        self.program, self.kinds = program, kinds
        self.leaf_seen = leaf_seen     # residency's invalidation log position it has applied
        # what a replay adds to the statistics (nodes handed back to Python count there)
        self.counts = tuple(collections.Counter(nk for nk in kinds if nk[1] != "python").items())

    def refresh(self):
        """After nodes were recorded again: their kinds may have changed."""
        self.__init__(self.program, self.program.kinds(), self.leaf_seen)


class _Metas:
    """``g.arrays`` row by row (no whole table): for plan-cache misses, sibling groups and
    nodes a replay hands back."""

    __slots__ = ("g",)

    def __init__(self, g):
        self.g = g

    def __getitem__(self, s):
        return self.g.meta(s)


class _MemsetStep:
    __slots__ = ("driver", "value", "nbytes", "stream")

    def __init__(self, driver, value, nbytes, stream):
        self.driver, self.value, self.nbytes, self.stream = driver, value, nbytes, stream

    def __call__(self, ptrs):
        self.driver.memset(ptrs[0], self.value, self.nbytes, self.stream)


class _HostStep:
    __slots__ = ("fn", "stream", "ev")

    def __init__(self, fn, stream, ev):
        self.fn, self.stream, self.ev = fn, stream, ev

    def __call__(self, ptrs):
        self.fn(ptrs, self.stream, self.ev)
