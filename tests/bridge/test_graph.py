"""Graph walk, node table, parameters, fallback and completion; MLX is the oracle."""

import mlx.core as mx
import numpy as np
import pytest

from hosteval import HostArena, evaluate
from mlx_amd.runtime import bridge


def twin(build):
    """Build the same graph twice: MLX evaluates one, the bridge the other."""
    ref = build()
    mx.eval(ref)
    return ref, build()


def assert_same(ref, out):
    for r, o in zip(ref, out):
        assert r.shape == o.shape and r.dtype == o.dtype
        np.testing.assert_allclose(np.array(o), np.array(r), rtol=1e-6, atol=1e-6)


def check_topology(g, outputs):
    nodes, arrays = g.table()
    produced = {}
    for i, (prim, params, ins, outs) in enumerate(nodes):
        assert isinstance(prim, str) and prim
        for s in ins:  # inputs come from leaves or earlier nodes
            assert arrays[s][2] or produced[s] < i
        for s in outs:
            assert s not in produced and not arrays[s][2]
            produced[s] = i
    # every slot is a leaf or produced exactly once
    assert all(a[2] or s in produced for s, a in enumerate(arrays))
    for s, o in zip(g.outputs, outputs):
        assert arrays[s][0] == tuple(o.shape) and arrays[s][1] == str(o.dtype).split(".")[-1]


def test_walk_and_evaluate_mixed_graph():
    x0 = mx.arange(12, dtype=mx.float32).reshape(3, 4)
    mx.eval(x0)

    def build():
        y = mx.exp(x0.T * 0.1) - 1
        return [mx.sum(y, axis=1), (y[1:, ::2] + 2).astype(mx.float16), mx.maximum(y, 0.5)]

    ref, out = twin(build)
    g = bridge.Graph(out)
    check_topology(g, out)
    assert len(g) == len(g.nodes)
    g.release()
    paths = evaluate(out, HostArena())
    assert {p for _, p in paths} >= {"view", "numpy", "cpu"}
    assert_same(ref, out)


def test_siblings_and_shared_subgraphs():
    x0 = mx.arange(10, dtype=mx.int32)
    mx.eval(x0)

    def build():
        q, r = mx.divmod(x0 * 3, 4)
        parts = mx.split(mx.exp(x0.astype(mx.float32)), [2, 7])
        shared = mx.sqrt(q.astype(mx.float32))
        return [r, parts[2] + 1, parts[0], shared * shared + shared]

    ref, out = twin(build)
    g = bridge.Graph(out)
    check_topology(g, out)
    nodes = g.nodes
    divmod_nodes = [n for n in nodes if n[0] == "DivMod"]
    split_nodes = [n for n in nodes if n[0] == "Split"]
    assert len(divmod_nodes) == 1 and len(divmod_nodes[0][3]) == 2
    assert len(split_nodes) == 1 and len(split_nodes[0][3]) == 3
    assert sum(n[0] == "Sqrt" for n in nodes) == 1  # the shared sqrt is walked once
    mul = [n for n in nodes if n[0] == "Multiply" and n[2][0] == n[2][1]]
    assert mul, "x * x keeps both input references"
    g.release()
    paths = evaluate(out, HostArena())
    assert ("Split", "view") in paths
    assert_same(ref, out)


def test_evaluated_arrays_are_waited_leaves():
    a = mx.random.normal((64, 64), key=mx.random.key(1))
    b = a @ a
    mx.async_eval(b)  # may still be running on MLX's CPU stream
    out = mx.tanh(b) + a
    g = bridge.Graph([out])
    nodes, arrays = g.table()
    leaves = [s for s, m in enumerate(arrays) if m[2]]
    assert leaves and all(g.info(s) is not None for s in leaves)
    assert all(n[0] != "Matmul" for n in nodes)
    g.release()
    evaluate([out], HostArena())
    np.testing.assert_allclose(np.array(out), np.tanh(np.array(b)) + np.array(a),
                               rtol=1e-5, atol=1e-6)


def test_output_that_is_already_evaluated():
    x = mx.ones((3,))
    mx.eval(x)
    g = bridge.Graph([x, x])
    assert g.nodes == [] and g.outputs[0] == g.outputs[1]
    assert g.arrays[g.outputs[0]] == ((3,), "float32", True)


