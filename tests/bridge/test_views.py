"""Zero-copy views: try_view must make a view exactly when MLX's CPU backend does, with
MLX's layout (offset, strides, data_size, row/col/contiguous flags)."""

import mlx.core as mx
import numpy as np
import pytest

from hosteval import HostArena, evaluate, layout
from mlx_amd.runtime import bridge


def _base(kind):
    x = mx.arange(2 * 3 * 4, dtype=mx.float32).reshape(2, 3, 4)
    if kind == "transposed":
        x = x.transpose(2, 0, 1)
    elif kind == "sliced":
        x = mx.arange(4 * 6 * 4, dtype=mx.float32).reshape(4, 6, 4)[1:3, ::2, :]
    elif kind == "broadcast":
        x = mx.broadcast_to(mx.arange(4, dtype=mx.float32), (2, 3, 4))
    elif kind == "column":
        x = mx.arange(8, dtype=mx.float32).reshape(8, 1)[2:5]
    mx.eval(x)
    return x


# (name, base layout, op on an evaluated input); each op ends in one view primitive
CASES = [
    ("reshape", "plain", lambda x: x.reshape(6, 4)),
    ("reshape-T", "transposed", lambda x: x.reshape(4, 6)),
    ("reshape-T-copy", "transposed", lambda x: x.reshape(2, 12)),
    ("reshape-T-view", "transposed", lambda x: x.reshape(4, 2, 3, 1)),
    ("reshape-sliced", "sliced", lambda x: x.reshape(2, 3, 4, 1)),
    ("reshape-sliced-copy", "sliced", lambda x: x.reshape(12, 1, 2)),
    ("reshape-bcast", "broadcast", lambda x: x.reshape(6, 4)),
    ("reshape-vector", "plain", lambda x: x.reshape(1, 24, 1)),
    ("flatten", "plain", lambda x: mx.flatten(x)),
    ("flatten-T", "transposed", lambda x: mx.flatten(x, 1, 2)),
    ("unflatten", "plain", lambda x: mx.unflatten(x, 2, (2, 2))),
    ("transpose", "plain", lambda x: x.transpose(1, 2, 0)),
    ("transpose-sliced", "sliced", lambda x: x.transpose(2, 1, 0)),
    ("transpose-bcast", "broadcast", lambda x: x.transpose(2, 0, 1)),
    ("swap-last", "plain", lambda x: mx.swapaxes(x, 1, 2)),
    ("broadcast", "column", lambda x: mx.broadcast_to(x, (2, 3, 5))),
    ("broadcast-rank", "plain", lambda x: mx.broadcast_to(x, (3, 2, 3, 4))),
    ("broadcast-empty", "column", lambda x: mx.broadcast_to(x, (2, 3, 0))),
    ("broadcast-axes", "plain", lambda x: mx.broadcast_arrays(x, mx.ones((5, 1, 1, 1)))[0]),
    ("slice", "plain", lambda x: x[1:, 1:3, ::2]),
    ("slice-neg", "plain", lambda x: x[::-1, :, 3:0:-2]),
    ("slice-sliced", "sliced", lambda x: x[:, 1:, 1:3]),
    ("slice-T", "transposed", lambda x: x[1:3]),
    ("slice-empty", "plain", lambda x: x[:, 2:2]),
    ("slice-column", "column", lambda x: x[1:]),
    ("expand", "plain", lambda x: mx.expand_dims(x, (0, 2))),
    ("expand-T", "transposed", lambda x: mx.expand_dims(x, 3)),
    ("squeeze", "column", lambda x: mx.squeeze(x, 1)),
    ("as-strided", "plain", lambda x: mx.as_strided(x, (3, 4), (4, 1), 2)),
    ("as-strided-gappy", "plain", lambda x: mx.as_strided(x, (3, 2), (8, 3), 1)),
    ("stop-gradient", "transposed", lambda x: mx.stop_gradient(x)),
    ("view-same", "plain", lambda x: mx.view(x, mx.int32)),
    ("view-narrow", "plain", lambda x: mx.view(x, mx.int16)),
    ("view-narrow-T", "transposed", lambda x: mx.view(x, mx.uint8)),
    ("contiguous", "plain", lambda x: mx.contiguous(x)),
    ("contiguous-T", "transposed", lambda x: mx.contiguous(x)),
    ("split", "plain", lambda x: mx.split(x, [1, 3], axis=2)[1]),
    ("split-T", "transposed", lambda x: mx.split(x, 3, axis=2)[2]),
    ("depends", "transposed", lambda x: mx.depends([x], [mx.ones(2)])[0]),
]


