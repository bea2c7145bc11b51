"""The evaluator end to end, against MLX's own CPU evaluation of the same graph.

Each test runs twice: over the host driver (no GPU; every node goes to MLX's CPU
fallback or becomes a view — this is what CI proves) and over the GPU driver
(`-m gpu`, on the test machine), where the elementwise nodes run as kernels.
"""

import gc
import sys

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
import pytest

import mlx_amd
from mlx_amd.runtime import bridge
from mlx_amd.runtime import residency as residency_mod

FLOATS = [mx.float32, mx.float16, mx.bfloat16]
TOL = {mx.float32: 1e-5, mx.float16: 2e-3, mx.bfloat16: 1.6e-2}


def mlx_eval(*arrays):
    """MLX's own evaluation, whatever is patched."""
    mlx_amd._state["saved"].get("eval", mx.eval)(*arrays)


def to_np(a):
    if a.dtype == mx.bfloat16:
        a = a.astype(mx.float32)
        mlx_eval(a)
    return np.array(a, copy=True)


def reference(fn, *np_inputs):
    outs = fn(*[mx.array(x) for x in np_inputs])
    mlx_eval(outs)
    return outs


def check(fn, *np_inputs, tol=None):
    """Same graph twice: ours through mlx_amd.eval, the reference through MLX's CPU."""
    ours = fn(*[mx.array(x) for x in np_inputs])
    mx.eval(ours)  # patched: our evaluator
    ref = reference(fn, *np_inputs)
    ours_l = ours if isinstance(ours, (list, tuple)) else [ours]
    ref_l = ref if isinstance(ref, (list, tuple)) else [ref]
    for o, r in zip(ours_l, ref_l):
        assert o.shape == r.shape and o.dtype == r.dtype
        a, b = to_np(o), to_np(r)
        t = tol if tol is not None else TOL.get(r.dtype, 0)
        if t == 0:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=t, atol=t, equal_nan=True)


def rnd(shape, dtype=np.float32, seed=0, lo=-2.0, hi=2.0):
    return np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(dtype)


def cast(dt):
    return lambda x: x.astype(dt)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_unary_chain_layouts(runtime, dtype):
    x = rnd((33, 65))
    # contiguous, transposed, sliced with steps, broadcast, 0-d, empty
    check(lambda a: mx.exp(mx.tanh(a.astype(dtype))) * 2, x)
    check(lambda a: mx.sqrt(mx.abs(a.astype(dtype).T)), x)
    check(lambda a: mx.sin(a.astype(dtype)[1::3, ::2]), x)
    check(lambda a: mx.negative(mx.broadcast_to(a.astype(dtype)[:1], (7, 33, 65))), x)
    check(lambda a: mx.exp(a.astype(dtype)), np.float32(0.5))
    check(lambda a: mx.exp(a.astype(dtype)), np.zeros((0, 4), np.float32))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_binary_broadcast_and_compare(runtime, dtype):
    x, y = rnd((16, 1, 40), seed=1), rnd((1, 9, 40), seed=2)
    check(lambda a, b: a.astype(dtype) + b.astype(dtype), x, y)
    check(lambda a, b: mx.maximum(a.astype(dtype), b.astype(dtype).T.T) - 1, x, y)
    check(lambda a, b: a.astype(dtype) < b.astype(dtype), x, y)
    check(lambda a, b: a.astype(dtype) * 3.0 / (mx.abs(b.astype(dtype)) + 1), x, y)
    check(lambda a: a.astype(dtype) * a.astype(dtype).T, rnd((24, 24), seed=3))


def test_trees_and_siblings(runtime):
    x = rnd((8, 6))

    def fn(a):
        p, q = mx.split(a * 2, 2, axis=1)
        return [p + 1, {"q": q * q, "s": mx.sum(a, axis=0)}, (mx.exp(a),)]

    ours = fn(mx.array(x))
    mlx_amd.eval(ours)  # the tree form, like mx.eval
    ref = fn(mx.array(x))
    mlx_eval(ref)
    flat_o = [ours[0], ours[1]["q"], ours[1]["s"], ours[2][0]]
    flat_r = [ref[0], ref[1]["q"], ref[1]["s"], ref[2][0]]
    for o, r in zip(flat_o, flat_r):
        np.testing.assert_allclose(to_np(o), to_np(r), rtol=1e-6)


def test_grad_graph(runtime):
    w0 = rnd((5, 3), seed=4)
    x0 = rnd((7, 5), seed=5)

    def loss(w, x):
        return mx.mean(mx.tanh(x @ w) ** 2)

    def both(w, x):
        return mx.value_and_grad(loss)(w, x)

    check(lambda w, x: list(both(w, x)), w0, x0, tol=1e-5)


