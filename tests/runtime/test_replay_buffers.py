"""A replay's output buffers and graphs without a GPU: the null-kernel runtime (tools/profile_engine.py:
every node takes the GPU path, launches are no-ops, values are garbage) replays from native
code, so the bookkeeping can be checked here: fresh outputs come from the native pools, the
ones MLX drops are recycled natively, the survivors get residency records, and nothing leaks
across many steps; with a counting graph API, replays launch their graph segments, updating
only the kernel nodes whose arguments changed."""

import ctypes
import os
import shutil
import sys

import mlx.core as mx
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="the null launcher needs a C compiler")


@pytest.fixture
def null_runtime():
    from profile_engine import make_runtime

    from mlx_amd.runtime import context

    saved = context._runtime
    rt, _ = make_runtime()
    if not rt.evaluator.replay:
        pytest.fail("the null runtime does not replay")
    try:
        yield rt
    finally:
        context._runtime = saved


def step(x, c):
    # intermediates donate into each other (x * c -> + 0.5 in place), two outputs survive
    for _ in range(12):
        x = x * c + 0.5
    return x.sum(), x[1:3]


def test_steps_recycle_natively_and_do_not_leak(null_runtime):
    ev, res = null_runtime.evaluator, null_runtime.residency
    x = mx.array(np.ones((8, 64), np.float32))
    c = mx.array(np.float32(1.5))
    ev.eval([x, c])
    held = []
    marks = []
    for k in range(12):
        outs = step(x, c)
        ev.eval(list(outs))
        held.append(outs)
        if len(held) > 2:          # like a decode loop: a few steps' results alive at once
            held.pop(0)
        marks.append((res.device_pool.get_active_memory(), res.host_pool.get_active_memory(),
                      len(res._recs), len(res.outputs)))
    assert ev.replays >= 9
    # nothing waits for adoption between evaluations; the survivors are tracked
    assert all(m[3] == 0 for m in marks)
    for outs in held:
        for o in outs:
            key = bridge_key(o)
            assert res.is_tracked(key) and res.owns(key)
    # steady state: the same memory and records every step (the recycled ones went back)
    assert len({m[:3] for m in marks[4:]}) == 1, marks
    held.clear()
    del outs
    before = res.device_pool.get_active_memory()
    ev.eval([x * 2.0])
    assert res.device_pool.get_active_memory() <= before


def test_replays_resolve_resident_leaves_from_the_program_cache(null_runtime, monkeypatch):
    ev, res = null_runtime.evaluator, null_runtime.residency
    x = mx.array(np.ones((8, 64), np.float32))
    c = mx.array(np.full((1, 64), 1.5, np.float32))   # 2-d: a resident leaf, not a constant
    ev.eval([x, c])
    seen = []
    from mlx_amd import _bridge

    orig = _bridge.Graph.leaves

    def leaves(g, program=None, consts=None):
        out = orig(g, program, consts)
        seen.append((program is not None, len(out), len(orig(g, None, None))))
        return out

    monkeypatch.setattr(_bridge.Graph, "leaves", leaves)
    for _ in range(6):
        ev.eval(list(step(x, c)))
    replayed = [s for s in seen if s[0]]
    assert len(replayed) >= 3
    # from the second replay on nothing comes back to Python: x and c are in the program's
    # leaf cache, and the twelve fresh 0.5 scalars each step makes find their value's device
    # copy in the constant cache (uploaded once, at the first replay)
    assert [(back, all_) for _, back, all_ in replayed[1:]] == [(0, 14)] * (len(replayed) - 1), replayed
    assert len(res.consts) == 1
    # c dies: its key leaves every program's cache before the next replay
    key_c = bridge_key(c)
    del c
    mx.eval(x)                     # an evaluation drains the expiry
    c = mx.array(np.full((1, 64), 2.5, np.float32))
    ev.eval(list(step(x, c)))
    assert key_c in res._inval and seen[-1][1] == 1   # x still cached, c new
    assert len(res.consts) == 1


def bridge_key(a):
    from mlx_amd.runtime import bridge

    return bridge.buffer_info(a)[0]


def test_pool_core_matches_the_policy():
    from mlx_amd.runtime.memory import MIN_BLOCK, SLAB_MAX, Pool, round_size

    freed = []
    nxt = [1 << 20]

    def raw(n):
        nxt[0] += 1 << 24
        return nxt[0]

    p = Pool(raw, freed.append, lambda: (1 << 40, 1 << 40), limit=1 << 30)
    sizes = [0, 1, 200, 256, 257, 4000, 70000, (1 << 20) + 1, 5 << 20]
    blocks = [p.alloc(n) for n in sizes]
    assert [b.size for b in blocks] == [max(MIN_BLOCK, round_size(max(n, 1))) for n in sizes]
    for b in blocks:
        p.free(b)
    assert p.get_active_memory() == 0 and p.get_cache_memory() == sum(b.size for b in blocks)
    # best fit, never more than twice the request
    b = p.alloc(3000)
    assert b.size == 4096 and p.counts["hits"] == 1
    b2 = p.alloc(100)
    assert b2.size == MIN_BLOCK
    with pytest.raises(ValueError, match="double free"):
        p.free(b2) or p.free(b2)
    # the cache limit releases the oldest cached blocks first; a slab (the small classes)
    # goes back to the driver once none of its slots is in use: b (live) keeps its own
    p.set_cache_limit(0)
    classes = {max(MIN_BLOCK, round_size(max(n, 1))) for n in sizes}
    small = {c for c in classes if c <= SLAB_MAX}
    assert p.get_cache_memory() == 0 and len(freed) == len(classes - small) + len(small) - 1
    with pytest.raises(ValueError, match=">= 0"):
        p.alloc(-1)
    p.free(b)
    assert p.core.slack == 0 and p.core.driver_frees == p.core.driver_allocs == len(freed)