# Random layouts (transposed, sliced with negative steps, broadcast) and random view ops.
def _rand_shape(r, n):
    dims = []
    while n > 1 and len(dims) < 3:
        d = r.choice([f for f in range(2, n + 1) if n % f == 0])
        dims.append(d)
        n //= d
    if n > 1:
        dims.append(n)
    dims += [1] * r.randint(0, 1)
    r.shuffle(dims)
    return dims


def _rand_slice(r, d):
    a = r.randint(0, max(d - 1, 0))
    b = r.randint(a, d)
    step = r.choice([1, 2, 3, -1, -2])
    if step > 0:
        return slice(a, b, step)
    return slice(b - 1 if b > 0 else None, a - 1 if a > 0 else None, step)


def _rand_input(r):
    n = r.choice([16, 24, 36, 48, 60])
    x = mx.arange(n, dtype=mx.float32).reshape(_rand_shape(r, n))
    for _ in range(r.randint(0, 3)):
        k = r.randint(0, 2)
        if k == 0 and x.ndim > 1:
            p = list(range(x.ndim))
            r.shuffle(p)
            x = x.transpose(p)
        elif k == 1:
            x = x[tuple(_rand_slice(r, d) if r.random() < 0.5 else slice(None) for d in x.shape)]
        elif k == 2:
            ax = r.randint(0, x.ndim)
            x = mx.broadcast_to(mx.expand_dims(x, ax), [*x.shape[:ax], r.randint(1, 3), *x.shape[ax:]])
    mx.eval(x)
    return x


def _rand_op(r, x):
    kinds = ["reshape", "transpose", "slice", "broadcast", "expand", "view", "stop"]
    if x.ndim >= 2:
        kinds.append("flatten")
    if 1 in x.shape:
        kinds.append("squeeze")
    if x.size and max(x.shape) > 1:
        kinds.append("split")
    if x.size >= 12:
        kinds.append("as_strided")
    if x.size == 0:
        kinds.remove("reshape")
    k = r.choice(kinds)
    if k == "reshape":
        shape = _rand_shape(r, x.size)
        return lambda a: a.reshape(shape)
    if k == "flatten":
        s = r.randint(0, x.ndim - 2)
        e = r.randint(s + 1, x.ndim - 1)
        return lambda a: mx.flatten(a, s, e)
    if k == "transpose":
        p = list(range(x.ndim))
        r.shuffle(p)
        return lambda a: a.transpose(p)
    if k == "slice":
        idx = tuple(_rand_slice(r, d) for d in x.shape)
        return lambda a: a[idx]
    if k == "broadcast":
        shape = [2] * r.randint(0, 1) + [d if d != 1 else r.randint(1, 3) for d in x.shape]
        return lambda a: mx.broadcast_to(a, shape)
    if k == "expand":
        ax = r.randint(0, x.ndim)
        return lambda a: mx.expand_dims(a, ax)
    if k == "squeeze":
        ax = x.shape.index(1)
        return lambda a: mx.squeeze(a, ax)
    if k == "split":
        ax = [i for i, d in enumerate(x.shape) if d > 1][0]
        at, part = r.randint(1, x.shape[ax] - 1), r.randint(0, 1)
        return lambda a: mx.split(a, [at], axis=ax)[part]
    if k == "view":
        dt = r.choice([mx.int32, mx.int16, mx.uint8])
        return lambda a: mx.view(a, dt)
    if k == "as_strided":
        st, off = (r.choice([1, 3, 5]), r.choice([0, 1, 2])), r.randint(0, 2)
        if off + st[0] + 2 * st[1] >= x.size:
            st, off = (1, 0), 0
        return lambda a: mx.as_strided(a, (2, 3), st, off)
    return lambda a: mx.stop_gradient(a)


@pytest.mark.parametrize("chunk", range(4))
def test_random_views_match_mlx(chunk):
    import random

    for seed in range(chunk * 150, (chunk + 1) * 150):
        r = random.Random(seed)
        x = _rand_input(r)
        op = _rand_op(r, x)
        ref = op(x)
        mx.eval(ref)
        out = op(x)
        g = bridge.Graph([out])
        nodes = g.nodes
        if not nodes:
            continue
        last = len(nodes) - 1
        for i in range(last):  # e.g. the Flatten in front of AsStrided: MLX's way
            g.eval_cpu(i)
            g.finish(i)
        made = g.try_view(last)
        if last == 0 and ref.size:  # (empty results: only the layout must agree)
            mlx_view = bridge.buffer_info(ref)[0] == bridge.buffer_info(x)[0]
            assert made == mlx_view, (seed, nodes[last][:2])
        if not made:
            g.eval_cpu(last)
        assert layout(g.info(g.outputs[0])) == layout(bridge.buffer_info(ref)), (seed, nodes[last][:2])
        g.finish(last)
        g.release()
        np.testing.assert_array_equal(np.array(out), np.array(ref))


