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
the node's signature (primitive, parameters, input/output layouts).
"""

from __future__ import annotations

import collections
import threading
import weakref
from typing import Callable, Optional

from . import bridge as _bridge
from .launch import run as _launch
from .ops import binary as _binary
from .ops import copy as _copy
from .ops import unary as _unary
from .ops.elementwise import Layout

# MLX's view primitives: the bridge makes them zero-copy when MLX would.
# (Copy is a view too: MLX's CPU Copy shares its input's buffer; Contiguous only when
# its input already is; the bridge returns False where a real copy is needed.)
VIEW_PRIMITIVES = frozenset({
    "Reshape", "Transpose", "Broadcast", "BroadcastAxes", "Slice", "ExpandDims",
    "Squeeze", "AsStrided", "Flatten", "Unflatten", "StopGradient", "Depends", "View",
    "Copy", "Contiguous", "Split", "CustomTransforms",
})


def _row_strides(shape):
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


class _Family:
    """A launcher module plus its primitive table: the support table for one family."""

    __slots__ = ("name", "module", "primitives")

    def __init__(self, name, module):
        self.name, self.module, self.primitives = name, module, module.PRIMITIVES


FAMILIES = [_Family("unary", _unary), _Family("binary", _binary), _Family("copy", _copy)]
# primitive class name -> family, built once from the launchers' own tables
DISPATCH = {prim: fam for fam in FAMILIES for prim in fam.primitives}


# Every live evaluator's residency. The bridge's queue of freed tokens is process-wide
# (a deleter cannot know whose buffer it frees), so tokens are routed to their owner;
# tokens nobody owns (the bridge's own tests attach buffers too) are counted and dropped.
_OWNERS: "weakref.WeakSet" = weakref.WeakSet()
foreign_frees = 0


def _route_freed(tokens):
    global foreign_frees
    for res in list(_OWNERS):
        mine = [t for t in tokens if res.owns(t)]
        if mine:
            res.freed(mine)
            if len(mine) == len(tokens):
                return
            tokens = [t for t in tokens if t not in set(mine)]
    foreign_frees += len(tokens)


class Stats:
    """Nodes evaluated per primitive class and path: how coverage is measured."""

    def __init__(self):
        self.by_prim = collections.defaultdict(lambda: collections.Counter())
        self.evals = 0

    def count(self, prim, where):
        self.by_prim[prim][where] += 1

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
        self.stats = Stats()
        self.lock = threading.RLock()
        _OWNERS.add(residency)

    # ------------------------------------------------------------------ public
    def eval(self, arrays) -> None:
        with self.lock:
            self._reap()
            g = _bridge.Graph(arrays)
            try:
                self._run(g)
            finally:
                # Also after a failure (out of memory, a driver error): the nodes that did
                # finish are available to MLX and must be readable.
                g.release()
                self._reap()
                # Everything still stale on the host is held by someone: write it back.
                self.residency.writeback(stream=self.stream)
                if self.stream is not None:
                    self.driver.stream_synchronize(self.stream)
                    self.residency.synchronized()
            self.stats.evals += 1

    def synchronize(self):
        if self.stream is not None:
            self.driver.stream_synchronize(self.stream)

    # ---------------------------------------------------------------- internals
    def _reap(self):
        freed = _bridge.drain_freed()
        if freed:
            _route_freed(freed)
        gone = _bridge.expired()
        if gone:
            for res in list(_OWNERS):  # unknown keys are ignored by each
                res.expired(gone)

    def _run(self, g):
        metas = g.arrays
        count = self.stats.count
        for i, (prim, params, ins, outs) in enumerate(g.nodes):
            if prim in VIEW_PRIMITIVES and g.try_view(i):
                count(prim, "view")
            else:
                fam = DISPATCH.get(prim) if self.gpu else None
                if fam is not None and self._elementwise(g, metas, fam, prim, params, ins, outs):
                    count(prim, "gpu")
                else:
                    self._fallback(g, i, ins, outs)
                    count(prim, "cpu")
                    g.finish(i)
                    # MLX allocated (and may have freed) host memory: learn of dead
                    # buffers before an address can come back under a new array.
                    self._reap()
                    continue
            g.finish(i)
            freed = _bridge.drain_freed()
            if freed:
                _route_freed(freed)

    def _elementwise(self, g, metas, fam, prim, params, ins, outs) -> bool:
        if len(outs) != 1:
            return False
        infos = [g.info(s) for s in ins]
        if None in infos:
            return False
        out = outs[0]
        out_meta = metas[out]
        # The signature is plain tuples (cheap to hash); Layouts are built on a miss only.
        # info: (key, data_ptr, offset_bytes, strides, data_size, nbytes, row, col, contig, ours)
        in_sig = tuple((metas[s], inf[3], inf[4], inf[6], inf[8]) for s, inf in zip(ins, infos))
        sig = (prim, params, in_sig, out_meta)
        entry = self.plans.get(sig)
        if entry is None:
            entry = self.plans[sig] = self._plan(fam, prim, params, in_sig, out_meta)
        plan, size, nbytes = entry
        if plan is None:
            return False
        res = self.residency
        stream = self.stream
        ptrs = []
        donor = None
        for s, inf, isig in zip(ins, infos, in_sig):
            if inf[9] == -1 and not res.is_tracked(inf[0]):
                g.watch(s)  # MLX-owned: the bridge tells us when its host buffer dies
            ptrs.append(res.device_ptr(inf[0], inf[1], inf[5], stream) + inf[2])
            # donate an input buffer nobody else holds (ours, same bytes, plain layout)
            if (donor is None and inf[9] != -1 and inf[5] == nbytes and inf[2] == 0 and isig[3]
                    and isig[2] == size and g.donatable(s)):
                donor = (s, inf[0], ptrs[-1])
        if donor is not None:
            g.share(out, donor[0])
            key, out_ptr = donor[1], donor[2]
        else:
            key, host, out_ptr = res.new_buffer(nbytes)
            g.attach(out, host, key)
        if size:
            ptrs.append(out_ptr)
            _launch(plan, self.modules, self.driver, tuple(ptrs), stream)
        res.written(key)
        return True

    def _plan(self, fam, prim, params, in_sig, out_meta):
        """(launch or None, output elements, output bytes) for a node signature."""
        shape, dtype = out_meta[0], out_meta[1]
        size = 1
        for d in shape:
            size *= d
        in_layouts = tuple(Layout(m[0], st, m[1], ds, row, contig) for m, st, ds, row, contig in in_sig)
        out_layout = Layout(shape, _row_strides(shape), dtype, size, True, True)
        # the bridge gives a one-value state() as the bare value; launchers take tuples
        p = params if isinstance(params, tuple) else (() if params is None else (params,))
        op = fam.module.op_for(prim, p)
        plan = None if op is None else fam.module.plan(op, in_layouts, out_layout, self.props)
        return plan, size, size * _ITEMSIZE[dtype]

    def _fallback(self, g, node, ins, outs):
        res = self.residency
        for s in ins:
            inf = g.info(s)
            if inf is not None and inf[9] != -1:
                res.ensure_host(inf[0], self.stream)
        g.eval_cpu(node)
        for s in outs:
            inf = g.info(s)
            if inf is not None:
                res.host_written(inf[0])


_ITEMSIZE = {
    "bool": 1, "uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "float16": 2, "bfloat16": 2,
    "uint32": 4, "int32": 4, "float32": 4, "uint64": 8, "int64": 8, "float64": 8, "complex64": 8,
}