def test_replays_launch_as_graphs_and_update_changed_nodes(null_runtime):
    from profile_engine import null_counts, null_graph_api

    from mlx_amd.runtime import bridge

    ev = null_runtime.evaluator
    bridge.set_graph_api(*null_graph_api(ev.native))
    ev.graphs = True
    x = mx.array(np.ones((8, 64), np.float32))
    c = mx.array(np.float32(1.5))
    ev.eval([x, c])
    held = []

    def steps(n):
        for k in range(n):
            outs = step(x if k % 2 else x + 0.0, c)     # two graph structures, alternating
            ev.eval(list(outs))
            held.append(outs)
            if len(held) > 3:        # results stay alive a while: buffers (arguments) change
                held.pop(0)

    steps(6)                         # sightings, recordings, first graphs
    s0, n0 = bridge.graph_stats(), null_counts(ev.native)
    steps(8)
    s1, n1 = bridge.graph_stats(), null_counts(ev.native)
    assert s1["launches"] - s0["launches"] == 8, (s0, s1)
    assert n1["graph_launches"] - n0["graph_launches"] == 8
    assert n1["launches"] == n0["launches"]              # no kernel launched one by one
    assert s1["builds"] == s0["builds"] and s1["failures"] == s0["failures"]
    assert s1["node_updates"] > s0["node_updates"]       # new buffers: new arguments in place
    assert s1["node_updates"] - s0["node_updates"] == n1["updates"] - n0["updates"]
    # forced eager: kernels one by one again, no graph launch
    ev.graphs = False
    steps(2)
    n2 = null_counts(ev.native)
    assert n2["graph_launches"] == n1["graph_launches"] and n2["launches"] > n1["launches"]
    assert all(p.program.has_graph for p in ev.programs.values())
    ev.drop_programs()
    assert not ev.programs


def test_long_replays_launch_in_growing_graph_segments(null_runtime):
    # a replay hands its launches over segment by segment (3, 6, 6, ... here), so the GPU starts
    # while the host still collects; each segment is a graph of its own, updated in place
    from profile_engine import null_counts, null_graph_api

    from mlx_amd.runtime import bridge

    ev = null_runtime.evaluator
    bridge.set_graph_api(*null_graph_api(ev.native))
    ev.graphs = True
    before = bridge.graph_segments()
    bridge.set_graph_segments(3, 6)
    try:
        x = mx.array(np.ones((8, 64), np.float32))
        c = mx.array(np.float32(1.5))
        ev.eval([x, c])
        held, launched = [], []
        for _ in range(7):
            outs = step(x, c)
            n0 = null_counts(ev.native)
            ev.eval(list(outs))
            n1 = null_counts(ev.native)
            launched.append((n1["graph_launches"] - n0["graph_launches"], n1["launches"] - n0["launches"]))
            held.append(outs)
            if len(held) > 2:
                held.pop(0)
        kernels = launched[0][1]                          # a sighting: every kernel on its own
        segments = 1 + (kernels - 3 + 5) // 6             # 3, then 6 at most
        assert kernels > 9 and launched[-1] == (segments, 0), launched
        (prog,) = ev.programs.values()
        assert prog.program.graph_segments == segments
        with pytest.raises(ValueError, match="first <= most"):
            bridge.set_graph_segments(4, 2)
    finally:
        bridge.set_graph_segments(*before)
        ev.drop_programs()


def test_graph_after_keeps_a_program_eager_for_its_first_replays(null_runtime):
    # a program launches eagerly for its first graph_after() replays (a prompt's prefill
    # seen a few times never pays for a graph), then is built once and launched as a graph
    from profile_engine import null_counts, null_graph_api

    from mlx_amd.runtime import bridge

    ev = null_runtime.evaluator
    bridge.set_graph_api(*null_graph_api(ev.native))
    ev.graphs = True
    before = bridge.graph_after()
    bridge.set_graph_after(3)
    try:
        x = mx.array(np.ones((8, 64), np.float32))
        c = mx.array(np.float32(1.5))
        ev.eval([x, c])
        held, seen = [], []
        for k in range(8):     # sightings 1-2, replays 1-3 eager, replay 4 builds, 5-6 launch
            outs = step(x, c)
            s0, n0 = bridge.graph_stats(), null_counts(ev.native)
            ev.eval(list(outs))
            s1, n1 = bridge.graph_stats(), null_counts(ev.native)
            seen.append((s1["builds"] - s0["builds"], n1["graph_launches"] - n0["graph_launches"],
                         n1["launches"] > n0["launches"]))
            held.append(outs)
        assert seen == [(0, 0, True)] * 5 + [(1, 1, False), (0, 1, False), (0, 1, False)], seen
        with pytest.raises(ValueError, match="count >= 0"):
            bridge.set_graph_after(-1)
    finally:
        bridge.set_graph_after(before)
        ev.drop_programs()