@pytest.mark.parametrize("name,kind,op", CASES, ids=[c[0] for c in CASES])
def test_view_matches_mlx(name, kind, op):
    x = _base(kind)
    ref = op(x)
    mx.eval(ref)
    mlx_info = bridge.buffer_info(ref)
    mlx_made_view = mlx_info[0] == bridge.buffer_info(x)[0] or ref.size == 0

    out = op(x)
    g = bridge.Graph([out])
    nodes = g.nodes
    last = len(nodes) - 1
    for i in range(last):  # helper nodes (e.g. the ones() of depends) on MLX
        g.eval_cpu(i)
        g.finish(i)
    made = g.try_view(last)
    assert made == mlx_made_view, f"{nodes[last][0]}: bridge view={made}, MLX view={mlx_made_view}"
    if not made:
        g.eval_cpu(last)
    info = g.info(g.outputs[0])
    if made and out.size:
        in_slot = nodes[last][2][0]
        assert info[0] == g.info(in_slot)[0], "a view shares the input's buffer"
    assert layout(info) == layout(mlx_info)
    g.finish(last)
    g.release()
    np.testing.assert_array_equal(np.array(out), np.array(ref))


def test_every_output_of_split_is_a_view():
    x = _base("plain")
    parts = mx.split(x, [1, 3], axis=2)
    ref = mx.split(x, [1, 3], axis=2)
    mx.eval(ref)
    g = bridge.Graph(parts)
    assert [n[0] for n in g.nodes] == ["Split"] and len(g.nodes[0][3]) == 3
    assert g.try_view(0)
    for s, r in zip(g.outputs, ref):
        assert g.info(s)[0] == bridge.buffer_info(x)[0]
        assert layout(g.info(s)) == layout(bridge.buffer_info(r))
    g.finish(0)
    g.release()
    for p, r in zip(parts, ref):
        np.testing.assert_array_equal(np.array(p), np.array(r))


def test_non_view_primitives_are_refused():
    x = _base("plain")
    g = bridge.Graph([mx.exp(x)])
    assert g.try_view(0) is False
    assert g.info(g.outputs[0]) is None


def test_generic_view_flags():
    x = _base("plain")
    ref = x[:, 1:3, ::2]
    mx.eval(ref)
    out = mx.exp(x)[:, 1:3, ::2]  # any node whose output we may lay out ourselves
    g = bridge.Graph([out])
    nodes = g.nodes
    g.eval_cpu(0)
    g.finish(0)
    src = nodes[1][2][0]
    g.view(g.outputs[0], src, (12, 4, 2), 4)
    assert layout(g.info(g.outputs[0])) == layout(bridge.buffer_info(ref))
    g.finish(1)
    g.release()
    np.testing.assert_allclose(np.array(out), np.exp(np.array(ref)), rtol=1e-6)


def test_views_inside_a_larger_graph():
    a0 = mx.random.normal((4, 6, 8), key=mx.random.key(5))
    mx.eval(a0)

    def build():
        t = mx.transpose(a0, (1, 0, 2))[:, ::2]
        u = mx.expand_dims(t.reshape(6, 16), 0) * 2
        return [mx.squeeze(u, 0) - mx.broadcast_to(a0[0, :, :1].reshape(6, 1), (6, 16))]

    ref = build()
    mx.eval(ref)
    out = build()
    paths = evaluate(out, HostArena())
    assert sum(p == "view" for _, p in paths) >= 5
    np.testing.assert_allclose(np.array(out[0]), np.array(ref[0]), rtol=1e-6)


def test_run_views_runs_a_stretch_of_views_and_stops_where_python_must_take_over():
    x = _base("plain")
    # views 0-2, then a copy MLX must make (reshape of a transpose), then exp
    t = x.reshape(6, 4)[1:5].T           # Reshape, Slice, Transpose: views
    out = mx.exp(t.reshape(16))          # Reshape of a transposed input: MLX copies
    g = bridge.Graph([out])
    names = [n[0] for n in g.nodes]
    assert names == ["Reshape", "Slice", "Transpose", "Reshape", "Exp"], names
    stop, _ = g.run_views(0)            # (freed tokens: process-wide, other tests' too)
    assert stop == 3
    assert sorted(g.view_counts()) == [("Reshape", 1), ("Slice", 1), ("Transpose", 1)]
    assert g.view_counts() == []          # counted once
    assert g.run_views(3)[0] == 3         # a copy: nothing done, Python's node
    assert g.run_views(4)[0] == 4         # not a view
    assert g.info(g.outputs[0]) is None
    ref = x.reshape(6, 4)[1:5].T         # MLX's own view of the same
    mx.eval(ref)
    assert layout(g.info(g.nodes[2][3][0])) == layout(bridge.buffer_info(ref))
    with pytest.raises(Exception, match="run_views"):
        g.run_views(9)
    g.release()