def test_params_are_read_from_state():
    x = mx.ones((2, 3, 4))
    mx.eval(x)
    cases = {
        "sum": (mx.sum(x, axis=(0, 2)), "Reduce"),
        "prod": (mx.prod(x, axis=1), "Reduce"),
        "astype": (x.astype(mx.bfloat16), "AsType"),
        "transpose": (mx.transpose(x, (2, 0, 1)), "Transpose"),
        "slice": (x[1:, ::2, 3:0:-1], "Slice"),
        "log": (mx.log(x), "Log"),
        "log2": (mx.log2(x), "Log"),
        "log10": (mx.log10(x), "Log"),
        "add": (x + x, "Add"),
    }
    got = {}
    for name, (arr, prim) in cases.items():
        nodes = [n for n in bridge.Graph([arr]).nodes if n[0] == prim]
        assert len(nodes) == 1, name
        got[name] = nodes[0][1]
    # Reduce: (ReduceType, axes); MLX's enum is {And, Or, Sum, Prod, Min, Max}
    assert got["sum"] == (2, (0, 2)) and got["prod"] == (3, (1,))
    assert got["astype"] == "bfloat16"
    assert got["transpose"] == (2, 0, 1)
    start, end, strides = got["slice"]
    assert start[:2] == (1, 0) and strides == (1, 2, -1) and len(end) == 3
    # Log: Base enum {two, ten, e}
    assert (got["log2"], got["log10"], got["log"]) == (0, 1, 2)
    assert got["add"] is None
    # interned names: the evaluator may compare by identity
    a = bridge.Graph([x + 1]).nodes[-1][0]
    b = bridge.Graph([x + 2]).nodes[-1][0]
    assert a is b


def test_grad_graphs():
    w0 = mx.random.normal((8, 4), key=mx.random.key(2))
    x0 = mx.random.normal((16, 8), key=mx.random.key(3))
    mx.eval(w0, x0)

    def loss(w, x):
        return mx.mean(mx.square(mx.tanh(x @ w) - 0.5))

    def build():
        value, grad = mx.value_and_grad(loss)(w0, x0)
        return [value, grad]

    ref, out = twin(build)
    evaluate(out, HostArena())
    assert_same(ref, out)


def test_eval_cpu_error_becomes_runtime_error():
    singular = mx.zeros((3, 3))
    with pytest.raises(Exception) as mlx_err:
        mx.eval(mx.linalg.inv(singular, stream=mx.cpu))
    out = mx.linalg.inv(singular, stream=mx.cpu)
    g = bridge.Graph([out])
    node = [i for i, n in enumerate(g.nodes) if n[0] == "Inverse"][0]
    for i in range(node):
        g.eval_cpu(i)
        g.finish(i)
    with pytest.raises(RuntimeError) as err:
        g.eval_cpu(node)
    assert "Inverse" in str(err.value)
    assert str(mlx_err.value).split("]")[-1].strip() in str(err.value)
    g.release()


def test_error_paths():
    x = mx.ones((4,))
    mx.eval(x)
    y = mx.exp(x)
    z = y * 2
    g = bridge.Graph([z])
    nodes, arrays = g.table()
    n_exp = [i for i, n in enumerate(nodes) if n[0] == "Exp"][0]
    n_mul = len(nodes) - 1
    with pytest.raises(IndexError, match="slot"):
        g.info(len(arrays))
    with pytest.raises(IndexError, match="slot"):
        g.info(-1)
    with pytest.raises(IndexError, match="node"):
        g.eval_cpu(len(nodes))
    with pytest.raises(ValueError, match="no data yet"):
        g.eval_cpu(n_mul)  # its input has not been evaluated
    with pytest.raises(ValueError, match="has no data"):
        g.finish(n_exp)
    leaf = nodes[n_exp][2][0]
    with pytest.raises(ValueError, match="leaf"):
        g.attach(leaf, 0, 1)
    out_slot = nodes[n_exp][3][0]
    with pytest.raises(ValueError, match="256-byte"):
        g.attach(out_slot, 1000, 1)
    with pytest.raises(ValueError, match="strides"):
        g.view(out_slot, leaf, (1, 1), 0)
    with pytest.raises(ValueError, match="outside the input buffer"):
        g.view(out_slot, leaf, (2,), 0)
    with pytest.raises(TypeError):
        bridge.Graph([1, 2])
    g.eval_cpu(n_exp)
    g.finish(n_exp)
    with pytest.raises(ValueError, match="already finished"):
        g.finish(n_exp)
    for i in range(n_exp + 1, len(nodes)):
        g.eval_cpu(i)
        g.finish(i)
    # y's last consumer finished: the graph let go of it
    with pytest.raises(ValueError, match="released"):
        g.info(out_slot)
    g.release()
    with pytest.raises(IndexError):
        g.info(0)
    np.testing.assert_allclose(np.array(z), np.exp(np.ones(4)) * 2, rtol=1e-6)