def test_reads_go_through_the_evaluator(runtime):
    a = mx.array(rnd((4, 4), seed=6))
    before = mlx_amd.stats()["evals"]
    v = (a * 2 + 1).sum().item()
    assert mlx_amd.stats()["evals"] == before + 1
    assert abs(v - float((rnd((4, 4), seed=6) * 2 + 1).sum())) < 1e-3
    b = mx.exp(a)
    assert "array(" in repr(b)
    assert mlx_amd.stats()["evals"] == before + 2
    c = np.array(mx.negative(a))
    np.testing.assert_allclose(c, -rnd((4, 4), seed=6), rtol=1e-6)
    if sys.version_info >= (3, 12):  # the buffer protocol is patchable from 3.12 on
        assert mlx_amd.stats()["evals"] == before + 3
    assert (mx.abs(a) + 1).tolist()[0][0] == pytest.approx(abs(float(rnd((4, 4), seed=6)[0, 0])) + 1, rel=1e-6)


def test_stats_count_every_node(runtime):
    x = mx.array(rnd((32, 32), seed=7))
    y = mx.exp(x) + mx.reshape(x, (32, 32)).T
    mx.eval(y)
    s = mlx_amd.stats()
    by = s["by_primitive"]
    assert sum(sum(c.values()) for c in by.values()) == sum(s["nodes"].values())
    assert by["Transpose"].get("view", 0) == 1
    if runtime.driver.platform == "host":
        assert s["nodes"]["gpu"] == 0 and by["Exp"] == {"cpu": 1}
        assert s["launch_thread"]["enabled"] is False   # nothing to launch
    else:
        assert by["Exp"] == {"gpu": 1} and by["Add"] == {"gpu": 1}
    assert set(s["launch_thread"]) == {"enabled", "running", "jobs", "launches", "waits"}


def test_weights_upload_once_and_escaped_writeback(gpu_runtime):
    w = mx.array(rnd((256, 256), seed=8))
    mlx_eval(w)  # an MLX-owned host buffer: uploaded on first GPU use
    gpu_runtime.residency._drop_consts()   # earlier tests' scalars would be found by value
    m0 = mlx_amd.stats()["memory"]
    outs = []
    for i in range(5):
        # exp(w) * i is an intermediate nobody holds: never written back; the sum escapes
        outs.append(mx.tanh(mx.exp(w) * float(i)) + w)
        mx.eval(outs[-1])
    held = mx.exp(w) + 1.0          # an intermediate the caller still holds escapes too
    last = mx.negative(held)
    mx.eval(last)
    m1 = mlx_amd.stats()["memory"]
    # w once, plus each distinct scalar value float(i) once (4-byte constants, cached by
    # value: held's 1.0 is i=1's)
    assert m1["uploads"] - m0["uploads"] == 1 + 5
    assert m1["upload_bytes"] - m0["upload_bytes"] == 256 * 256 * 4 + 5 * 4
    # eager: the 5 outputs, held and last at the end of their evaluations; lazy: none yet
    lazy = gpu_runtime.residency.lazy
    assert m1["writebacks"] - m0["writebacks"] == (0 if lazy else 5 + 2)
    assert m1["writeback_bytes"] - m0["writeback_bytes"] == (0 if lazy else 7 * 256 * 256 * 4)
    np.testing.assert_allclose(to_np(held), np.exp(rnd((256, 256), seed=8)) + 1, rtol=1e-6)
    ref = np.tanh(np.exp(rnd((256, 256), seed=8)) * 4) + rnd((256, 256), seed=8)
    np.testing.assert_allclose(to_np(outs[-1]), ref, rtol=1e-5, atol=1e-5)
    m2 = mlx_amd.stats()["memory"]
    # lazy: exactly the two arrays read were copied back, once each
    assert m2["writebacks"] - m1["writebacks"] == (2 if lazy else 0)
    to_np(held)
    assert mlx_amd.stats()["memory"]["writebacks"] == m2["writebacks"]