def test_replays_keep_their_buffers_so_graph_nodes_stay_as_they_are(null_runtime):
    # a decode loop drops each step's intermediates before the next step: the next replay
    # asks the pool for the blocks its nodes had (Pool.alloc's prefer), so their kernel
    # arguments, and the graph's nodes, stay the same; only nodes around the outputs still
    # held (new blocks) get new arguments
    from profile_engine import null_graph_api

    from mlx_amd.runtime import bridge

    ev, res = null_runtime.evaluator, null_runtime.residency
    bridge.set_graph_api(*null_graph_api(ev.native))
    ev.graphs = True
    x = mx.array(np.ones((8, 64), np.float32))
    c, h = mx.array(np.float32(1.5)), mx.array(np.float32(0.5))
    ev.eval([x, c, h])
    held = []

    def steps(n):
        for _ in range(n):
            y = x
            for _ in range(12):      # as step(), with the constant made once (a new scalar
                y = y * c + h        # leaf per step is a new buffer, so new arguments)
            outs = (y.sum(), y[1:3])
            ev.eval(list(outs))
            held.append(outs[0])     # the step's small result (mlx-lm's token) outlives it
            if len(held) > 2:
                held.pop(0)

    steps(5)
    core = res.device_pool.core
    s0, p0 = bridge.graph_stats(), core.preferred
    steps(8)
    s1, p1 = bridge.graph_stats(), core.preferred
    assert s1["launches"] - s0["launches"] == 8
    per_launch = (s1["node_updates"] - s0["node_updates"]) / 8
    assert per_launch <= 1, (s0, s1)                   # of 25 kernel nodes: the sum's, held
    assert p1 - p0 == 8, (p0, p1)                      # the chain's buffer, every step
    # the preferred block is only taken when cached and of the request's size class
    blk = res.device_pool.alloc(1000)
    other = res.device_pool.alloc(1000)
    res.device_pool.free(blk)
    d, size = core.alloc(5000, blk.data)               # another class: not that block
    assert d != blk.data and size == 8192
    core.free(d)
    d2, _ = core.alloc(1000, blk.data)
    assert d2 == blk.data
    core.free(d2)
    res.device_pool.free(other)


def test_a_replay_reuses_dead_intermediates_like_the_node_by_node_path(null_runtime):
    # a prefill-like chain of large intermediates, each dead once the next node has run (the
    # casts change the size, so no output can take over its input): a replay recycles them
    # as it goes (bridge recycle_freed), so its peak is the node-by-node path's, not the sum
    # of every output (which kept 512-token prefills off the replay path before)
    ev, res = null_runtime.evaluator, null_runtime.residency
    core = res.device_pool.core
    x = mx.array(np.ones((1024, 1024), np.float32))   # 4 MiB, 2 MiB as float16
    ev.eval([x])

    def run():
        y = x
        for _ in range(16):
            y = mx.exp(y.astype(mx.float16)).astype(mx.float32)
        s = y.sum()
        ev._reap()               # the previous run's buffers back in the pool
        core.peak = base = core.active
        ev.eval([s])
        return core.peak - base

    node_by_node = [run(), run()]          # first sighting, recording
    r0 = ev.replays
    replayed = [run(), run(), run()]
    assert ev.replays - r0 == 3
    mib = 1 << 20
    assert max(node_by_node) <= 16 * mib, node_by_node
    # the same few live blocks, not 48 intermediates (160 MiB)
    assert max(replayed) <= max(node_by_node), (node_by_node, replayed)


def test_constant_cache_holds_each_value_once_and_starts_over_when_full(null_runtime, monkeypatch):
    # fresh scalars every step: their values' device copies (host memory under the null
    # runtime, so readable here) hold the right bytes, the slabs stay bounded, and a restart
    # gives the slabs back to the pool
    import ctypes

    from mlx_amd.runtime import residency as residency_mod

    monkeypatch.setattr(residency_mod, "CONST_SLAB", 1024)
    monkeypatch.setattr(residency_mod, "CONST_BYTES", 2048)
    ev, res = null_runtime.evaluator, null_runtime.residency
    x = mx.array(np.ones((8, 64), np.float32))
    ev.eval([x])
    most = 0
    for k in range(200):
        vals = [np.float32(k + 0.5), np.float32(-k), np.float32(3.0)]
        y = x * mx.array(vals[0]) + mx.array(vals[1]) - mx.array(vals[2])
        ev.eval([y.sum()])
        if ev.replays:
            for v in vals:
                addr = res.consts.find(v.tobytes())
                assert addr is not None and ctypes.string_at(addr, 4) == v.tobytes(), (k, v)
        most = max(most, len(res._const_slabs))
    assert ev.replays >= 190
    assert 1 <= most <= 3 and len(res.consts) < 200
    res.clear()
    assert len(res.consts) == 0 and not res._const_slabs


