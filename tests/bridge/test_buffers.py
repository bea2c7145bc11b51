"""Our buffers inside MLX arrays: attach, deleter tokens, watches, donation, leaks."""

import gc

import mlx.core as mx
import numpy as np

from hosteval import HostArena, evaluate, host_array
from mlx_amd.runtime import bridge


def _run_attached(out, arena):
    """Evaluate with every float32 elementwise node on attached host buffers."""
    return evaluate([out], arena, views=True, compute=True)


def test_attach_layout_and_token():
    arena = HostArena()
    x = mx.arange(6, dtype=mx.float32).reshape(2, 3)
    mx.eval(x)
    y = mx.exp(x)
    g = bridge.Graph([y])
    addr, token = arena.alloc(y.nbytes)
    g.attach(g.outputs[0], addr, token)
    info = g.info(g.outputs[0])
    key, data_ptr, offset, strides, data_size, nbytes, row, col, contig, ours = info
    assert data_ptr == addr and key == addr - 8 and offset == 0
    assert strides == (3, 1) and data_size == 6 and nbytes == y.nbytes
    assert row and contig and not col and ours == token
    host_array(info, (2, 3), "float32")[...] = np.exp(np.array(x))
    g.finish(0)
    g.release()
    np.testing.assert_allclose(np.array(y), np.exp(np.array(x)), rtol=1e-6)
    # MLX's own ops read our buffer and size it through the header
    np.testing.assert_allclose(np.array(y * 2), 2 * np.exp(np.array(x)), rtol=1e-6)
    assert bridge.buffer_info(y)[9] == token
    assert token not in arena.reap()
    del y
    gc.collect()
    assert token in arena.reap()


def test_tokens_arrive_when_arrays_die():
    arena = HostArena()
    base_count, base_bytes = bridge.live()
    x = mx.linspace(0, 1, 1000)
    mx.eval(x)
    a = mx.exp(x)          # attached, escapes to the caller
    b = (a + 1) * (a - 1)  # temporaries inside die during the evaluation
    paths = _run_attached(b, arena)
    assert [p for _, p in paths].count("numpy") >= 3
    temporaries = [t for t in arena.freed]
    assert len(temporaries) >= 2, "temporaries are freed while evaluating"
    count, nbytes = bridge.live()
    assert count - base_count == 2 and nbytes - base_bytes == 2 * x.nbytes
    np.testing.assert_allclose(np.array(b), np.exp(np.array(x)) ** 2 - 1, rtol=1e-5, atol=1e-6)
    del a, b
    gc.collect()
    arena.reap()
    assert bridge.live() == (base_count, base_bytes)
    assert not arena.blocks


def test_watch_reports_expired_once():
    w = mx.random.normal((32,), key=mx.random.key(7))
    mx.eval(w)
    y = w * 3
    g = bridge.Graph([y])
    leaf = [s for s, m in enumerate(g.arrays) if m[2] and m[0] == (32,)][0]
    key = g.watch(leaf)
    assert key == g.info(leaf)[0]
    assert g.watch(leaf) == key  # watching again is harmless
    for i in range(len(g)):
        g.eval_cpu(i)
        g.finish(i)
    g.release()
    assert key not in bridge.expired()
    del w
    gc.collect()
    gone = bridge.expired()
    assert key in gone
    assert key not in bridge.expired()
    np.testing.assert_allclose(np.array(y).shape, (32,))


def test_donation_rule():
    arena = HostArena()
    x = mx.arange(8, dtype=mx.float32)
    mx.eval(x)

    # y = exp(x) has one consumer and nobody else holds it: donatable there
    z = mx.exp(x) + 1
    g = bridge.Graph([z])
    nodes = g.nodes
    add = [i for i, n in enumerate(nodes) if n[0] == "Add"][0]
    y_slot = [s for s in nodes[add][2] if not g.arrays[s][2] and g.arrays[s][0] == (8,)][0]
    exp_node = [i for i, n in enumerate(nodes) if n[0] == "Exp"][0]
    assert not g.donatable(nodes[exp_node][2][0]), "the caller holds x"
    addr, token = arena.alloc(32)
    g.attach(y_slot, addr, token)
    host_array(g.info(y_slot), (8,), "float32")[...] = np.exp(np.arange(8.0))
    g.finish(exp_node)
    _eval_until_from(g, exp_node + 1, add)
    assert g.donatable(y_slot)
    out = g.outputs[0]
    g.share(out, y_slot)
    info = g.info(out)
    assert info[0] == g.info(y_slot)[0] and info[9] == token and info[6]
    ys = host_array(g.info(y_slot), (8,), "float32").copy()
    host_array(info, (8,), "float32")[...] = ys + 1
    g.finish(add)
    assert not g.donatable(out), "graph outputs are never donatable"
    g.release()
    np.testing.assert_allclose(np.array(z), np.exp(np.arange(8.0)) + 1, rtol=1e-6)


