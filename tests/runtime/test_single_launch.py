"""The evaluator's per-node fast paths. The one-kernel path (Evaluator._single): a node whose
plan is one launch on its own buffers is launched without run_plan's per-step dispatch. It must
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
    v = x[3:4] @ w                                          # gemv: explicit refs
    from mlx_amd import fastops

    n = fastops.rms_norm(x.astype(mx.bfloat16), w[:, 0].astype(mx.bfloat16), 1e-5)
    q = x.reshape(1, 4, 8, 48)[..., :32]
    r2 = fastops.rope(q, 32, traditional=False, base=10000.0, scale=1.0, offset=3)
    a = fastops.scaled_dot_product_attention(r2, r2, q, scale=0.2, mask="causal")
    return [c, g.sum(), m, mx.sqrt(mx.abs(m)) * 2.0, v, n, a]


_LAUNCH_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *([ctypes.c_uint] * 7),
                              ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))


class _EntryRecorder:
    """A native launcher whose driver entry point is a C-callable recorder: the fast path's
    direct launches (bridge.launch on `_entry`) and the launcher's own calls land in one list."""

    def __init__(self, rec):
        self.rec, self.entry_calls = rec, 0

        def entry(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            n = ctypes.cast(extra[3], ctypes.POINTER(ctypes.c_size_t))[0]
            blob = ctypes.string_at(extra[1], n)
            rec.append((f or 0, (gx, gy, gz), (bx, by, bz), smem, blob))
            self.entry_calls += 1
            return 0

        self._cb = _LAUNCH_FN(entry)
        self._entry = ctypes.cast(self._cb, ctypes.c_void_p).value
        self._end = 0

    def __call__(self, fn, grid, block, args, shared_mem, stream):
        self.rec.append((fn.value or 0, tuple(grid), tuple(block), shared_mem, bytes(args)))


def _launches(fast, direct=False):
    """The launches of one evaluation of _program in a fresh null runtime (fresh pools, so
    both modes see the same addresses), with or without the fast path; ``direct``: through
    a launcher with an entry point, so the fast path launches natively (Evaluator._single)."""
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

    ev.native = _EntryRecorder(rec) if direct else native
    outs = _program(x, w, idx)
    ev.eval(outs)
    if direct:
        assert ev.native.entry_calls >= 12, "the fast path did not launch through the entry point"
    return rec, [t[6] is not None for t in taken if t is not None]   # explicit refs


def test_single_launch_fast_path_issues_the_generic_launches():
    from mlx_amd.runtime import context

    saved = context._runtime
    try:
        fast, taken = _launches(True)
        generic, _ = _launches(False)
    finally:
        context._runtime = saved
    assert len(taken) >= 12, "the fast path was hardly taken"
    assert sum(taken) >= 3, "no launch with explicit refs (gemv, norms, rope) took it"
    assert len(fast) == len(generic) > 10
    assert _normalized(fast) == _normalized(generic)


def test_direct_launches_issue_the_generic_launches():
    """The fast path's launches through the entry point itself (no launcher call per node)
    carry the same kernels, grids, blocks, shared memory and argument bytes."""
    from mlx_amd.runtime import context

    saved = context._runtime
    try:
        direct, taken = _launches(True, direct=True)
        generic, _ = _launches(False)
    finally:
        context._runtime = saved
    assert len(taken) >= 12
    assert len(direct) == len(generic) > 10
    assert _normalized(direct) == _normalized(generic)


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


def test_single_launch_arguments_follow_refs_and_offsets():
    # refs with offsets, repeats and outputs first: the blob the generic path would pack
    from mlx_amd.runtime import evaluator as E
    from mlx_amd.runtime import plan as P
    from mlx_amd.runtime.launch import Launch

    class Ev:
        modules = _Named()
        native = stream = None

    refs = (P.Ref("o", 1, 64), P.Ref("i", 0, 0), P.Ref("i", 2, 4096), P.Ref("o", 0, 8), P.Ref("i", 0, 256))
    st = Launch("fam", "k", (3, 1, 1), (128, 1, 1), 512, 5, tail=b"\x07" * 12, refs=refs)
    plan = P.Plan((st,))
    single = E.Evaluator._single(Ev(), plan, 3)
    assert single is not None and single[6] is not None
    ins, outs = (1 << 40, 2 << 40, 3 << 40), (5 << 40, 6 << 40)
    want = st.args(tuple(E._resolve(r, ins, outs, (), 0) for r in refs))
    assert E._single_args(single, ins, outs) == want
    default = Launch("fam", "k", (1, 1, 1), (64, 1, 1), 0, 4, tail=b"\x01" * 4)
    s2 = E.Evaluator._single(Ev(), P.Plan((default,)), 3)
    assert s2[6] is None and E._single_args(s2, ins, outs) == default.args(ins + outs[:1])
    # what the fast path must leave to run_plan: temporaries, init steps, two steps, empty
    assert E.Evaluator._single(Ev(), P.Plan((st,), temps=(256,)), 3) is None
    assert E.Evaluator._single(Ev(), P.Plan((st, st)), 3) is None
    assert E.Evaluator._single(Ev(), P.Plan((st,), init=((0, (default,)),)), 3) is None
    empty = Launch("fam", "k", (0, 1, 1), (64, 1, 1), 0, 4)
    assert E.Evaluator._single(Ev(), P.Plan((empty,)), 3) is None
    temp_ref = Launch("fam", "k", (1, 1, 1), (64, 1, 1), 0, 2, refs=(P.Ref("t", 0, 0), P.Ref("o", 0, 0)))
    assert E.Evaluator._single(Ev(), P.Plan((temp_ref,)), 1) is None


def test_recording_a_plan_again_hands_over_the_same_steps():
    # _record keeps a plan's converted steps (no host calls: nothing address-dependent) and
    # hands the same data to the next program that records it
    from profile_engine import make_runtime

    from mlx_amd.runtime import context
    from mlx_amd.runtime import plan as P
    from mlx_amd.runtime.launch import Launch

    saved = context._runtime
    try:
        rt, _ = make_runtime()
    finally:
        context._runtime = saved
    ev = rt.evaluator
    ev.modules = _Named()

    class Prog:
        def __init__(self):
            self.calls = []

        def set_gpu(self, *args):
            self.calls.append(args)

    st = Launch("fam", "k", (3, 1, 1), (128, 1, 1), 0, 3, refs=(P.Ref("i", 0, 0), P.Ref("t", 0, 64), P.Ref("o", 0, 0)))
    fill = P.Memset(P.Ref("o", 0, 0), 4096)
    plan = P.Plan((st,), temps=(1000,), init=((0, (fill,)),), donate=((0, 0),), written=((0, 64),))
    a, b = Prog(), Prog()
    ev._record(a, 5, plan, (4096,), [1 << 40], [2 << 40])
    assert ev._recorded[id(plan)][0] is plan
    ev._record(b, 7, plan, (4096,), [3 << 40], [4 << 40])
    (ca,), (cb,) = a.calls, b.calls
    assert ca[0] == 5 and cb[0] == 7 and ca[1:] == cb[1:]
    assert ca[4][-1][0] == "L" and ca[4][-1][5] == [("i", 0, 0), ("t", 0, 64), ("o", 0, 0)] and ca[5] == 1024

    class Gemm:          # a host call: its native set-up depends on the addresses, never kept
        def __call__(self, ptrs, stream, ev):
            pass

    host = P.Plan((P.HostCall(Gemm(), (P.Ref("i", 0, 0), P.Ref("o", 0, 0))),))
    ev._record(Prog(), 1, host, (64,), [1 << 40], [2 << 40])
    assert id(host) not in ev._recorded


def test_freed_tokens_are_routed_through_a_plain_list_of_live_owners():
    # _route_freed runs after almost every node: the owners are a list of weak references
    # (deduplicated, dead ones dropped), tokens go to whoever owns them, the rest are counted
    import gc

    from mlx_amd.runtime import evaluator as E

    class Res:
        def __init__(self, keys):
            self.keys, self.got = set(keys), []

        def owns(self, t):
            return t in self.keys

        def freed(self, ts):
            self.got += ts
            self.keys -= set(ts)

    owners = E._Owners()
    a, b = Res({1, 2}), Res({3})
    owners.add(a)
    owners.add(b)
    owners.add(a)
    assert owners.live() == [a, b]
    saved, before = E._OWNERS, E.foreign_frees
    E._OWNERS = owners
    try:
        E._route_freed([3, 1, 99])
        assert (a.got, b.got, E.foreign_frees - before) == ([1], [3], 1)
        del b
        gc.collect()
        assert owners.live() == [a] and len(owners._refs) == 1
    finally:
        E._OWNERS = saved


def test_launch_repeat_issues_count_launches_and_stops_at_a_failure():
    """bridge.launch_repeat (the driver-cost reference of benchmarks/eval_overhead.py) calls
    the entry point exactly `count` times, and stops at the first failing status."""
    from profile_engine import _null_native

    from mlx_amd.runtime import bridge

    native = _null_native()
    if native is None:
        pytest.fail("no C compiler for the null launch entry")
    before = native.launches
    status, seconds = bridge.launch_repeat(native._entry, 0, 1, 1, 1, 1, 32, 1, 1, 0, 0,
                                           b"\0" * 16, 1000)
    assert status == 0 and seconds >= 0
    assert native.launches - before == 1000

    fail = ctypes.CFUNCTYPE(ctypes.c_int, *([ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3))
    calls = []
    entry = fail(lambda *a: calls.append(1) or (700 if len(calls) == 3 else 0))
    status, _ = bridge.launch_repeat(ctypes.cast(entry, ctypes.c_void_p).value, 0, 1, 1, 1, 1, 32, 1, 1,
                                     0, 0, b"", 10)
    assert status == 700 and len(calls) == 3


def test_launch_refs_builds_the_argument_struct_as_the_plan_does():
    """bridge.launch_refs (the fast path's launch) resolves refs with offsets, repeats and
    outputs first into the same bytes Launch.args packs; a reference past the pointers
    given raises instead of reading past them."""
    from mlx_amd.runtime import bridge
    from mlx_amd.runtime import evaluator as E
    from mlx_amd.runtime import plan as P
    from mlx_amd.runtime.launch import Launch

    rec = []
    launcher = _EntryRecorder(rec)
    refs = (P.Ref("o", 1, 64), P.Ref("i", 0, 0), P.Ref("i", 2, 4096), P.Ref("o", 0, 8))
    st = Launch("fam", "k", (3, 1, 1), (128, 1, 1), 512, 4, tail=b"\x07" * 12, refs=refs)
    ins, outs = [1 << 40, 2 << 40, 3 << 40], [5 << 40, 6 << 40]
    packed = struct.pack("<12q", *[v for r in refs for v in ((r.kind == "o"), r.index, r.offset)])
    status = bridge.launch_refs(launcher._entry, 0, 0x1234, 3, 1, 1, 128, 1, 1, 512, 0, st.tail, packed, ins, outs)
    assert status == 0 and rec[-1] == (0x1234, (3, 1, 1), (128, 1, 1), 512,
                                        st.args(tuple(E._resolve(r, ins, outs, (), 0) for r in refs)))
    bridge.launch_refs(launcher._entry, 0, 0x1234, 1, 1, 1, 64, 1, 1, 0, 0, b"\x01" * 4, b"", ins, outs)
    assert rec[-1][4] == struct.pack("<4Q", *ins, outs[0]) + b"\x01" * 4
    with pytest.raises(IndexError, match="past the pointers"):
        bridge.launch_refs(launcher._entry, 0, 1, 1, 1, 1, 64, 1, 1, 0, 0, b"", struct.pack("<3q", 0, 3, 0), ins, outs)