def test_finish_detaches_like_mlx():
    x = mx.ones((5,))
    mx.eval(x)
    y = mx.exp(x)
    z = y + 1
    g = bridge.Graph([z])
    for i in range(len(g)):
        g.eval_cpu(i)
        g.finish(i)
    g.release()
    # detached and available: MLX reads them without evaluating anything again
    g2 = bridge.Graph([z, y])
    assert g2.nodes == [] and all(m[2] for m in g2.arrays)
    np.testing.assert_allclose(np.array(y), np.exp(np.ones(5)), rtol=1e-6)


def test_evaluation_inside_grad_keeps_tracers():
    arena = HostArena()

    def f(x, ours):
        y = mx.exp(x) * x
        if ours:
            evaluate([y], arena)  # tracer nodes: finished but not detached
        else:
            mx.eval(y)
        return (y * y).sum()

    x = mx.linspace(0, 1, 7)
    ref = mx.grad(lambda x: f(x, False))(x)
    mx.eval(ref)
    out = mx.grad(lambda x: f(x, True))(x)
    evaluate([out], arena)
    np.testing.assert_allclose(np.array(out), np.array(ref), rtol=1e-6)


def _key(fn, *xs):
    """node_key of the last node of fn(*xs) (a GPU node's plan-cache key and input rows)."""
    for x in xs:
        mx.eval(x)
    g = bridge.Graph([fn(*xs)])
    try:
        got = g.node_key(len(g) - 1)
        assert got is not None
        return got
    finally:
        g.release()


def test_node_key_holds_what_the_plan_depends_on():
    """Equal layouts give equal keys, and each thing a plan may depend on (dtype, shape,
    strides, data size, contiguity, ndim) changes the key; the info rows are the
    inputs' buffer_info and the item sizes their dtypes'."""
    a = mx.arange(24, dtype=mx.float32).reshape(4, 6)
    b = mx.arange(24, dtype=mx.float32).reshape(4, 6) + 1
    exp = lambda x: mx.exp(x)  # noqa: E731
    k, infos, sizes = _key(exp, a)
    assert k == _key(exp, b)[0]                                    # same layout, other values
    assert infos == [bridge.buffer_info(a)] and sizes == [4]
    variants = [
        _key(exp, a.astype(mx.float16)),                           # dtype
        _key(exp, a.reshape(6, 4)),                                # shape
        _key(exp, a.T),                                            # strides, contiguity
        _key(exp, a[:, :3]),                                       # strides, data size
        _key(exp, mx.broadcast_to(a[:1], (4, 6))),                 # zero strides
        _key(exp, mx.zeros((2, 4, 6))),                            # ndim
    ]
    keys = [k] + [v[0] for v in variants]
    assert len(set(keys)) == len(keys)
    assert _key(lambda c, x, y: mx.where(c, x, y), a > 3, a, b)[2] == [1, 4, 4]
    assert _key(lambda x, y: x + y, a.astype(mx.bfloat16), b.astype(mx.bfloat16))[2] == [2, 2]


def test_node_key_is_none_when_an_input_has_no_data():
    a = mx.ones((3,))
    mx.eval(a)
    g = bridge.Graph([mx.exp(a * 2)])
    try:
        assert g.node_key(len(g) - 1) is None          # a * 2 is not computed yet
        assert g.node_key(0) is not None
    finally:
        g.release()