def test_a_position_counter_is_uploaded_once_per_run_of_values(null_runtime, monkeypatch):
    # a decode step's RoPE offset is a fresh int32 scalar, one more each step: a new value
    # brings its next COUNTER_RUN - 1 values along, so the steps after it find theirs in the
    # constant cache natively (no upload, no trip through Python); every device copy holds
    # its value's bytes
    import ctypes

    from mlx_amd.runtime import residency as residency_mod

    ev, res = null_runtime.evaluator, null_runtime.residency
    x = mx.array(np.ones((8, 64), np.int32))
    ev.eval([x])
    calls = []
    real = res.upload_consts
    monkeypatch.setattr(res, "upload_consts", lambda items, stream: calls.append(len(items)) or real(items, stream))
    steps = 3 * residency_mod.COUNTER_RUN
    for k in range(steps):
        pos = mx.array(np.int32(1000 + k))
        y = (x + pos) * 2
        ev.eval([y.sum()])
        v = np.int32(1000 + k).tobytes()
        addr = res.consts.find(v)
        assert addr is not None and ctypes.string_at(addr, 4) == v, k
    assert ev.replays >= steps - 3
    assert 3 <= len(calls) <= 6, calls      # once per run of values (and the first sightings)
    # other 4-byte values (floats, large ints, zero) are taken one by one, as before, and the
    # upload statistics count only the values asked for
    for f in (np.float32(2.5), np.int32(1 << 26), np.int32(0)):
        before, ups, ubytes = len(res.consts), res.uploads, res.upload_bytes
        ev.eval([(x + mx.array(f)).sum()])
        assert len(res.consts) == before + 1
        assert (res.uploads - ups, res.upload_bytes - ubytes) == (1, 4)
    before, ups = len(res.consts), res.uploads
    ev.eval([(x + mx.array(np.int32(5000))).sum()])      # a new counter: asked 1, cached 64
    assert (len(res.consts) - before, res.uploads - ups) == (residency_mod.COUNTER_RUN, 1)


def test_nodes_sharing_a_plan_are_rebound_by_one_call_per_replay(null_runtime, monkeypatch):
    # an LLM's SDPA layers at a growing KV length: each layer's node has the same plan (plans
    # are cached by signature), so one rebind answers them all in a replay; none goes back
    # to Python
    from mlx_amd.runtime.ops import sdpa

    calls = []
    real = sdpa.DecodeRebind.__call__
    monkeypatch.setattr(sdpa.DecodeRebind, "__call__", lambda self, *a: calls.append(1) or real(self, *a))
    ev = null_runtime.evaluator
    rng = np.random.default_rng(0)
    caches = [mx.array(rng.standard_normal((1, 2, 256, 64)).astype(np.float32)) for _ in range(4)]
    q = mx.array(rng.standard_normal((1, 8, 1, 64)).astype(np.float32))
    ev.eval(caches + [q])

    def step(L):
        outs = [mx.fast.scaled_dot_product_attention(q, c[:, :, :L], c[:, :, :L], scale=0.125)
                for c in caches]
        return sum(o.sum() for o in outs)

    import mlx_amd

    with mlx_amd.enable():
        for L in range(100, 110):
            ev.eval([step(L)])
    r0, p0, c0 = ev.replays, ev.replay_python, len(calls)
    with mlx_amd.enable():
        for L in range(110, 130):
            ev.eval([step(L)])
    assert ev.replays - r0 == 20 and ev.replay_python == p0
    assert len(calls) - c0 == 20


def test_first_sightings_take_constants_by_value_without_records(null_runtime):
    import ctypes

    ev, res = null_runtime.evaluator, null_runtime.residency
    x = mx.array(np.ones((8, 64), np.float32))
    ev.eval([x])
    for k in range(6):
        c = mx.array(np.float32(7.25 + k))
        y = x
        for _ in range(k + 1):           # another structure every time: node by node
            y = y * c
        ev.eval([y.sum()])
        v = np.float32(7.25 + k).tobytes()
        addr = res.consts.find(v)
        assert addr is not None and ctypes.string_at(addr, 4) == v
        assert bridge_key(c) not in res._recs        # no per-buffer record for a constant
    assert ev.replays == 0


# cublasLtMatmul / hipblasLtMatmul: 14 pointers, the workspace size, the stream
_LT_MATMUL = ctypes.CFUNCTYPE(ctypes.c_int, *([ctypes.c_void_p] * 14), ctypes.c_size_t, ctypes.c_void_p)