def _eval_until_from(g, start, stop):
    for i in range(start, stop):
        if not g.try_view(i):
            g.eval_cpu(i)
        g.finish(i)


def test_donation_refused_when_held_or_shared():
    x = mx.arange(8, dtype=mx.float32)
    mx.eval(x)

    # held by the caller
    y = mx.exp(x)
    g = bridge.Graph([y + 1])
    y_slot = g.nodes[0][3][0]
    g.eval_cpu(0)
    g.finish(0)
    assert not g.donatable(y_slot)
    g.release()
    del y

    # two consumers: not at the first, yes at the second
    y = mx.exp(x)
    a, b = y * 2, y * 3
    del y
    g = bridge.Graph([a, b])
    nodes = g.nodes
    y_slot = [n for n in nodes if n[0] == "Exp"][0][3][0]
    users = [i for i, n in enumerate(nodes) if y_slot in n[2]]
    assert len(users) == 2
    _eval_until_from(g, 0, users[0])
    assert not g.donatable(y_slot)
    g.eval_cpu(users[0])
    g.finish(users[0])
    _eval_until_from(g, users[0] + 1, users[1])
    assert g.donatable(y_slot)
    g.release()

    # a view shares the buffer
    y = mx.exp(x)
    v = y.reshape(2, 4)
    w = y + 1
    del y
    g = bridge.Graph([w, v])
    nodes = g.nodes
    y_slot = [n for n in nodes if n[0] == "Exp"][0][3][0]
    add = [i for i, n in enumerate(nodes) if n[0] == "Add"][0]
    for i in range(len(nodes)):  # everything but the Add, whose turn it then is
        if i == add:
            continue
        if not g.try_view(i):
            g.eval_cpu(i)
        g.finish(i)
    assert not g.donatable(y_slot), "the reshape view holds the same Data"
    g.release()


def test_buffer_info_of_plain_arrays():
    x = mx.arange(12, dtype=mx.int16).reshape(3, 4)
    assert bridge.buffer_info(x * 1) is None  # unevaluated
    mx.eval(x)
    t = x.T
    mx.eval(t)
    i = bridge.buffer_info(t)
    assert i[0] == bridge.buffer_info(x)[0] and i[3] == (1, 4)
    assert (i[6], i[7], i[8]) == (False, True, True) and i[9] == -1
    assert i[5] >= x.nbytes


def test_no_leak_over_many_evaluations():
    arena = HostArena()
    x = mx.arange(64, dtype=mx.float32)
    mx.eval(x)
    gc.collect()
    arena.reap()
    base = bridge.live()
    keep = []
    for i in range(10000):
        out = mx.exp(x * 0.01) + i
        evaluate([out], arena)
        if i % 1000 == 0:
            keep.append(out)  # some escape, and are released later
    del out
    gc.collect()
    arena.reap()
    assert bridge.live()[0] - base[0] == len(keep)
    np.testing.assert_allclose(np.array(keep[-1]), np.exp(np.arange(64) * 0.01) + 9000,
                               rtol=1e-5)
    del keep
    gc.collect()
    arena.reap()
    assert bridge.live() == base
    assert not arena.blocks


def test_exit_with_live_and_in_flight_buffers():
    """Deleters that run during interpreter shutdown (or never) must not crash it."""
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "import mlx.core as mx\n"
        "from hosteval import HostArena, evaluate\n"
        "arena = HostArena()\n"
        "x = mx.linspace(0, 1, 1 << 16)\n"
        "kept = [mx.exp(x) + i for i in range(4)]\n"
        "evaluate(kept, arena)\n"
        "pending = [mx.sum(k @ mx.ones((1 << 16, 64))) for k in kept]\n"
        "mx.async_eval(pending)\n"  # MLX still reading our buffers at exit
        "print('done')\n" % here)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    # cwd=here: `python -c` puts the cwd first on sys.path, and from the repository root the
    # source tree (without the built _bridge) would shadow the installed package
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, cwd=here)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "done"
