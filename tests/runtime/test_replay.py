"""Programs without a GPU: the structure fingerprint, and the bridge refusing programs that
do not fit (tests/runtime/test_replay_gpu.py replays them on the device)."""

import mlx.core as mx
import pytest

from mlx_amd.runtime import bridge


def graph(f, *args):
    return bridge.Graph([f(*args)])


def test_fingerprint_is_structure_not_shapes_or_values():
    a, b = mx.ones((3, 4)), mx.ones((5, 7))
    mx.eval(a, b)
    g1, g2 = graph(lambda x: mx.exp(x) + 1.0, a), graph(lambda x: mx.exp(x) + 2.0, b)
    assert g1.fingerprint == g2.fingerprint
    g3 = graph(lambda x: mx.log(x) + 1.0, a)
    assert g3.fingerprint != g1.fingerprint
    g4 = graph(lambda x: mx.exp(x) + x, a)     # other topology
    assert g4.fingerprint != g1.fingerprint


def test_node_and_meta_rows_equal_the_tables():
    a = mx.ones((2, 3))
    mx.eval(a)
    g = graph(lambda x: mx.sum(x * 2.0, axis=1), a)
    nodes, metas = g.nodes, g.arrays
    for i, row in enumerate(nodes):
        assert g.node(i) == row
    for s, row in enumerate(metas):
        assert g.meta(s) == row
    g2 = graph(lambda x: mx.sum(x * 2.0, axis=1), a)
    for i, row in enumerate(nodes):    # without building the table first
        assert g2.node(i)[0] == row[0] and g2.node(i)[2:] == row[2:]


def outputs():
    from mlx_amd.runtime.memory import Pool

    pool = Pool(lambda n: 1 << 20, lambda p: None, lambda: (1 << 30, 1 << 30))
    return bridge.Outputs(pool.core, pool.core)


def test_outputs_table_takes_releases_and_adopts():
    """The replay's table of fresh output pairs (open addressing with backward-shift erase):
    thousands of takes and releases in a random order, checked against a Python model;
    what adopt() hands over is exactly what is left, and the table is empty after it."""
    import random

    from mlx_amd.runtime.memory import Pool

    rng = random.Random(7)
    pool = Pool(lambda n: 1 << 20, lambda p: None, lambda: (1 << 30, 1 << 30))   # alive: it serves misses
    outs = bridge.Outputs(pool.core, pool.core)
    live = {}
    for step in range(6000):
        if live and rng.random() < 0.45:
            key = rng.choice(list(live))
            assert outs.release(key)
            del live[key]
            assert not outs.has(key) and not outs.release(key)
        else:
            key, host, dev = outs.take(rng.choice((16, 256, 4096)))
            assert key not in live and not isinstance(key, bool)
            live[key] = (host, dev)
        if step % 500 == 0:
            assert len(outs) == len(live) and all(outs.has(k) for k in live)
    assert len(outs) == len(live) and all(outs.has(k) for k in live)
    adopted = outs.adopt()
    assert {k: (h, d) for k, h, d, _ in adopted} == live
    assert len(outs) == 0 and not any(outs.has(k) for k in live)


def test_program_for_another_structure_is_refused():
    a = mx.ones((2, 3))
    mx.eval(a)
    g = graph(lambda x: mx.exp(x), a)
    p = bridge.Program(g.fingerprint ^ 1, len(g))
    with pytest.raises(ValueError, match="another graph structure"):
        g.record(p, 0, 1)
    with pytest.raises(ValueError, match="another graph structure"):
        g.replay(p, {}, outputs(), 0, 0, 0, 0, lambda *a: [], lambda *a: None)


def test_set_gpu_checks_its_steps():
    a = mx.ones((4,))
    mx.eval(a)
    g = graph(lambda x: mx.exp(x), a)
    p = bridge.Program(g.fingerprint, len(g))
    n = len(g) - 1
    with pytest.raises(ValueError, match="not recorded as a GPU node"):
        p.set_gpu(n, (16,), [], [], [], 0)
    g.record(p, n, 2)
    with pytest.raises(ValueError, match="one byte size per output"):
        p.set_gpu(n, (16, 16), [], [], [], 0)
    with pytest.raises(ValueError, match="bad buffer reference"):
        p.set_gpu(n, (16,), [], [], [("L", 1, (1, 1, 1), (32, 1, 1), 0, [("i", 3, 0)], b"", -1)], 0)
    with pytest.raises(ValueError, match="bad buffer reference"):   # one zeroed scratch: 'z' 0
        p.set_gpu(n, (16,), [], [], [("L", 1, (1, 1, 1), (32, 1, 1), 0, [("z", 1, 0)], b"", -1)], 0)
    with pytest.raises(ValueError, match="step kind"):
        p.set_gpu(n, (16,), [], [], [("X", 1, [], -1)], 0)
    p.set_gpu(n, (16,), [], [], [("L", 1, (1, 1, 1), (32, 1, 1), 0, [("i", 0, 0), ("o", 0, 0)], b"", -1)], 512)
    assert p.arena_bytes == 512
    assert list(p.buffer_sizes()) == [16]
    assert [k for _, k in p.kinds()][-1] == "gpu"