def test_replayed_gemms_call_the_library_natively(null_runtime, monkeypatch):
    """A GEMM's host call becomes a native step when its library can say how to call it
    (blas.native; faked here by a C-callable recorder): replays then call it from C++ with
    the library's A = our B, B = our A, C = D = the output, and the recorded handle,
    descriptors, scalars, algorithm and workspace; once the engine closes (alive = 0) the
    Python callable serves again."""
    from mlx_amd.runtime import blas
    from mlx_amd.runtime.ops import matmul

    ev, res = null_runtime.evaluator, null_runtime.residency
    calls, python = [], []

    @_LT_MATMUL
    def fake(handle, desc, alpha, a, la, b, lb, beta, c, lc, d, ld, algo, ws, wss, stream):
        calls.append((handle, desc, a, la, b, lb, c, lc, d, ld, ws, wss, ctypes.string_at(alpha, 4),
                      ctypes.string_at(beta, 4), ctypes.string_at(algo, 4)))
        return 0

    alive = ctypes.c_int32(1)
    asked = []

    def native(ctx, g, aligns):
        asked.append(aligns)
        return (ctypes.cast(fake, ctypes.c_void_p).value, 11, 12, 13, 14, 15, 16, 1 << 20,
                struct_f(1.0), struct_f(0.0), b"algo" * 16, aligns[:2] + (min(aligns[2:]),),
                ctypes.addressof(alive)), alive      # (the keep-alive object: anything)

    def struct_f(v):
        return bytes(ctypes.c_float(v))

    orig_call = matmul.GemmCall.__call__

    def counted(self, ptrs, stream, ctx):
        python.append(ptrs)
        return orig_call(self, ptrs, stream, ctx)

    monkeypatch.setattr(blas, "native", native)
    monkeypatch.setattr(matmul.GemmCall, "__call__", counted)
    w = mx.array(np.ones((128, 256), np.float32))
    ev.eval([w])
    ys = []
    for k in range(5):
        x = mx.array(np.full((64, 128), k, np.float32))
        y = x @ w
        ev.eval([y])
        ys.append((x, y))
    assert ev.replays >= 3 and asked, (ev.replays, asked)
    assert len(calls) == ev.replays and len(python) == 5 - ev.replays
    for (x, y), c in zip(ys[5 - len(calls):], calls):
        dev = {n: res._recs[bridge_key(a)].dev_ptr for n, a in (("x", x), ("w", w), ("y", y))}
        assert c[:2] == (11, 12) and (c[3], c[5], c[7], c[9]) == (13, 14, 15, 15)
        assert (c[2], c[4], c[6], c[8]) == (dev["w"], dev["x"], dev["y"], dev["y"])
        assert c[10:] == (16, 1 << 20, struct_f(1.0), struct_f(0.0), b"algo")
    alive.value = 0                        # the engine closed: the callable runs instead
    n, p, r = len(calls), len(python), ev.replays
    x = mx.array(np.full((64, 128), 9, np.float32))
    ev.eval([x @ w])
    assert ev.replays == r + 1 and len(calls) == n and len(python) == p + 1


def _qkv_step(x, ws, t):
    # an attention's three projections of one x (decode matvecs), as mlx-lm writes them:
    # quantized, or x @ W.T (whose views of x and W the group makes early)
    xt = x * float(t + 1)
    if ws == "rope":             # an attention's q and k rotations at the cache offset (twins)
        q = xt.reshape(1, 1, 16, 32).transpose(0, 2, 1, 3)
        k = xt[..., :256].reshape(1, 1, 8, 32).transpose(0, 2, 1, 3)
        from mlx_amd import fastops   # our RoPE primitive (mx.fast.rope while enabled)

        return [fastops._rope(a, 32, traditional=False, base=10000.0, scale=1.0, offset=t + 3) for a in (q, k)]
    if isinstance(ws, dict):     # a residual add and the norm of its sum (the pair's case)
        from mlx_amd import fastops   # our RMSNorm primitive (mx.fast.rms_norm while enabled)

        h = xt + ws["r"]
        return [h, fastops.rms_norm(h, ws["w"], 1e-5), h * 2.0]
    if isinstance(ws[0], (tuple, list)):
        return [mx.quantized_matmul(xt, *w, transpose=True, group_size=64, bits=4) for w in ws]
    return [xt @ w.T for w in ws]


def _grouping_evaluator(monkeypatch, on, graphs, tables):
    """A null-runtime evaluator with the evaluator's grouping ``tables`` (SIBLINGS, PAIRS,
    TWINS, CHAINS, TAILS) on or empty, replays as CUDA/HIP graphs if ``graphs``."""
    from profile_engine import make_runtime, null_graph_api

    from mlx_amd.runtime import bridge as B
    from mlx_amd.runtime import evaluator as E

    make = {"SIBLINGS": E.sibling_table, "PAIRS": E.pair_table, "TWINS": E.twin_table,
            "CHAINS": lambda d: E.chain_table(d, E.pair_table(d)), "TAILS": E.tail_table,
            "TWIN_CHAINS": E.twin_chain_table}
    for t in tables:
        monkeypatch.setattr(E, t, make[t](E.DISPATCH) if on else {})
    rt, _ = make_runtime(compute_units=132)
    ev = rt.evaluator
    if graphs:
        B.set_graph_api(*null_graph_api(ev.native))
        monkeypatch.setattr(ev, "graphs", True)
    return ev


