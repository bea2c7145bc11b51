"""The evaluator's one-kernel fast path (Evaluator._single): a node whose plan is one launch
on its inputs and first output is launched without run_plan's per-step dispatch. It must
issue exactly the launches the generic path issues: same kernels, grids, blocks, shared
memory and argument bytes (addresses by order of first use, fresh runtimes), on the null
runtime (tools/profile_engine.py), over a graph of many families."""

import ctypes
import os
import struct
import sys

import mlx.core as mx
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))



class _Named:
    """Distinct function handles per kernel, so the comparison sees which kernel ran."""

    def __init__(self):
        self.ids = {}

    def function(self, family, name):
        return ctypes.c_void_p(self.ids.setdefault((family, name), 0x1000 + len(self.ids)))


def _program(x, w, idx):
    y = mx.exp(x * 0.5) + mx.transpose(x)[:1, :32].T       # unary, binary, broadcast, strided
    y = mx.where(y > 1.0, y, -y).astype(mx.float16)         # select, compare, astype
    s = mx.softmax(y.astype(mx.float32), axis=-1)           # softmax
    r = mx.sum(s, axis=1) + mx.max(x, axis=1)               # reductions
    c = mx.concatenate([r, mx.cumsum(r)])                   # concatenate, scan
    g = mx.take(x, idx, axis=0)                             # gather
    m = x @ w                                               # GEMM (a host call)
    return [c, g.sum(), m, mx.sqrt(mx.abs(m)) * 2.0]


def _launches(fast):
    """The launches of one evaluation of _program in a fresh null runtime (fresh pools, so
    both modes see the same addresses), with or without the fast path."""
    from profile_engine import make_runtime

    rt, _ = make_runtime()
    ev = rt.evaluator
    if ev.native is None:
        pytest.fail("the null runtime has no native launcher")
    ev.modules = _Named()
    ev.replay = False            # node by node (first sightings)
    taken = []
    if fast:
        orig = ev._single
        ev._single = lambda plan, n: taken.append(orig(plan, n)) or taken[-1]
    else:
        ev._single = lambda plan, n_ins: None
    rng = np.random.default_rng(0)
    x = mx.array(rng.standard_normal((32, 48)).astype(np.float32))
    w = mx.array(rng.standard_normal((48, 16)).astype(np.float32))
    idx = mx.array(np.array([3, 0, 31, 7], np.int32))
    rec, real = [], ev.native

    def native(fn, grid, block, args, shared_mem, stream):
        rec.append((fn.value, tuple(grid), tuple(block), shared_mem, bytes(args)))
        return real(fn, grid, block, args, shared_mem, stream)

    ev.native = native
    outs = _program(x, w, idx)
    ev.eval(outs)
    return rec, sum(t is not None for t in taken)


def test_single_launch_fast_path_issues_the_generic_launches():
    from mlx_amd.runtime import context

    saved = context._runtime
    try:
        fast, taken = _launches(True)
        generic, _ = _launches(False)
    finally:
        context._runtime = saved
    assert taken >= 8, "the fast path was hardly taken"
    assert len(fast) == len(generic) > 10
    assert _normalized(fast) == _normalized(generic)


def _normalized(rec):
    """Addresses (8-byte words >= 2^32) as their order of first appearance: two fresh
    runtimes allocate alike but at other addresses."""
    seen, out = {}, []
    for fn, grid, block, smem, args in rec:
        n = len(args) // 8
        words = struct.unpack_from(f"<{n}Q", args)
        words = tuple(seen.setdefault(v, -1 - len(seen)) if v >= 1 << 32 else v for v in words)
        out.append((fn, grid, block, smem, words, args[8 * n:]))
    return out