def test_no_leaks_over_many_evaluations(runtime):
    x = mx.array(rnd((64,), seed=9))
    res = runtime.residency

    def settled():
        # let arrays of earlier tests die, then drain the deleters' queue (each eval does);
        # the constant cache (bounded below) starts over so its slabs do not count
        gc.collect()
        mx.eval(x + 1)
        gc.collect()
        mx.eval(x + 1)
        res._drop_consts()
        return bridge.live(), runtime.residency.device_pool.get_active_memory(), \
            runtime.residency.stats()["our_buffers"], mx.get_active_memory()

    before = settled()
    most = 0
    for i in range(10_000 if runtime.driver.platform == "host" else 6_000):
        y = mx.exp(x) * 0.5 + i     # a new constant value each time
        mx.eval(y)
        most = max(most, len(res._const_slabs))
    del y
    assert most * residency_mod.CONST_SLAB <= residency_mod.CONST_BYTES + residency_mod.CONST_SLAB
    assert settled() == before


def test_out_of_memory_leaves_arrays_intact(runtime):
    pool = runtime.residency.device_pool
    x = mx.array(rnd((1024, 1024), seed=10))
    y = mx.exp(x)
    mx.eval(y)
    pool.clear_cache()   # a cached block would satisfy the request without the driver
    old = pool.set_memory_limit(pool.get_active_memory() + 1024)
    try:
        z = mx.exp(y) + y
        if runtime.driver.platform == "host":
            mx.eval(z)  # all on MLX's CPU allocator: our pool is not asked
        else:
            with pytest.raises(MemoryError, match="bytes"):
                mx.eval(z)
    finally:
        pool.set_memory_limit(old)
    np.testing.assert_allclose(to_np(y), np.exp(rnd((1024, 1024), seed=10)), rtol=1e-6)
    z = mx.exp(y) + y
    mx.eval(z)
    np.testing.assert_allclose(to_np(z), np.exp(np.exp(rnd((1024, 1024), seed=10))) + np.exp(rnd((1024, 1024), seed=10)), rtol=1e-5)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(20, 64)
        self.l2 = nn.Linear(64, 64)
        self.l3 = nn.Linear(64, 5)

    def __call__(self, x):
        return self.l3(nn.relu(self.l2(nn.gelu(self.l1(x)))))


def _train(steps, enabled):
    mx.random.seed(0)
    model = MLP()
    opt = optim.Adam(learning_rate=1e-2)
    x = mx.array(rnd((128, 20), seed=11))
    y = mx.array(np.random.default_rng(12).integers(0, 5, 128).astype(np.int32))

    def loss_fn(m, a, b):
        return nn.losses.cross_entropy(m(a), b, reduction="mean")

    step = nn.value_and_grad(model, loss_fn)
    losses = []
    for _ in range(steps):
        loss, grads = step(model, x, y)
        opt.update(model, grads)
        mx.eval(model.parameters(), opt.state, loss)
        losses.append(loss.item())
    return losses


def test_mlp_training_loop_matches_plain_mlx(runtime):
    ours = _train(12, True)
    mlx_amd.disable()
    try:
        ref = _train(12, False)
    finally:
        mlx_amd.enable()
    np.testing.assert_allclose(ours, ref, rtol=2e-4, atol=1e-5)
    assert ours[-1] < ours[0]
    s = mlx_amd.stats()
    assert s["nodes"]["cpu"] > 0 or s["nodes"]["gpu"] > 0
    if runtime.driver.platform != "host":
        assert s["nodes"]["gpu"] > 0


@pytest.mark.parametrize("fn", [mx.log2, mx.log10, mx.log, mx.rsqrt, mx.sqrt], ids=lambda f: f.__name__)
def test_parameterised_unary_primitives(runtime, fn):
    # Log carries its base and Sqrt its reciprocal flag as primitive state
    check(lambda a: fn(a), rnd((40, 3), lo=0.1, hi=5.0, seed=13))


def test_eval_pauses_the_cyclic_gc_and_restores_it(runtime):
    # the node loop runs with the cyclic collector off (a speed measure); whatever the
    # program had set comes back after every evaluation, also after a failing one
    ev = runtime.evaluator
    seen = []
    real_run = ev._run

    def spy(g):
        seen.append(gc.isenabled())
        return real_run(g)

    ev._run = spy
    try:
        x = mx.array(np.arange(8, dtype=np.float32))
        mx.eval(x * 2 + 1)
        assert gc.isenabled() and seen == [False]
        gc.disable()
        try:
            mx.eval(x * 3 + 1)
            assert not gc.isenabled()      # the program's choice stays
        finally:
            gc.enable()

        def boom(g):
            seen.append(gc.isenabled())
            raise RuntimeError("node failed")

        ev._run = boom
        with pytest.raises(RuntimeError, match="node failed"):
            mx.eval(x * 4 + 1)
        assert gc.isenabled() and seen[-1] is False
    finally:
        ev._run = real_run