@pytest.mark.parametrize("graphs", [False, True])
@pytest.mark.parametrize("kind", ["quantized", "bf16", "addnorm", "rope"])
def test_sibling_matvecs_run_as_one_launch_first_and_replayed(monkeypatch, graphs, kind):
    """QuantizedMatmul nodes on one x (q/k/v) run as one qmv_h2 launch (plan_siblings), at
    their first sightings in Python and in native replays alike, also as CUDA/HIP graph nodes;
    the siblings count as GPU nodes, and no replayed node goes back to Python. With
    MLX_AMD_SIBLINGS off (an empty table) each is its own launch. The same for an Add and
    the RMSNorm of its sum (a pair) and for q's and k's RoPE (twins)."""
    from profile_engine import null_counts

    from mlx_amd.runtime import context

    rng = np.random.default_rng(0)
    ws = []
    for n in (256, 64, 64):
        w = mx.array(rng.standard_normal((n, 512)).astype(np.float32)).astype(mx.bfloat16)
        q = mx.quantize(w, group_size=64, bits=4) if kind == "quantized" else w
        mx.eval(q)
        ws.append(q)
    if kind == "addnorm":
        ws = {"r": mx.array(rng.standard_normal((1, 1, 512)).astype(np.float32)).astype(mx.bfloat16),
              "w": mx.array(rng.standard_normal(512).astype(np.float32)).astype(mx.bfloat16)}
        mx.eval(ws["r"], ws["w"])
    if kind == "rope":
        ws = "rope"
    x = mx.array(rng.standard_normal((1, 1, 512)).astype(np.float32)).astype(mx.bfloat16)
    mx.eval(x)
    saved = context._runtime
    per_eval, stats = {}, {}
    try:
        for on in (False, True):
            ev = _grouping_evaluator(monkeypatch, on, graphs, ("SIBLINGS", "PAIRS", "TWINS"))
            counts = []
            for t in range(8):
                before = null_counts(ev.native)
                ev.eval(_qkv_step(x, ws, t))
                after = null_counts(ev.native)
                counts.append((after["launches"] - before["launches"], after["nodes"] - before["nodes"]))
            per_eval[on] = counts
            prim = {"quantized": "QuantizedMatmul", "bf16": "Matmul", "addnorm": "mlx_amd::RMSNorm",
                    "rope": "mlx_amd::RoPE"}[kind]
            stats[on] = (ev.replays, ev.replay_python, ev.stats.by_prim[prim]["gpu"])
    finally:
        context._runtime = saved
    # each evaluation: the scaling of x, then one launch for three matvecs (or three)
    first_off, first_on = per_eval[False][0][0], per_eval[True][0][0]
    assert first_off - first_on == (2 if kind in ("quantized", "bf16") else 1), per_eval
    if not graphs:
        assert [c[0] for c in per_eval[True]] == [first_on] * 8, per_eval
        assert [c[0] for c in per_eval[False]] == [first_off] * 8, per_eval
    else:   # graph nodes instead of launches once the program has a graph
        assert sum(c[1] for c in per_eval[True]) == first_on, per_eval
        assert sum(c[1] for c in per_eval[False]) == first_off, per_eval
    for on in (False, True):
        replays, python_nodes, gpu_nodes = stats[on]
        n = {"addnorm": 1, "rope": 2}.get(kind, 3)
        assert replays >= 6 and python_nodes == 0 and gpu_nodes == n * 8, stats


def test_a_sibling_whose_input_comes_later_runs_alone(monkeypatch):
    """Matvecs on one x where one matrix is made after the first matvec (here a scaled weight
    computed between them in the tape): that one cannot join the first node's launch, so the
    group leaves it alone (its own launch, at its own place), first sighting and replays."""
    from profile_engine import make_runtime, null_counts

    from mlx_amd.runtime import context

    rng = np.random.default_rng(1)
    w = [mx.array(rng.standard_normal((n, 256)).astype(np.float32)).astype(mx.bfloat16) for n in (64, 32)]
    x = mx.array(rng.standard_normal((1, 1, 256)).astype(np.float32)).astype(mx.bfloat16)
    mx.eval(x, *w)
    saved = context._runtime
    try:
        rt, _ = make_runtime(compute_units=132)
        ev = rt.evaluator
        counts = []
        for t in range(6):
            q = x @ w[0].T
            k = x @ (w[1] * float(t + 2)).T    # its matrix is made after q's matvec
            before = null_counts(ev.native)["launches"]
            ev.eval([q, k])
            counts.append(null_counts(ev.native)["launches"] - before)
        groups = [g for g in ev._sib_groups.values() if g]
    finally:
        context._runtime = saved
    # the pass grouped them (same x), the launch could not take the later matrix: three
    # launches (the scaling and two matvecs) every time, nothing handed back to Python
    assert groups and counts == [3] * 6, counts
    assert ev.replays >= 4 and ev.replay_python == 0


def test_a_first_sighting_takes_cached_constants_natively(null_runtime, monkeypatch):
    # a graph structure seen for the first time whose scalar constants have values the
    # constant cache holds: the bridge's leaf walk hands their device copies over
    # (Graph.leaf_hits) and only new values come back to Python for an upload; the kernels
    # read the value's device copy, whatever the constant's own buffer
    ev, res = null_runtime.evaluator, null_runtime.residency
    x = mx.array(np.ones(16, np.float32))
    ev.eval([x])
    ev.eval([(x * 3.25 + 0.5).sum()])                 # 3.25 and 0.5 now cached by value
    asked = []
    real = res.upload_consts
    monkeypatch.setattr(res, "upload_consts", lambda items, stream: asked.append(len(items)) or real(items, stream))
    seen = []
    real_sc = ev._small_consts
    monkeypatch.setattr(ev, "_small_consts", lambda g: seen.append(real_sc(g)) or seen[-1])
    y = x
    for i in range(5):                              # another structure, fresh constant arrays
        y = (y - 0.5) * 3.25
    ev.eval([y.max()])
    assert asked == [] and len(seen) == 1 and seen[0] is not None
    # (x itself is a small MLX-owned leaf too: 16 floats, its value cached since the first eval)
    # Each hit is the device copy (host memory on the null runtime) of one of the three values,
    # read back by its leading bytes: a leaf's key is its whole buffer, which MLX's allocator
    # makes larger than the array when it reuses a freed block (as after other tests).
    addrs = set(seen[0].values())
    values = (np.float32(0.5), np.float32(3.25), np.ones(16, np.float32))
    assert sorted(ctypes.string_at(a, 4) for a in addrs) == sorted(v.tobytes()[:4] for v in values)
    assert any(ctypes.string_at(a, 64) == values[2].tobytes() for a in addrs)
    assert len(seen[0]) == 11                        # every fresh constant array, by its buffer, and x
    ev.eval([(x * 7.75).max()])                      # a new value: one upload of one value
    assert asked == [1]


def test_small_constants_are_cached_by_the_bytes_they_address(null_runtime, monkeypatch):
    """A small constant's cache key is its buffer up to the end of the elements it addresses,
    not the whole buffer: a view of two floats into a 16-float buffer (or a scalar MLX put in
    a reused, larger block) whose other bytes differ is still the same value."""
    ev, res = null_runtime.evaluator, null_runtime.residency
    x = mx.array(np.ones(8, np.float32))
    ev.eval([x])
    asked = []
    real = res.upload_consts
    monkeypatch.setattr(res, "upload_consts", lambda items, stream: asked.append(list(items)) or real(items, stream))
    heads = []
    for tail in (7.0, 9.0, 11.0):
        big = mx.array(np.array([2.0, 3.0] + [tail] * 14, np.float32))
        mx.eval(big)
        head = big[:2]                   # a 1-d view: 8 bytes addressed of a 64-byte buffer
        mx.eval(head)
        heads.append(head)
        ev.eval([(x[:2] * head).sum()])
    uploads = [n for batch in asked for _, _, n in batch]
    assert 8 in uploads and 64 not in uploads, asked
    assert uploads.count(8) == 1, "the same two floats were uploaded again"
    assert res.consts.find(np.array([2.0, 3.0], np.float32).tobytes()) is not None
    # a view at an offset: the bytes before it belong to the copy (kernels add the offset)
    asked.clear()
    big = mx.array(np.arange(16, dtype=np.float32))
    mid = big[3:5]
    mx.eval(mid)
    ev.eval([(x[:2] * mid).sum()])
    assert [n for batch in asked for _, _, n in batch] == [20], asked   # 12 bytes before + 8


def test_graph_segments_come_from_the_environment(monkeypatch):
    from profile_engine import make_runtime

    from mlx_amd.runtime import bridge, context

    saved_rt, saved = context._runtime, bridge.graph_segments()
    try:
        monkeypatch.setenv("MLX_AMD_GRAPH_SEGMENTS", "300,5000")
        make_runtime()
        assert bridge.graph_segments() == (300, 5000)
        for bad in ("0,5", "9,3", "256", "a,b"):
            monkeypatch.setenv("MLX_AMD_GRAPH_SEGMENTS", bad)
            with pytest.raises(ValueError, match="MLX_AMD_GRAPH_SEGMENTS"):
                make_runtime()
    finally:
        context._runtime = saved_rt
        bridge.set_graph_segments(*saved)


@pytest.mark.parametrize("graphs", [False, True])
def test_twin_cache_writes_run_as_one_launch_and_move_in_replays(monkeypatch, graphs):
    """An attention's k and v cache writes (two SliceUpdates with equal parameters, as
    mlx-lm's KVCache makes them) run as one launch of the twin kernel, each cache donated;
    replays move both writes to the next position natively (no node back in Python), also
    as graph nodes. With the twins off: two launches."""
    from profile_engine import null_counts

    from mlx_amd.runtime import context

    x = mx.array(np.arange(128, dtype=np.float32)).astype(mx.bfloat16)
    mx.eval(x)
    saved = context._runtime
    per_eval, stats = {}, {}
    try:
        for on in (False, True):
            ev = _grouping_evaluator(monkeypatch, on, graphs, ("TWINS",))
            kc, vc = mx.zeros((1, 2, 16, 32), mx.bfloat16), mx.zeros((1, 2, 16, 32), mx.bfloat16)
            mx.eval(kc, vc)
            counts = []
            for t in range(10):
                kv = x * float(t + 1)   # k and v made before either write (a projection's)
                k = kv[:64].reshape(1, 1, 2, 32).transpose(0, 2, 1, 3)
                v = kv[64:].reshape(1, 1, 2, 32).transpose(0, 2, 1, 3)
                kc[..., t:t + 1, :] = k
                vc[..., t:t + 1, :] = v
                before = null_counts(ev.native)
                ev.eval([kc[..., :t + 1, :], vc[..., :t + 1, :]])
                after = null_counts(ev.native)
                counts.append((after["launches"] - before["launches"], after["nodes"] - before["nodes"]))
            per_eval[on] = counts
            stats[on] = (ev.replays, ev.replay_python, ev.stats.by_prim["SliceUpdate"]["gpu"])
    finally:
        context._runtime = saved
    # the scaling and two cache writes: three launches, two with the twin; the first step
    # also copies each cache (mx.zeros' buffers are not ours to donate), later ones donate
    assert [c[0] for c in per_eval[False][:2]] == [5, 3] and [c[0] for c in per_eval[True][:2]] == [4, 2], per_eval
    for on in (False, True):
        steady = per_eval[on][1][0]
        if not graphs:
            assert all(c[0] == steady for c in per_eval[on][1:]), per_eval
        else:   # graph nodes instead of launches once the program has a graph
            assert all(c[0] + c[1] in (steady, 0) for c in per_eval[on][1:]), per_eval
        replays, python_nodes, gpu_nodes = stats[on]
        assert replays >= 8 and python_nodes == 0 and gpu_nodes == 2 * 10, stats


@pytest.mark.parametrize("table,shape,bits,per_layer", [("TWINS", "tiny", 0, 2), ("TWINS", "qwen3-tiny", 0, 3),
                                                        ("CHAINS", "tiny", 4, 2), ("CHAINS", "qwen3-tiny", 8, 2),
                                                        ("CHAINS", "tiny", 0, 2), ("CHAINS", "qwen3-tiny", 0, 2),
                                                        ("TAILS", "tiny", 4, None), ("TAILS", "qwen3-tiny", 8, None),
                                                        ("TAILS", "tiny", 0, 0), ("TWIN_CHAINS", "tiny", 0, 1),
                                                        ("TWIN_CHAINS", "qwen3-tiny", 4, 1)])
def test_grouping_in_a_decode_step(monkeypatch, table, shape, bits, per_layer):
    """mlx-lm's own decode step (random weights): with the twins on, each layer launches
    `per_layer` fewer kernels (Llama: q/k RoPE and k/v cache writes; Qwen 3: also its q/k
    norms, which then let the RoPE twins form); with the chains on, two fewer (each
    residual add + RMS norm goes into the projections after it, quantized or dense: the first
    layer's input norm has no add, the final norm and the head make up for it); with the
    tails on, the swiglu's own launches fewer for quantized weights (per_layer None: one
    where the runtime compiles it into one kernel, three node by node, as here without a
    run-time compiler; it goes into the gate and up's launch, itself in the chain of the
    layer's second norm; dense: none); in replays too, and no more nodes go back to Python in
    replays than without them. With the twin chains on, one fewer: the k and v cache writes go
    into the q/k RoPE launch (prompt and decode steps alike)."""
    from mlx_lm.models.cache import make_prompt_cache
    from profile_engine import null_counts

    from mlx_amd import fastops, llm
    from mlx_amd.runtime import context

    from mlx_amd.runtime.ops import compiled

    fastops.install()
    saved = context._runtime
    launches, python_nodes = {}, {}
    compiled.STATS.clear()
    if table == "TWINS":   # the twins alone (their chains would take one more launch a layer)
        from mlx_amd.runtime import evaluator as E

        monkeypatch.setattr(E, "TWIN_CHAINS", {})
    try:
        for on in (False, True):
            if table == "CHAINS" and not bits:   # dense chains are opt-in: on for this test
                from mlx_amd.runtime.ops import matmul

                monkeypatch.setattr(matmul, "CHAINS_AFTER", matmul.DENSE_CHAINS)
            ev = _grouping_evaluator(monkeypatch, on, False, (table,))
            model = llm.random_model(shape, "bfloat16", 0, quantize=bits)
            cache = make_prompt_cache(model)
            out = model(mx.array([[1, 2, 3, 4]]), cache=cache)
            tok = mx.argmax(out[:, -1, :], axis=-1)
            counts = []
            for _ in range(6):
                before = null_counts(ev.native)
                tok = mx.argmax(model(tok[:, None], cache=cache)[:, -1, :], axis=-1)
                ev.eval([tok])
                counts.append(null_counts(ev.native)["launches"] - before["launches"])
            launches[on], python_nodes[on] = counts, ev.replay_python
            assert ev.replays >= 3, (on, ev.replays)
    finally:
        fastops.uninstall()
        context._runtime = saved
    layers = len(model.layers)
    if per_layer is None:   # the swiglu's launches alone (it was planned alone with the tails off)
        per_layer = 1 if compiled.STATS["fused"] else 3
    # the first evaluation also runs the 4-token prompt: its MLPs take the tails too (qmv_h2
    # takes up to 8 rows), nothing else of this table
    first = 2 if table == "TAILS" and bits else 1
    assert [a - b for a, b in zip(launches[False], launches[True])] == [first * per_layer * layers] + \
        [per_layer * layers] * 5, launches
    assert python_nodes[True] == python_nodes[False], python_nodes


def test_twin_chain_across_a_growing_kv_cache(monkeypatch):
    """mlx-lm's KV cache grows by 256 positions at a time: the decode step that crosses a
    boundary changes the cache writes' shapes, so its replay hands the RoPE/cache-write chain
    back to Python after it already made the k rotation's input views (two deep: reshape,
    transpose) natively; those count as made (the null runtime: no values, the engine's
    bookkeeping), and the steps replay as often as without the chain."""
    from mlx_lm.models.cache import make_prompt_cache

    from mlx_amd import fastops, llm
    from mlx_amd.runtime import context

    fastops.install()
    saved = context._runtime
    toks = {}
    try:
        for on in (False, True):
            ev = _grouping_evaluator(monkeypatch, on, False, ("TWIN_CHAINS",))
            model = llm.random_model("tiny", "bfloat16", 0, quantize=4)
            cache = make_prompt_cache(model)
            prompt = mx.array([list(range(1, 252))])
            tok = mx.argmax(model(prompt, cache=cache)[:, -1, :], axis=-1)
            seq = []
            for _ in range(10):          # positions 251..260: the cache grows at 256
                tok = mx.argmax(model(tok[:, None], cache=cache)[:, -1, :], axis=-1)
                ev.eval([tok])
                seq.append(cache[0].keys.shape[2])
            toks[on] = (ev.replays, ev.replay_python, seq)
    finally:
        fastops.uninstall()
        context._runtime = saved
    (r0, p0, s0), (r1, p1, s1) = toks[False], toks[True]
    assert s1 == s0 and s1[0] == 256 and s1[-1] == 512, toks       # the cache did grow once
    assert r1 >= 5 and r1 == r0, toks
